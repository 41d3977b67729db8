// Which kvcheck-export the adapter converts models with: --export, else
// $KVCHECK_EXPORT (kvcheck sets it to the one beside itself,
// backends/exec/exec_child.h), never a search. The adapter once took the
// newest build/*/tools/kvcheck-export of the checkout, and a rebuild of
// another build folder during a run gave a false P8 failure (issue 33): here
// a child without either must exit 2 although this checkout has builds, and
// a child given $KVCHECK_EXPORT must convert with exactly that binary.
//
//   node test/export_choice.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped.
import assert from "node:assert/strict";
import {chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync} from "node:fs";
import {tmpdir} from "node:os";
import {join, resolve} from "node:path";

import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2] && resolve(process.argv[2]);
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/export_choice.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), "kvcheck-export-choice-"));
const {KVCHECK_EXPORT: _, ...withoutExport} = process.env;
let failed = false;
try {
    // Neither named: exit 2 before anything is loaded.
    const unnamed = new AdapterChild([], withoutExport);
    const {code} = await unnamed.exit;
    assert.equal(code, 2, `without --export or KVCHECK_EXPORT: exit ${code}, expected 2 (${unnamed.stderr})`);
    assert.match(unnamed.stderr, /KVCHECK_EXPORT/);
    console.log("ok: neither --export nor KVCHECK_EXPORT: exit 2");

    const missing = new AdapterChild([], {...withoutExport, KVCHECK_EXPORT: join(scratch, "absent")});
    assert.equal((await missing.exit).code, 2, `a KVCHECK_EXPORT that does not exist: ${missing.stderr}`);
    console.log("ok: a KVCHECK_EXPORT that does not exist: exit 2");

    // KVCHECK_EXPORT names a wrapper that logs its calls: the load uses it.
    const log = join(scratch, "calls.log");
    const wrapper = join(scratch, "kvcheck-export");
    writeFileSync(wrapper, `#!/bin/sh\necho "$@" >> '${log}'\nexec '${exportTool}' "$@"\n`);
    chmodSync(wrapper, 0o755);
    const folder = modelFolder(exportTool, {family: "llama", n_layers: 1, d_model: 8, n_heads: 2, n_kv_heads: 1,
                                            head_dim: 4, d_ff: 8, vocab: 16, max_pos: 8, rope_theta: 10000,
                                            norm_eps: 1e-5, qkv_bias: false}, 1);
    const named = new AdapterChild([], {...withoutExport, KVCHECK_EXPORT: wrapper});
    try {
        await named.ok({op: "hello", protocol: 1});
        await named.ok({op: "load", path: folder});
    } finally {
        await named.close();
        rmSync(folder, {recursive: true, force: true});
    }
    const calls = readFileSync(log, "utf8").trim().split("\n");
    assert.equal(calls.length, 1, `the wrapper saw ${calls.length} calls`);
    assert.match(calls[0], /^--from .*model\.safetensors --out /);
    console.log("ok: the load converted with $KVCHECK_EXPORT");
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.stack ?? error.message}`);
} finally {
    rmSync(scratch, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);

// The adapter's save and restore (--save-restore on; docs/LLAMA_CPP.md,
// "Save and restore") over the protocol: after tokens fed, a truncation and
// another token, a restore gives back the saved sequence (its length, its
// cache snapshot bit for bit), and the next token's logits are the bits of
// an engine that fed the saved tokens and then that token; a restore of a
// sequence never saved is refused (bad_batch) and changes nothing; without
// --save-restore the traits leave the operation out.
//
//   node test/save_restore.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped
// (Node older than 20, or node-llama-cpp not installed: run ci/setup).
import assert from "node:assert/strict";
import {existsSync, rmSync} from "node:fs";

import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/save_restore.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const folder = modelFolder(exportTool, {family: "llama", n_layers: 2, d_model: 8, n_heads: 2, n_kv_heads: 1, head_dim: 4,
                                        d_ff: 8, vocab: 16, max_pos: 16, rope_theta: 10000, norm_eps: 1e-5,
                                        qkv_bias: false}, 5);
const plain = new AdapterChild(["--export", exportTool]);
const adapter = new AdapterChild(["--export", exportTool, "--save-restore", "on"]);
const ok = (message) => adapter.ok(message);

let failed = false;
try {
    const [hello] = await plain.ok({op: "hello", protocol: 1});
    assert.equal(hello.traits.operations.save_restore, false, "declared without --save-restore on");
    const [declared] = await ok({op: "hello", protocol: 1});
    assert.equal(declared.traits.operations.save_restore, true, "not declared with --save-restore on");
    const [{model}] = await ok({op: "load", path: folder});
    const engine = async () => (await ok({op: "create", model, capacity: 8, max_rows: 2, kv_dtype: "f32"}))[0].engine;
    const start = async (e) => (await ok({op: "start", engine: e}))[0].sequence;
    const step = async (e, s, tokens) => (await ok({op: "step", engine: e, entries: [{sequence: s, tokens}]}))[1][0];
    const length = async (e, s) => (await ok({op: "length", engine: e, sequence: s}))[0].length;
    const snapshot = async (e, s) => {
        const layers = [];
        for (const layer of [0, 1]) layers.push(await adapter.cache(e, s, layer));
        return layers;
    };

    const e1 = await engine();
    const s1 = await start(e1);
    await adapter.refused({op: "restore", engine: e1, sequence: s1}, "bad_batch");
    await step(e1, s1, [1, 2, 3, 4]);
    await ok({op: "save", engine: e1, sequence: s1});
    const saved = await snapshot(e1, s1);
    await step(e1, s1, [5, 6]);
    await ok({op: "truncate", engine: e1, sequence: s1, n: 3});
    await step(e1, s1, [7]);
    await ok({op: "restore", engine: e1, sequence: s1});
    assert.equal(await length(e1, s1), 4, "length after the restore");
    const restored = await snapshot(e1, s1);
    restored.forEach((layer, l) => {
        assert.deepEqual(layer.positions, saved[l].positions, `layer ${l} positions`);
        assert.ok(Buffer.from(layer.k.buffer).equals(Buffer.from(saved[l].k.buffer)), `layer ${l} K differs from the save`);
        assert.ok(Buffer.from(layer.v.buffer).equals(Buffer.from(saved[l].v.buffer)), `layer ${l} V differs from the save`);
    });
    const after = await step(e1, s1, [9]);

    const e2 = await engine();
    const s2 = await start(e2);
    await step(e2, s2, [1, 2, 3, 4]);
    const fresh = await step(e2, s2, [9]);
    assert.ok(after.equals(fresh), "the step after the restore differs from an engine that fed the saved tokens");
    console.log("ok: a restore gives back the saved cache and its continuation, bit for bit");
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.message}`);
} finally {
    await adapter.close();
    await plain.close();
    rmSync(folder, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);

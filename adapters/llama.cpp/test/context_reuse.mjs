// A destroyed engine's context is reset and parked for the next create of
// its shape (model_store.mjs), instead of a new one per engine
// (docs/PERFORMANCE.md). A parked context must be a new one to every call:
// here engines leave forks, a pending K shift (queued until a decode), live
// sequences and sequence ids freed out of order behind (node-llama-cpp
// hands freed ids out first, and a step's ids shape its batch: P8 once
// failed so), and the engines after them on the parked context
// must give the same logits, bit for bit, as on a context of a fresh
// adapter (llama.cpp is deterministic: P8 holds bitwise,
// docs/LLAMA_CPP.md). The create trace says that they did reuse it.
//
//   node test/context_reuse.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped.
import assert from "node:assert/strict";
import {existsSync, mkdtempSync, readFileSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";

import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/context_reuse.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

// One engine's calls: two sequences fed together, a fork, a shift, an
// erase; with `leave` the engine ends with a fork and a shift whose K/V
// updates are still queued in llama.cpp, else with a finish of the second
// sequence (its id freed before the first's). Resolves to every step's logits.
async function run(adapter, model, capacity, leave) {
    const [{engine}] = await adapter.ok({op: "create", model, capacity, max_rows: 4, kv_dtype: "f32"});
    const start = async () => (await adapter.ok({op: "start", engine}))[0].sequence;
    const step = async (entries) => (await adapter.ok({op: "step", engine, entries}))[1][0];
    const out = [];
    const a = await start(), b = await start();
    out.push(await step([{sequence: a, tokens: [1, 2, 3]}, {sequence: b, tokens: [4]}]));
    const [{sequence: c}] = await adapter.ok({op: "fork", engine, parent: a, n: 2});
    await adapter.ok({op: "erase", engine, sequence: a, p0: 0, p1: 1});
    await adapter.ok({op: "shift", engine, sequence: a, p0: 1, p1: 3, delta: -1});
    out.push(await step([{sequence: a, tokens: [5]}, {sequence: c, tokens: [6, 7]}, {sequence: b, tokens: [8]}]));
    if (leave) {
        await adapter.ok({op: "fork", engine, parent: b, n: 1});
        await adapter.ok({op: "shift", engine, sequence: c, p0: 0, p1: 4, delta: 3});
    } else {
        await adapter.ok({op: "finish", engine, sequence: b});
    }
    await adapter.ok({op: "destroy", engine});
    return Buffer.concat(out);
}

const scratch = mkdtempSync(join(tmpdir(), "kvcheck-context-reuse-"));
const log = join(scratch, "trace.jsonl");
const folder = modelFolder(exportTool, {family: "llama", n_layers: 2, d_model: 8, n_heads: 2, n_kv_heads: 1,
                                        head_dim: 4, d_ff: 8, vocab: 16, max_pos: 12, rope_theta: 10000,
                                        norm_eps: 1e-5, qkv_bias: false}, 3);
// The model of the P8 failure the id reset fixed (1 layer, d_model 4, one head of 2).
const tinyFolder = modelFolder(exportTool, {family: "llama", n_layers: 1, d_model: 4, n_heads: 1, n_kv_heads: 1,
                                            head_dim: 2, d_ff: 16, vocab: 2, max_pos: 1, rope_theta: 10000,
                                            norm_eps: 1e-5, qkv_bias: false}, 0);
let failed = false;
try {
    const reference = [];
    for (const capacity of [8, 10]) {
        const fresh = new AdapterChild(["--export", exportTool]);
        await fresh.ok({op: "hello", protocol: 1});
        const [{model}] = await fresh.ok({op: "load", path: folder});
        reference.push(await run(fresh, model, capacity, false));
        await fresh.close();
    }
    const adapter = new AdapterChild(["--export", exportTool], {...process.env, KVCHECK_LLAMA_TRACE: log});
    await adapter.ok({op: "hello", protocol: 1});
    const [{model}] = await adapter.ok({op: "load", path: folder});
    await run(adapter, model, 8, false);
    const again = await run(adapter, model, 8, false);
    await run(adapter, model, 10, true);
    const other = await run(adapter, model, 10, true);
    await adapter.close();
    const creates = readFileSync(log, "utf8").trim().split("\n").map((line) => JSON.parse(line))
        .filter((entry) => entry.op === "create").map((entry) => entry.result);
    assert.deepEqual(creates, ["new", "parked", "parked", "parked"], "the engines after the first reuse its context");
    assert.ok(again.equals(reference[0]), "an engine on a parked context differs from one on a fresh adapter");
    assert.ok(other.equals(reference[1]), "capacity 10 on a parked context differs from a fresh adapter's");
    console.log("ok: engines on a parked context give a fresh context's bits (capacity 8 and 10)");

    // The shrunk P8 failure itself: two sequences fed one token each in one
    // step, the second finished (its id freed first), the same again on the
    // parked context.
    const p8 = new AdapterChild(["--export", exportTool]);
    await p8.ok({op: "hello", protocol: 1});
    const [{model: tiny}] = await p8.ok({op: "load", path: tinyFolder});
    const twice = [];
    for (let run = 0; run < 2; ++run) {
        const [{engine}] = await p8.ok({op: "create", model: tiny, capacity: 1, max_rows: 2, kv_dtype: "f32"});
        const [{sequence: s0}] = await p8.ok({op: "start", engine});
        const [{sequence: s1}] = await p8.ok({op: "start", engine});
        twice.push((await p8.ok({op: "step", engine, entries: [{sequence: s0, tokens: [0]}, {sequence: s1, tokens: [0]}]}))[1][0]);
        await p8.ok({op: "finish", engine, sequence: s1});
        await p8.ok({op: "destroy", engine});
    }
    await p8.close();
    assert.ok(twice[1].equals(twice[0]), "the P8 case: the run on the parked context differs from the first");
    console.log("ok: a step after an engine that freed its ids out of order gives the same bits");
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.stack ?? error.message}`);
} finally {
    rmSync(folder, {recursive: true, force: true});
    rmSync(tinyFolder, {recursive: true, force: true});
    rmSync(scratch, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);

// The adapter's erase and shift refusals (docs/OPERATIONS.md, "Erase and
// shift"; docs/ENGINE_PROTOCOL.md): kvcheck never sends a call it knows to be
// refused (a scenario with one is invalid), so no property reaches these
// paths; this test speaks the protocol to engine.mjs itself. Each refusal must
// be the protocol's kind and change nothing: the step after the refusals
// gives the same bits as on an engine that never saw them (P8 holds bitwise
// on llama.cpp, docs/LLAMA_CPP.md). Also: the max_pos refusal of a step after
// an erase (the cells would fit, the positions would not) and `length`
// counting cells.
//
//   node test/erase_shift_refusals.mjs PATH/TO/kvcheck-export
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
    console.error("usage: node test/erase_shift_refusals.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

// A tiny llama model.
const kMaxPos = 8;
const folder = modelFolder(exportTool, {family: "llama", n_layers: 2, d_model: 8, n_heads: 2, n_kv_heads: 1, head_dim: 4,
                                        d_ff: 8, vocab: 16, max_pos: kMaxPos, rope_theta: 10000, norm_eps: 1e-5,
                                        qkv_bias: false}, 5);
const adapter = new AdapterChild(["--export", exportTool]);
const ok = (message) => adapter.ok(message);
const refused = (message, kind) => adapter.refused(message, kind);

let failed = false;
try {
    await ok({op: "hello", protocol: 1});
    const [{model}] = await ok({op: "load", path: folder});
    const engine = async () => (await ok({op: "create", model, capacity: 6, max_rows: 2, kv_dtype: "f32"}))[0].engine;
    const start = async (e) => (await ok({op: "start", engine: e}))[0].sequence;
    const step = async (e, s, tokens) => (await ok({op: "step", engine: e, entries: [{sequence: s, tokens}]}))[1][0];
    const length = async (e, s) => (await ok({op: "length", engine: e, sequence: s}))[0].length;

    // Refusals on a sequence holding positions 0..3, then one more token.
    const e1 = await engine();
    const s1 = await start(e1);
    await step(e1, s1, [1, 2, 3, 4]);
    const on = (op, fields) => ({op, engine: e1, sequence: s1, ...fields});
    await refused(on("erase", {p0: -1, p1: 2}), "bad_batch");
    await refused(on("erase", {p0: 3, p1: 2}), "bad_batch");
    await refused(on("shift", {p0: -1, p1: 2, delta: 1}), "bad_batch");
    await refused(on("shift", {p0: 0, p1: 1, delta: -1}), "bad_batch");          // position -1
    await refused(on("shift", {p0: 3, p1: 4, delta: kMaxPos - 3}), "bad_batch");  // reaches max_pos
    await refused(on("shift", {p0: 0, p1: 1, delta: 1}), "bad_batch");           // onto position 1
    await refused(on("shift", {p0: 0, p1: 2, delta: 3}), "bad_batch");           // 0 onto 3, held outside the range
    await refused({op: "erase", engine: e1, sequence: 987654, p0: 0, p1: 1}, "unknown_sequence");
    await refused({op: "shift", engine: e1, sequence: 987654, p0: 0, p1: 1, delta: 1}, "unknown_sequence");
    // Calls that move no cell change nothing either (not refusals).
    await ok(on("erase", {p0: 4, p1: kMaxPos}));
    await ok(on("shift", {p0: 4, p1: kMaxPos, delta: -4}));
    await ok(on("shift", {p0: 0, p1: 4, delta: 0}));
    assert.equal(await length(e1, s1), 4, "length after refusals");
    const after = await step(e1, s1, [5]);

    const e2 = await engine();
    const s2 = await start(e2);
    await step(e2, s2, [1, 2, 3, 4]);
    const fresh = await step(e2, s2, [5]);
    assert.ok(after.equals(fresh), "the step after the refusals differs from an engine that never saw them");
    console.log("ok: the step after the refusals gives the same bits as a fresh engine");

    // After an erase the positions run ahead of the cells: 2 cells at 4, 5,
    // the next position 6; 3 more tokens fit 6 cells but pass max_pos 8.
    const s3 = await start(e2);
    await step(e2, s3, [1, 2, 3, 4, 5, 6]);
    await ok({op: "erase", engine: e2, sequence: s3, p0: 0, p1: 4});
    assert.equal(await length(e2, s3), 2, "length after erasing 4 of 6 cells");
    await refused({op: "step", engine: e2, entries: [{sequence: s3, tokens: [7, 8, 9]}]}, "capacity");
    await refused({op: "shift", engine: e2, sequence: s3, p0: 4, p1: 6, delta: 3}, "bad_batch");  // 5 + 3 = max_pos
    await ok({op: "shift", engine: e2, sequence: s3, p0: 4, p1: 6, delta: -4});  // now 0, 1: next 2
    await step(e2, s3, [7, 8, 9]);
    assert.equal(await length(e2, s3), 5, "length after the shift and a step of 3");
    console.log("ok: max_pos refusal after an erase; a shift by -4 frees the positions");
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.message}`);
} finally {
    await adapter.close();
    rmSync(folder, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);

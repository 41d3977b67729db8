// llama.cpp's sequence state saved after a fork and before the next decode
// holds stale K/V (docs/findings/llama_cpp_state_after_fork_stale.md).
// node-llama-cpp 3.22.1 creates its contexts with kv_unified = false, so each
// sequence has its own KV stream and a fork (llama_memory_seq_cp into another
// stream) only queues the buffer copy for the next llama_decode; the state
// file written in between holds the destination stream's old buffers.
// Prints layer 0's first K elements of the parent and of the fork (saved
// before and after a decode elsewhere), then restores the stale state into a
// fresh sequence and compares the next token's logits with the parent's.
// Then the same for a sequence saved between a context shift and the next
// decode (the pending K rotation).
//   node adapters/llama.cpp/repro/state_after_fork_stale.mjs [KVCHECK_EXPORT]
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {getLlama, LlamaLogLevel} from "node-llama-cpp";

import {parseSequenceState} from "../state_file.mjs";

const exporter = process.argv[2] ?? process.env.KVCHECK_EXPORT ?? "build/release/tools/kvcheck-export";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-fork-"));
const gguf = path.join(dir, "m.gguf");
execFileSync(exporter, ["--family", "llama", "--n-layers", "2", "--d-model", "64", "--n-heads", "2", "--n-kv-heads", "1",
                        "--head-dim", "32", "--d-ff", "96", "--vocab", "64", "--max-pos", "16", "--out", gguf],
             {stdio: "ignore"});
const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0});
const context = await model.createContext({contextSize: 9, sequences: 3, threads: 1, flashAttention: false,
                                           experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const file = path.join(dir, "state.bin");
async function save(sequence, tag) {
    await sequence.saveStateToFile(file);
    const state = parseSequenceState(fs.readFileSync(file), {layers: 2, width: 32, type: "f32"});
    console.log(`${tag}: positions ${Array.from(state.positions)}, layer 0 K[0][0..2] ${Array.from(state.layers[0].k.slice(0, 3))}`);
    return fs.readFileSync(file);
}

const parent = context.getSequence();
await parent.controlledEvaluate([[5, {}], [6, {}]]);
const child = context.getSequence();
// node-llama-cpp's fork (private in 3.22.1): llama_memory_seq_cp of the parent's cells.
if (!await child._copyStateFromOtherSequence(parent, 2)) throw new Error("the copy failed");
await save(parent, "parent                         ");
const stale = await save(child, "fork, saved before any decode  ");
const next = async (sequence) => (await sequence.controlledEvaluate([[7, {generateNext: {logits: true}}]]))[0].next.logits;
const expected = await next(parent);  // this decode also runs the queued stream copy
await save(child, "fork, saved after a decode     ");
await child.dispose();
const restored = context.getSequence();
fs.writeFileSync(file, stale);
await restored.loadStateFromFile(file, {acceptRisk: true});
const got = await next(restored);
let worst = 0;
for (const [token, value] of expected) worst = Math.max(worst, Math.abs(value - got.get(token)));
console.log(`next token's logits, the stale state restored vs the parent: largest difference ${worst}`);
await restored.dispose();

// The same for a pending K shift: a context shift (llama_memory_seq_rm of
// position 0, llama_memory_seq_add of [1, 4) by -1, through node-llama-cpp's
// private addon object, as adapters/llama.cpp/engine.mjs does) moves the
// cells' positions at once and queues the K rotation for the next decode;
// the state saved in between has the new positions and un-rotated K.
const shifted = context.getSequence();
await shifted.controlledEvaluate([[5, {}], [6, {}], [7, {}], [8, {}]]);
if (!context._ctx.removeTokenCellsFromSequence(shifted._sequenceId, 0, 1)) throw new Error("seq_rm failed");
context._ctx.shiftSequenceTokenCells(shifted._sequenceId, 1, 4, -1);
shifted._contextTokens = [6, 7, 8];  // node-llama-cpp's bookkeeping: positions 0..2 now
shifted._nextTokenIndex = 3;
const unrotated = await save(shifted, "shifted, saved before any decode");
const shiftedNext = await next(shifted);  // this decode runs the queued rotation
await save(shifted, "shifted, saved after a decode   ");
await shifted.dispose();
const again = context.getSequence();
fs.writeFileSync(file, unrotated);
await again.loadStateFromFile(file, {acceptRisk: true});
const gotShifted = await next(again);
let worstShifted = 0;
for (const [token, value] of shiftedNext) worstShifted = Math.max(worstShifted, Math.abs(value - gotShifted.get(token)));
console.log(`next token's logits, the state saved before the shift's decode restored vs the shifted sequence: largest difference ${worstShifted}`);
fs.rmSync(dir, {recursive: true, force: true});
process.exit(0);

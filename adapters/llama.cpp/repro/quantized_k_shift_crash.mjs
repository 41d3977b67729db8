// Reproduction for docs/findings/llama_cpp_quantized_k_shift_crash.md:
// with a quantized K cache and a head size that is not a multiple of 64,
// the first decode after a K shift (positions moved with llama_memory_seq_add)
// crashes the process with SIGSEGV.
//
//   build/release/tools/kvcheck-export --family llama --vocab 256 --d-model 64 \
//       --n-heads 2 --n-kv-heads 2 --head-dim 32 --out /tmp/k32.gguf
//   node adapters/llama.cpp/repro/quantized_k_shift_crash.mjs /tmp/k32.gguf [K_TYPE] [OP]
//
// K_TYPE: F32, F16, Q8_0 (default), Q4_0. V stays F32, flash attention off.
// OP: erase-middle (default): the public eraseContextTokenRanges on positions
//     [4, 8) of 16, which node-llama-cpp implements as seq_rm [4, 8) then
//     seq_add [8, 16) by -4;
//     shift: no erase in the middle: seq_rm [12, 16), then seq_add [8, 12) by +4,
//     through node-llama-cpp's private addon context (_ctx, _sequenceId).
// Prints "survived" and exits 0 when the next decode returns; the crash kills
// the process (exit status 139 from a shell).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, kType = "Q8_0", op = "erase-middle"] = process.argv.slice(2);
if (modelPath == null || !["erase-middle", "shift"].includes(op)) {
    console.error("usage: quantized_k_shift_crash.mjs MODEL.gguf [K_TYPE] [erase-middle|shift]");
    process.exit(2);
}
const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({
    contextSize: 64, batchSize: 64, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: kType, experimentalKvCacheValueType: "F32"
});
const sequence = context.getSequence();
await sequence.controlledEvaluate(Array.from({length: 16}, (_, i) => (37 * i + 5) % 256));
if (op === "erase-middle") {
    await sequence.eraseContextTokenRanges([{start: 4, end: 8}]);
} else {
    context._ctx.removeTokenCellsFromSequence(sequence._sequenceId, 12, 16);
    context._ctx.shiftSequenceTokenCells(sequence._sequenceId, 8, 12, 4);
}
console.log(`${op} done with K ${kType}; decoding one more token`);
const [result] = await sequence.controlledEvaluate([[7, {generateNext: {logits: true}}]]);
console.log(`survived: ${result?.next.logits?.size} logits`);
await llama.dispose();

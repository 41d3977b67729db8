// Reproduction for docs/findings/llama_cpp_flash_attn_f32_cache_in_f16.md:
// with an F32 K/V cache, turning flash attention on moves the logits by
// about 1e-3, as far as an F16 cache does, while flash attention off agrees
// with a float64 recompute to about 1e-6. llama.cpp casts an F32 cache to F16
// before ggml_flash_attn_ext (src/llama-graph.cpp, build_attn_mha).
//
//   build/release/tools/kvcheck-export --family llama --vocab 64 --head-dim 32 --out /tmp/h32.gguf
//   node adapters/llama.cpp/repro/flash_attn_f32_cache.mjs /tmp/h32.gguf
//
// Prints the largest |difference| over 32 positions x the vocabulary for:
// F32 cache FA on vs off, F16 cache FA off vs F32 cache FA off.
// Exit codes: 0 printed, 2 bad arguments.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath] = process.argv.slice(2);
if (modelPath == null) {
    console.error("usage: flash_attn_f32_cache.mjs MODEL.gguf");
    process.exit(2);
}
const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const tokens = Array.from({length: 32}, (_, i) => (37 * i + 11) % vocab);

// Logits [32][V] of the whole prompt in one decode.
async function logits(cacheType, flashAttention) {
    const context = await model.createContext({
        contextSize: 64, batchSize: 64, threads: 1, flashAttention,
        experimentalKvCacheKeyType: cacheType, experimentalKvCacheValueType: cacheType
    });
    const sequence = context.getSequence();
    const results = await sequence.controlledEvaluate(tokens.map((t) => [t, {generateNext: {logits: true}}]));
    const rows = results.map((r) => Float64Array.from({length: vocab}, (_, v) => r.next.logits.get(v)));
    await context.dispose();
    return rows;
}

function maxDifference(a, b) {
    let worst = 0;
    a.forEach((row, p) => row.forEach((x, v) => (worst = Math.max(worst, Math.abs(x - b[p][v])))));
    return worst;
}

const f32Off = await logits("F32", false);
const f32On = await logits("F32", true);
const f16Off = await logits("F16", false);
console.log(`F32 cache, flash attention on vs off: max |difference| ${maxDifference(f32On, f32Off).toExponential(2)}`);
console.log(`F16 cache vs F32 cache, flash attention off: max |difference| ${maxDifference(f16Off, f32Off).toExponential(2)}`);
await model.dispose();
await llama.dispose();

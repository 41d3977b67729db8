// Runs a token sequence through llama.cpp (node-llama-cpp's prebuilt CPU
// binary) and prints the raw logits at every position as JSON:
//   {"vocab": V, "context_size": N,
//    "runs": [{"chunk": C, "logits": [[V floats], ...]}, ...]}   one row per token
//
//   node probe_logits.mjs --model M.gguf --tokens 1,2,3 [--chunk N[,N...]]
//        [--kv-type f32|f16|q8_0] [--flash-attention on|off] [--context-size N]
//
// --chunk N evaluates N tokens per decode (default: all at once); 1 is token
// by token, so every step reads the earlier tokens' K/V from the cache. Each
// chunk size in the list is one run over the whole sequence, from an empty
// cache (the sequence's history is cleared between runs), in one process so
// that the model loads once.
// One thread (more than the machine's cores hung at random), nothing compiled
// or downloaded (build "never"), CPU only, and no context shift: a sequence
// that outgrows the context is an error, never a silent erase.
// Exit codes: 0 printed, 2 bad arguments, 1 llama.cpp failed.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {parseArgs} from "node:util";

const kKvTypes = {f32: "F32", f16: "F16", q8_0: "Q8_0"};

function usage(message) {
    console.error(`probe_logits: ${message}`);
    process.exit(2);
}

function parseOptions() {
    let values;
    try {
        ({values} = parseArgs({
            options: {
                "model": {type: "string"},
                "tokens": {type: "string"},
                "chunk": {type: "string"},
                "kv-type": {type: "string", default: "f32"},
                "flash-attention": {type: "string", default: "off"},
                "context-size": {type: "string"}
            }
        }));
    } catch (error) {
        usage(error.message);
    }
    if (values.model == null) usage("--model is required");
    if (values.tokens == null || !/^\d+(,\d+)*$/.test(values.tokens))
        usage(`--tokens: expected comma-separated token ids, got ${JSON.stringify(values.tokens)}`);
    const tokens = values.tokens.split(",").map(Number);
    const positive = (name, text, fallback) => {
        if (text == null) return fallback;
        if (!/^[1-9]\d*$/.test(text)) usage(`--${name}: expected a positive integer, got "${text}"`);
        return Number(text);
    };
    const chunks = (values.chunk ?? String(tokens.length)).split(",")
        .map((text) => positive("chunk", text, tokens.length));
    // node-llama-cpp keeps one cell free: a sequence holds contextSize - 1 tokens.
    const contextSize = positive("context-size", values["context-size"], tokens.length + 1);
    const kvType = kKvTypes[values["kv-type"]];
    if (kvType == null) usage(`--kv-type: expected f32, f16 or q8_0, got "${values["kv-type"]}"`);
    const flash = values["flash-attention"];
    if (flash !== "on" && flash !== "off")
        usage(`--flash-attention: expected on or off, got "${flash}"`);
    return {model: values.model, tokens, chunks, contextSize, kvType, flashAttention: flash === "on"};
}

function refuseContextShift() {
    throw new Error("the sequence outgrew the context; context shift is disabled");
}

// The logits Map (token -> logit) as a dense row, checked to cover the vocabulary.
function denseRow(logits, vocab, position) {
    if (logits == null || logits.size !== vocab)
        throw new Error(`position ${position}: expected ${vocab} logits, got ${logits?.size}`);
    const row = new Array(vocab);
    for (const [token, value] of logits) row[token] = value;
    return row;
}

// Logits at every position, `chunk` tokens per decode. [T][V]
async function evaluate(sequence, tokens, chunk, vocab) {
    const rows = [];
    for (let start = 0; start < tokens.length; start += chunk) {
        const input = tokens.slice(start, start + chunk).map((token) => [token, {generateNext: {logits: true}}]);
        const results = await sequence.controlledEvaluate(input);
        results.forEach((result, k) => rows.push(denseRow(result?.next.logits, vocab, start + k)));
    }
    return rows;
}

async function main() {
    const options = parseOptions();
    const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
    const model = await llama.loadModel({modelPath: options.model, gpuLayers: 0});
    const vocab = model.tokens.trainVocabSize ?? model.fileInfo.metadata.tokenizer.ggml.tokens.length;
    for (const token of options.tokens) {
        if (token >= vocab) usage(`--tokens: token ${token} is out of range [0, ${vocab})`);
    }
    const context = await model.createContext({
        contextSize: options.contextSize,
        batchSize: Math.max(...options.chunks),
        threads: 1,
        flashAttention: options.flashAttention,
        experimentalKvCacheKeyType: options.kvType,
        experimentalKvCacheValueType: options.kvType,
        sequences: 1
    });
    const sequence = context.getSequence({contextShift: {strategy: refuseContextShift}});
    const runs = [];
    for (const chunk of options.chunks) {
        await sequence.clearHistory();
        runs.push({chunk, logits: await evaluate(sequence, options.tokens, chunk, vocab)});
    }
    console.log(JSON.stringify({vocab, context_size: context.contextSize, runs}));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

main().catch((error) => {
    console.error(`probe_logits: ${error?.stack ?? error}`);
    process.exit(1);
});

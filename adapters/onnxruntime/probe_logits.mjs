// Runs a token sequence through ONNX Runtime (the graph of kvcheck-export,
// GroupQueryAttention with past/present K/V) and prints every position's
// logits as JSON, so that a written model file is checked against kvcheck's
// oracle before any cache property runs (ctest OnnxRuntime.LogitsVsOracle):
//   {"vocab": V, "runs": [{"chunk": C, "logits": [[V floats], ...]}, ...]}
//
//   node probe_logits.mjs --dir DIR --tokens 1,2,3 [--chunk N[,N...]]
//
// DIR holds model.onnx and config.json. --chunk N feeds N tokens per call
// (default: all at once); each chunk size in the list is one run from an
// empty cache, so "--chunk 32,1" runs the prompt whole and token by token
// (every later token reading the earlier ones' K/V through past_key/past_value).
// Exit codes: 0 printed, 2 bad arguments, 1 ONNX Runtime failed.
import path from "node:path";
import {parseArgs} from "node:util";

import {GqaModel, readConfig} from "./gqa_model.mjs";

function usage(message) {
    console.error(`probe_logits: ${message}`);
    process.exit(2);
}

function parseOptions() {
    let values;
    try {
        ({values} = parseArgs({options: {dir: {type: "string"}, tokens: {type: "string"}, chunk: {type: "string"}}}));
    } catch (error) {
        usage(error.message);
    }
    if (values.dir == null) usage("--dir is required");
    if (values.tokens == null || !/^\d+(,\d+)*$/.test(values.tokens))
        usage(`--tokens: expected comma-separated token ids, got ${JSON.stringify(values.tokens)}`);
    const tokens = values.tokens.split(",").map(Number);
    const chunks = (values.chunk ?? String(tokens.length)).split(",").map((text) => {
        if (!/^[1-9]\d*$/.test(text)) usage(`--chunk: expected a positive integer, got "${text}"`);
        return Number(text);
    });
    return {dir: values.dir, tokens, chunks};
}

async function main() {
    const {dir, tokens, chunks} = parseOptions();
    const config = readConfig(dir);
    const model = await GqaModel.open(path.join(dir, "model.onnx"), config, {threads: 1, optimization: "all"});
    const {n_layers: layers, n_kv_heads: kvh, head_dim: d, vocab} = config;
    const cap = tokens.length;
    const runs = [];
    for (const chunk of chunks) {
        const row = {past: 0, k: [], v: []};
        for (let l = 0; l < layers; ++l) {
            row.k.push(new Float32Array(kvh * cap * d));  // [KVH][cap][D]
            row.v.push(new Float32Array(kvh * cap * d));  // [KVH][cap][D]
        }
        const logits = [];
        for (let at = 0; at < tokens.length; at += chunk) {
            row.tokens = tokens.slice(at, at + chunk);
            const [out] = await model.run([row], cap);
            for (let t = 0; t < row.tokens.length; ++t) logits.push(Array.from(out.subarray(t * vocab, (t + 1) * vocab)));
            row.past += row.tokens.length;
        }
        runs.push({chunk, logits});
    }
    process.stdout.write(JSON.stringify({vocab, runs}) + "\n");
}

main().catch((error) => {
    console.error(`probe_logits: ${error?.stack ?? error}`);
    process.exit(1);
});

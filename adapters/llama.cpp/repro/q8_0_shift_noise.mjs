// Where a K shift with a q8_0 cache does not crash (head_dim a multiple of
// 64, K stored Hadamard-rotated: docs/findings/llama_cpp_quantized_k_shift_crash.md),
// is the shifted cache right? A context shift (4 tokens, erase position 0,
// shift [1, 4) by -1, one more token) with a q8_0 cache against the same on
// an f32 cache, beside a fresh run of the 3 kept tokens and the next token
// on both: the shifted q8_0 run should be as far from its f32 twin as the
// fresh q8_0 run is from its own (q8_0's noise), not further. Flash
// attention on (llama.cpp needs it for a q8_0 V).
//   node adapters/llama.cpp/repro/q8_0_shift_noise.mjs PATH/TO/kvcheck-export
import fs from "node:fs";

import {AdapterChild, modelFolder} from "../test/protocol_client.mjs";

const exportTool = process.argv[2];
const floats = (bytes) => new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
const largest = (a, b) => a.reduce((worst, x, i) => Math.max(worst, Math.abs(x - b[i])), 0);

// The last step's logits: `shifted` feeds 5 6 7 8, erases position 0, shifts
// [1, 4) by -1; the fresh run feeds 6 7 8. Then token 9 in both.
async function logits(adapter, model, kv, shifted) {
    const [{engine}] = await adapter.ok({op: "create", model, capacity: 8, max_rows: 1, kv_dtype: kv});
    const [{sequence}] = await adapter.ok({op: "start", engine});
    const step = async (tokens) => floats((await adapter.ok({op: "step", engine, entries: [{sequence, tokens}]}))[1][0]);
    if (shifted) {
        await step([5, 6, 7, 8]);
        await adapter.ok({op: "erase", engine, sequence, p0: 0, p1: 1});
        await adapter.ok({op: "shift", engine, sequence, p0: 1, p1: 4, delta: -1});
    } else {
        await step([6, 7, 8]);
    }
    const out = await step([9]);
    await adapter.ok({op: "destroy", engine});
    return out;
}

for (const headDim of [64, 128]) {
    const folder = modelFolder(exportTool, {family: "llama", n_layers: 2, d_model: 32, n_heads: 2, n_kv_heads: 2,
                                            head_dim: headDim, d_ff: 64, vocab: 64, max_pos: 8, rope_theta: 10000,
                                            norm_eps: 1e-5, qkv_bias: false}, headDim);
    const run = async (kv, shifted) => {
        const adapter = new AdapterChild(["--export", exportTool, "--kv", kv, "--flash-attn", "on"]);
        await adapter.ok({op: "hello", protocol: 1});
        const [{model}] = await adapter.ok({op: "load", path: folder});
        const out = await logits(adapter, model, kv, shifted);
        await adapter.close();
        return out;
    };
    const f32 = await run("f32", false);
    const q8Fresh = await run("q8_0", false);
    const q8Shifted = await run("q8_0", true);
    const f32Shifted = await run("f32", true);
    console.log(`head_dim ${headDim}: max |q8_0 - f32| of the next token's logits: ` +
                `after the shift ${largest(q8Shifted, f32Shifted).toExponential(3)}, ` +
                `fresh ${largest(q8Fresh, f32).toExponential(3)} ` +
                `(f32 shifted vs fresh, the erased token's trace in layer 1: ${largest(f32Shifted, f32).toExponential(3)})`);
    fs.rmSync(folder, {recursive: true, force: true});
}

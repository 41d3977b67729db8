// llama.cpp's q8_0 K/V: codes from the unrounded scale, an f16 scale stored
// (docs/findings/llama_cpp_q8_0_f16_scale.md). Runs the corpus case
// q8_0_f16_scale.cache_state.fails.case's model (1 layer, head_dim 32,
// weight seed 0, token 7) with an f32 cache and with a q8_0 cache, and shows
// for layer 0's K row: llama.cpp's stored codes and scale are what the CPU
// backend's quantize_row_q8_0 computes from the f32 row, and its elements lie
// up to 0.5 + 127 |d - fp16(d)| / fp16(d) stored scales from the f32 value,
// past half a code.
//   node adapters/llama.cpp/repro/q8_0_f16_scale.mjs [KVCHECK_EXPORT]
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {getLlama, LlamaLogLevel} from "node-llama-cpp";

import {halfToFloat, parseSequenceState} from "../state_file.mjs";

const exporter = process.argv[2] ?? process.env.KVCHECK_EXPORT ?? "build/release/tools/kvcheck-export";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-q8-"));
const gguf = path.join(dir, "m.gguf");
execFileSync(exporter, ["--family", "llama", "--n-layers", "1", "--d-model", "4", "--n-heads", "1", "--n-kv-heads", "1",
                        "--head-dim", "32", "--d-ff", "4", "--vocab", "8", "--max-pos", "2", "--norm-eps", "1e-5",
                        "--seed", "0", "--out", gguf], {stdio: "ignore"});
const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0});

async function stored(type) {
    const context = await model.createContext({contextSize: 2, sequences: 1, threads: 1, flashAttention: type !== "F32",
                                               experimentalKvCacheKeyType: type, experimentalKvCacheValueType: type});
    const sequence = context.getSequence();
    await sequence.controlledEvaluate([[7, {}]]);
    const file = path.join(dir, `${type}.bin`);
    await sequence.saveStateToFile(file);
    const bytes = fs.readFileSync(file);
    await context.dispose();
    return bytes;
}

const f32 = parseSequenceState(await stored("F32"), {layers: 1, width: 32, type: "f32"}).layers[0].k;
const q8bytes = await stored("Q8_0");
const q8 = parseSequenceState(q8bytes, {layers: 1, width: 32, type: "q8_0"}).layers[0].k;
// The one K block: 34 bytes right before the V type of the state file's end
// (1 cell, 1 layer): K type i32, K row size u64, then the block.
const kBlock = q8bytes.length - (4 + 8 + 34) - 34;
const scale = halfToFloat(q8bytes.readUInt16LE(kBlock));
const codes = Array.from({length: 32}, (_, i) => q8bytes.readInt8(kBlock + 2 + i));

// quantize_row_q8_0 of the CPU backend (ggml/src/ggml-cpu/arch/x86/quants.c,
// the path ggml_cpy into a q8_0 cache takes here): d = amax / 127 stored as
// f16, codes round-half-even(x * (127 / amax)), from the unrounded scale.
const amax = Math.max(...f32.map(Math.abs));
const d = Math.fround(amax / 127), id = amax ? Math.fround(127 / amax) : 0;
const halfEven = (y) => (Math.abs(y % 1) === 0.5 ? 2 * Math.round(y / 2) : Math.round(y));
const ref = Array.from(f32, (x) => halfEven(Math.fround(x * id)));
console.log(`f32 K amax ${amax}; d = amax/127 = ${d}; stored f16 scale ${scale} (d/scale - 1 = ${(d / scale - 1).toExponential(3)})`);
console.log(`stored codes equal quantize_row_q8_0's from the f32 row: ${codes.every((q, i) => q === ref[i])}`);
let worst = 0, at = 0;
f32.forEach((x, i) => {
    const e = Math.abs(q8[i] - x) / scale;
    if (e > worst) [worst, at] = [e, i];
});
console.log(`largest |stored - f32 value| = ${worst.toFixed(4)} stored scales, at dim ${at} (code ${codes[at]}, f32 ${f32[at]}, stored ${q8[at]})`);
console.log(`half a code of the stored scale is 0.5; llama.cpp's arithmetic allows 0.5 + 127 |d - s| / s = ${(0.5 + 127 * Math.abs(d - scale) / scale).toFixed(4)}`);
fs.rmSync(dir, {recursive: true, force: true});
process.exit(0);

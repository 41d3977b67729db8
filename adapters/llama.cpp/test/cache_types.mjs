// The adapter's cache types beyond f32, f16, q8_0 and q4_0: bf16, q5_0,
// q5_1 and different K and V types (--kv-k, --kv-v: llama.cpp's type_k and
// type_v through node-llama-cpp's experimentalKvCacheKeyType / ValueType).
// Layer 0's K and V before the store are f32 arithmetic in every mode, so a
// cache of type T holds exactly T's rounding of the f32 cache's layer 0
// (the same model, tokens and flash attention): bf16 and f16 bit for bit,
// q8_0, q5_0 and q5_1 within their storage error. The snapshot must read each of K and V in
// its own type, and the traits must declare K's as kv_dtypes and V's as
// arithmetic.v_dtype, with the head sizes real models use (head_dims).
// Also the options' refusals: a quantized V without flash attention, an
// unknown type.
//
//   node test/cache_types.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped.
import assert from "node:assert/strict";
import {spawnSync} from "node:child_process";
import {existsSync, rmSync} from "node:fs";
import {join} from "node:path";

import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {adapterDir, skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/cache_types.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const kTokens = [3, 1, 4, 1, 5];
const kHeadDim = 32;

// The traits and layer 0's snapshot of kTokens in one step, in one mode.
async function run(folder, args, kvDtype) {
    const adapter = new AdapterChild(["--export", exportTool, "--flash-attn", "on", ...args]);
    try {
        const [{traits}] = await adapter.ok({op: "hello", protocol: 1});
        const [{model}] = await adapter.ok({op: "load", path: folder});
        const [{engine}] = await adapter.ok({op: "create", model, capacity: 8, max_rows: 1, kv_dtype: kvDtype});
        const [{sequence}] = await adapter.ok({op: "start", engine});
        await adapter.ok({op: "step", engine, entries: [{sequence, tokens: kTokens}]});
        return {traits, cache: await adapter.cache(engine, sequence, 0)};
    } finally {
        await adapter.close();
    }
}

// Round to nearest even at f16 (normal and subnormal): x / ulp is exact.
function f16Round(x) {
    if (x === 0 || !Number.isFinite(x)) return x;
    let e = Math.floor(Math.log2(Math.abs(x)));
    if (2 ** e > Math.abs(x)) --e;
    if (2 ** (e + 1) <= Math.abs(x)) ++e;
    e = Math.max(e, -14);
    const ulp = 2 ** (e - 10);
    const q = x / ulp, f = Math.floor(q), r = q - f;
    const n = r > 0.5 || (r === 0.5 && f % 2 !== 0) ? f + 1 : f;
    return n * ulp;
}

// bf16: round to nearest even on the f32 bits (ggml_compute_fp32_to_bf16).
function bf16Round(x) {
    const view = new DataView(new ArrayBuffer(4));
    view.setFloat32(0, x);
    const bits = view.getUint32(0);
    const rounded = (bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000;
    view.setUint32(0, rounded >>> 0);
    return view.getFloat32(0);
}

// Every element of `got` is T's rounding of `f32`'s.
function expectRounded(got, f32, type, what) {
    assert.equal(got.length, f32.length, `${what}: lengths`);
    for (let i = 0; i < got.length; ++i) {
        const want = type === "f16" ? f16Round(f32[i]) : bf16Round(f32[i]);
        assert.equal(got[i], want, `${what}[${i}]: ${got[i]}, ${type} of the f32 cache's ${f32[i]} is ${want}`);
    }
}

// Per element, within ggml's storage error of its block of 32 (one head
// here): q8_0 0.5622 amax/127 (docs/TOLERANCE.md, "ggml's q8_0"), q5_0
// 1.0079 amax/16 ("ggml's q5_0"), q5_1 0.5152 (max - min)/31 + 2^-11 |min|
// ("ggml's q5_1"); and not an f16 rounding throughout.
const kStorage = {q8_0: 0.5622 / 127, q5_0: 1.0079 / 16, q5_1: 0.5152 / 31};
function expectQuantized(got, f32, type, what) {
    for (let base = 0; base < f32.length; base += kHeadDim) {
        let amax = 0, min = Infinity, max = -Infinity;
        for (let i = base; i < base + kHeadDim; ++i) {
            amax = Math.max(amax, Math.abs(f32[i]));
            min = Math.min(min, f32[i]), max = Math.max(max, f32[i]);
        }
        const allowed = type === "q5_1"
            ? (kStorage[type] * (max - min) + 2 ** -11 * Math.abs(min)) * (1 + 2 ** -10) + 32 * 2 ** -25
            : kStorage[type] * amax * (1 + 2 ** -10) + 127 * 2 ** -25;
        for (let i = base; i < base + kHeadDim; ++i) {
            assert.ok(Math.abs(got[i] - f32[i]) <= allowed,
                      `${what}[${i}]: ${got[i]} is ${Math.abs(got[i] - f32[i])} from the f32 cache's ${f32[i]}, ${type} allows ${allowed}`);
        }
    }
    assert.ok(got.some((x, i) => x !== f16Round(f32[i])), `${what}: every element is f16's rounding (not ${type})`);
}

let failed = false;
const folder = modelFolder(exportTool, {
    family: "llama", n_layers: 1, d_model: 8, n_heads: 2, n_kv_heads: 1, head_dim: kHeadDim, d_ff: 8, vocab: 16,
    max_pos: 8, rope_theta: 10000, norm_eps: 1e-5, qkv_bias: false}, 7);
try {
    const f32 = (await run(folder, ["--kv", "f32"], "f32")).cache;

    const bf16 = await run(folder, ["--kv", "bf16"], "bf16");
    assert.deepEqual(bf16.traits.limits.kv_dtypes, ["bf16"]);
    assert.equal(bf16.traits.arithmetic.v_dtype, undefined, "one type for K and V: no v_dtype");
    assert.deepEqual(bf16.traits.limits.head_dims, [64, 80, 96, 128]);
    expectRounded(bf16.cache.k, f32.k, "bf16", "bf16 K");
    expectRounded(bf16.cache.v, f32.v, "bf16", "bf16 V");
    console.log("ok: --kv bf16: layer 0's K and V are bf16 of the f32 cache's, bit for bit");

    const mixed = await run(folder, ["--kv-k", "q8_0", "--kv-v", "f16"], "q8_0");
    assert.deepEqual(mixed.traits.limits.kv_dtypes, ["q8_0"]);
    assert.equal(mixed.traits.arithmetic.v_dtype, "f16");
    assert.equal(mixed.traits.arithmetic.value_accumulation, "f16", "an f16 V sums in f16 (VKQ16)");
    assert.equal(mixed.traits.identity.name, "llama.cpp-k-q8_0-v-f16-fa-on-rot-off");
    expectQuantized(mixed.cache.k, f32.k, "q8_0", "K q8_0");
    expectRounded(mixed.cache.v, f32.v, "f16", "V f16");
    console.log("ok: --kv-k q8_0 --kv-v f16: K within q8_0's storage error, V f16 of the f32 cache's");

    const swapped = await run(folder, ["--kv-k", "f16", "--kv-v", "q8_0"], "f16");
    assert.equal(swapped.traits.arithmetic.v_dtype, "q8_0");
    assert.equal(swapped.traits.arithmetic.value_accumulation, "f32", "a q8_0 V is widened and summed in f32");
    expectRounded(swapped.cache.k, f32.k, "f16", "K f16");
    expectQuantized(swapped.cache.v, f32.v, "q8_0", "V q8_0");
    console.log("ok: --kv-k f16 --kv-v q8_0: K f16 of the f32 cache's, V within q8_0's storage error");

    const q5 = await run(folder, ["--kv", "q5_0"], "q5_0");
    assert.deepEqual(q5.traits.limits.kv_dtypes, ["q5_0"]);
    assert.equal(q5.traits.limits.head_dim_multiple, 32);
    assert.equal(q5.traits.arithmetic.kv_quantizer, "ggml");
    expectQuantized(q5.cache.k, f32.k, "q5_0", "q5_0 K");
    expectQuantized(q5.cache.v, f32.v, "q5_0", "q5_0 V");
    console.log("ok: --kv q5_0: layer 0's K and V within q5_0's storage error of the f32 cache's");

    const q5_1 = await run(folder, ["--kv", "q5_1"], "q5_1");
    assert.deepEqual(q5_1.traits.limits.kv_dtypes, ["q5_1"]);
    assert.equal(q5_1.traits.arithmetic.queries_rounded_to_kv_dtype, true, "q is quantized to q8_1");
    expectQuantized(q5_1.cache.k, f32.k, "q5_1", "q5_1 K");
    expectQuantized(q5_1.cache.v, f32.v, "q5_1", "q5_1 V");
    console.log("ok: --kv q5_1: layer 0's K and V within q5_1's storage error of the f32 cache's");

    for (const [args, message] of [
        [["--kv-k", "f16", "--kv-v", "q8_0", "--flash-attn", "off"], /V cache type q8_0 needs --flash-attn on/],
        [["--kv-k", "q9"], /--kv-k: expected one of f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, got "q9"/]]) {
        const r = spawnSync(process.execPath, [join(adapterDir, "engine.mjs"), "--export", exportTool, ...args],
                            {input: "", encoding: "utf8"});
        assert.equal(r.status, 2, `${args.join(" ")}: exit ${r.status}`);
        assert.match(r.stderr, message);
        console.log(`ok: ${args.join(" ")} refused: ${r.stderr.trim()}`);
    }
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.stack ?? error.message}`);
} finally {
    rmSync(folder, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);

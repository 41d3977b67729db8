// adapters/llama.cpp/state_file.mjs against real and built state files.
//
// Real bytes: test/state_files/{f32,f16,q8_0}.bin are what node-llama-cpp
// 3.22.1's saveStateToFile wrote for sequence 1 of a 2-sequence context, after
// tokens 7 and 3 of the model `kvcheck-export --family llama --n-layers 1
// --d-model 4 --n-heads 1 --n-kv-heads 1 --head-dim 32 --d-ff 4 --vocab 8
// --max-pos 4 --norm-eps 1e-5 --seed 0` (f32 and f16 without flash attention,
// so V transposed: llama.cpp sets attn_v_trans = !flash_attn; q8_0 with it,
// V in rows). The three must agree the way storage does: f16 is the f32
// value rounded to nearest, q8_0's codes are quantize_row_q8_0's from the f32
// row. Built bytes: both V layouts and every malformation the parser must
// refuse.
//
//   node adapters/llama.cpp/test/state_file_test.mjs
//
// Needs no node_modules. Exit codes: 0 all held, 1 a check failed.
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";
import {dirname, join} from "node:path";
import {fileURLToPath} from "node:url";

import {cacheRotations, halfToFloat, parseSequenceState, snapshotLayer, StateFileError, unpermuteHeads,
        unrotateRuns} from "../state_file.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const real = (name) => readFileSync(join(here, "state_files", `${name}.bin`));
let checks = 0;
function check(name, body) {
    body();
    ++checks;
    console.log(`ok ${name}`);
}

// ---- real bytes -------------------------------------------------------------

const expect = (type) => ({layers: 1, width: 32, type, seqId: 1});
const f32 = parseSequenceState(real("f32"), expect("f32"));
const f16 = parseSequenceState(real("f16"), expect("f16"));
const q8 = parseSequenceState(real("q8_0"), expect("q8_0"));

check("real files: V transposed exactly without flash attention", () => {
    assert.equal(f32.vTrans, 1);
    assert.equal(f16.vTrans, 1);
    assert.equal(q8.vTrans, 0);
});

check("real f32: tokens, positions, finite values", () => {
    for (const state of [f32, f16, q8]) {
        assert.deepEqual(Array.from(state.tokens), [7, 3]);
        assert.deepEqual(Array.from(state.positions), [0, 1]);
    }
    for (const x of [...f32.layers[0].k, ...f32.layers[0].v]) assert.ok(Number.isFinite(x) && Math.abs(x) < 100);
    // Position 0 and 1 differ in K (RoPE, other token) and in V (other token).
    assert.notDeepEqual(f32.layers[0].k.slice(0, 32), f32.layers[0].k.slice(32));
});

check("real f16 = the f32 values rounded to f16", () => {
    for (const part of ["k", "v"]) {
        f32.layers[0][part].forEach((x, i) => {
            const y = f16.layers[0][part][i];
            assert.ok(Math.abs(y - x) <= Math.abs(x) * 2 ** -11 + 2 ** -25, `${part}[${i}]: f16 ${y}, f32 ${x}`);
        });
    }
});

check("real q8_0 = quantize_row_q8_0 of the f32 values", () => {
    for (const part of ["k", "v"]) {
        for (let cell = 0; cell < 2; ++cell) {
            const row = f32.layers[0][part].subarray(32 * cell, 32 * cell + 32);
            const amax = Math.max(...Array.from(row, Math.abs));
            const d = Math.fround(amax / 127), id = Math.fround(1 / d);
            row.forEach((x, i) => {
                const code = Math.round(Math.abs(Math.fround(x * id))) * Math.sign(x);
                const got = q8.layers[0][part][32 * cell + i];
                // got = fl(code * s), s = d rounded to f16 (within 2^-11 d): a code
                // one off would be d away
                assert.ok(Math.abs(got - code * d) <= Math.abs(code) * d * (2 ** -11 + 2 ** -23),
                          `${part} cell ${cell} [${i}]: q8_0 ${got}, code ${code} of scale ${d}`);
            });
        }
    }
});

check("snapshot: K un-permuted per head, V as stored, position order", () => {
    const snap = snapshotLayer(f32, 0, {kvHeads: 1, headDim: 32, permuted: true});
    assert.equal(snap.length, 2);
    // canonical element j*16 + i is stored element 2i + j
    for (let i = 0; i < 16; ++i) {
        assert.equal(snap.k[i], f32.layers[0].k[2 * i]);
        assert.equal(snap.k[16 + i], f32.layers[0].k[2 * i + 1]);
    }
    assert.deepEqual(snap.v, f32.layers[0].v);
    assert.deepEqual(snapshotLayer(f32, 0, {kvHeads: 1, headDim: 32, permuted: false}).k, f32.layers[0].k);
});

check("unpermuteHeads: two heads of 4", () => {
    assert.deepEqual(Array.from(unpermuteHeads(Float32Array.from([0, 2, 1, 3, 4, 6, 5, 7]), 2, 4)), [0, 1, 2, 3, 4, 5, 6, 7]);
});

check("cacheRotations: llama.cpp's attn_rot_k / attn_rot_v sizes", () => {
    assert.deepEqual(cacheRotations("q8_0", 64, undefined), {k: 64, v: 64});
    assert.deepEqual(cacheRotations("q8_0", 128, undefined), {k: 128, v: 64});
    assert.deepEqual(cacheRotations("q8_0", 192, undefined), {k: 64, v: 64});
    assert.deepEqual(cacheRotations("q8_0", 256, "0"), {k: 256, v: 64});
    assert.deepEqual(cacheRotations("q8_0", 96, undefined), {k: 0, v: 0});
    assert.deepEqual(cacheRotations("q8_0", 32, undefined), {k: 0, v: 0});
    assert.deepEqual(cacheRotations("q8_0", 64, "1"), {k: 0, v: 0});
    assert.deepEqual(cacheRotations("f16", 64, undefined), {k: 0, v: 0});
    assert.deepEqual(cacheRotations("f32", 128, undefined), {k: 0, v: 0});
    // Each of K and V by its own type (attn_rot_k, attn_rot_v).
    assert.deepEqual(cacheRotations({k: "q8_0", v: "f16"}, 128, undefined), {k: 128, v: 0});
    assert.deepEqual(cacheRotations({k: "f16", v: "q4_0"}, 64, undefined), {k: 0, v: 64});
    assert.deepEqual(cacheRotations({k: "bf16", v: "bf16"}, 64, undefined), {k: 0, v: 0});
});

check("unrotateRuns: H_n is ggml_gen_hadamard's, its own inverse, per run", () => {
    // H_4 = 1/2 [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]] (Sylvester).
    assert.deepEqual(Array.from(unrotateRuns(Float32Array.from([1, 0, 0, 0, 0, 0, 1, 0]), 4)),
                     [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, -0.5, -0.5]);
    const row = Float32Array.from({length: 128}, (_, i) => Math.sin(i + 1));
    for (const n of [64, 128]) {
        const twice = unrotateRuns(unrotateRuns(row, n), n);
        twice.forEach((x, i) => assert.ok(Math.abs(x - row[i]) <= 1e-6, `n ${n} [${i}]: ${x} vs ${row[i]}`));
    }
    assert.equal(unrotateRuns(row, 0), row);
    assert.throws(() => unrotateRuns(row, 96), StateFileError);
});

check("halfToFloat: normal, subnormal, specials", () => {
    assert.equal(halfToFloat(0x3c00), 1);
    assert.equal(halfToFloat(0xc000), -2);
    assert.equal(halfToFloat(0x0001), 2 ** -24);
    assert.equal(halfToFloat(0x7bff), 65504);
    assert.equal(halfToFloat(0x7c00), Infinity);
    assert.ok(Number.isNaN(halfToFloat(0x7e00)));
});

// ---- built bytes ------------------------------------------------------------

// A state file of one stream (after `empty` empty ones) holding `cells`, with
// K and V given as arrays of Uint8Array rows per layer; `vTrans` writes V
// transposed from f32 values [cell][width].
function build({magic = 0x67677371, version = 3, tokens = [], empty = 0, cells, vTrans = 0, layers, seqIds}) {
    const parts = [];
    const u32 = (x) => parts.push(Buffer.from(new Uint32Array([x]).buffer));
    const i32 = (x) => parts.push(Buffer.from(new Int32Array([x]).buffer));
    const u64 = (x) => parts.push(Buffer.from(new BigUint64Array([BigInt(x)]).buffer));
    u32(magic), u32(version), u32(tokens.length);
    tokens.forEach(i32);
    u32(empty + 1);
    for (let s = 0; s < empty; ++s) u32(0);
    u32(cells.length);
    cells.forEach((pos, c) => {
        const ids = seqIds?.[c] ?? [0];
        i32(pos), u32(ids.length);
        ids.forEach(i32);
    });
    u32(vTrans), u32(layers.length);
    for (const layer of layers) {
        i32(layer.kType), u64(layer.k[0].length);
        layer.k.forEach((row) => parts.push(Buffer.from(row)));
    }
    for (const layer of layers) {
        if (vTrans !== 1) {
            i32(layer.vType ?? layer.kType), u64(layer.v[0].length);
            layer.v.forEach((row) => parts.push(Buffer.from(row)));
        } else {
            const width = layer.vValues[0].length;
            i32(0), u32(4), u32(width);
            for (let j = 0; j < width; ++j) for (const row of layer.vValues) parts.push(Buffer.from(new Float32Array([row[j]]).buffer));
        }
    }
    return Buffer.concat(parts);
}
const f32Row = (values) => new Uint8Array(Float32Array.from(values).buffer);
const q8Row = (scaleBits, codes) => {
    const row = new Uint8Array(34);
    new DataView(row.buffer).setUint16(0, scaleBits, true);
    codes.forEach((q, i) => (new DataView(row.buffer).setInt8(2 + i, q)));
    return row;
};
const good = {cells: [1, 0], layers: [{kType: 0, k: [f32Row([1, 2]), f32Row([3, 4])], v: [f32Row([5, 6]), f32Row([7, 8])]}]};
const two = {layers: 1, width: 2, type: "f32"};

check("built f32: cells out of position order come back in position order", () => {
    const state = parseSequenceState(build({...good, empty: 2}), two);
    const snap = snapshotLayer(state, 0, {kvHeads: 1, headDim: 2, permuted: false});
    assert.deepEqual(Array.from(snap.k), [3, 4, 1, 2]);
    assert.deepEqual(Array.from(snap.v), [7, 8, 5, 6]);
    assert.deepEqual(snap.positions, [0, 1]);
});

check("built transposed V", () => {
    const bytes = build({cells: [0, 1], vTrans: 1,
                         layers: [{kType: 0, k: [f32Row([1, 2]), f32Row([3, 4])], vValues: [[5, 6], [7, 8]]}]});
    assert.deepEqual(Array.from(parseSequenceState(bytes, two).layers[0].v), [5, 6, 7, 8]);
});

check("built q8_0: code times the f16 scale", () => {
    const codes = Array.from({length: 32}, (_, i) => i - 16);
    const bytes = build({cells: [0], layers: [{kType: 8, k: [q8Row(0x3800, codes)], v: [q8Row(0x3c00, codes)]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 32, type: "q8_0"});
    assert.deepEqual(Array.from(state.layers[0].k), codes.map((q) => q * 0.5));
    assert.deepEqual(Array.from(state.layers[0].v), codes);
});

// ggml's block_q4_0: an f16 scale, then element i in byte i's low nibble
// and element 16 + i in its high one, each read as (nibble - 8) * scale.
check("built q4_0: nibble minus 8 times the f16 scale", () => {
    const codes = Array.from({length: 32}, (_, i) => (i < 16 ? i : 31 - i));  // high != low
    const row = Buffer.alloc(18);
    row.writeUInt16LE(0x3800, 0);  // 0.5
    for (let i = 0; i < 16; ++i) row[2 + i] = codes[i] | (codes[16 + i] << 4);
    const bytes = build({cells: [0], layers: [{kType: 2, k: [row], v: [row]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 32, type: "q4_0"});
    assert.deepEqual(Array.from(state.layers[0].k), codes.map((q) => (q - 8) * 0.5));
});

// A five-bit block: the f16 header words (q5_0: the scale; q5_1: the
// scale, then the minimum), a u32 whose bit j is element j's fifth bit,
// then q4_0's nibbles (ggml's block_q5_0, block_q5_1).
function q5Row(header, codes) {
    const row = Buffer.alloc(2 * header.length + 4 + 16);
    header.forEach((word, i) => row.writeUInt16LE(word, 2 * i));
    let high = 0;
    for (let i = 0; i < 32; ++i) high |= ((codes[i] >> 4) & 1) << i;
    row.writeUInt32LE(high >>> 0, 2 * header.length);
    for (let i = 0; i < 16; ++i) row[2 * header.length + 4 + i] = (codes[i] & 0x0f) | ((codes[16 + i] & 0x0f) << 4);
    return row;
}

// q5_0: each code read as (code - 16) * scale.
check("built q5_0: five-bit code minus 16 times the f16 scale", () => {
    const codes = Array.from({length: 32}, (_, i) => (i * 7) % 32);
    const row = q5Row([0x3800], codes);  // 0.5
    const bytes = build({cells: [0], layers: [{kType: 6, k: [row], v: [row]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 32, type: "q5_0"});
    assert.deepEqual(Array.from(state.layers[0].k), codes.map((q) => (q - 16) * 0.5));
});

// q5_1: each code read as code * scale + minimum; a read without the
// minimum (q5_0's) fails it.
check("built q5_1: five-bit code times the f16 scale plus the f16 minimum", () => {
    const codes = Array.from({length: 32}, (_, i) => (i * 11) % 32);
    const row = q5Row([0x3800, 0xc500], codes);  // scale 0.5, minimum -5
    const bytes = build({cells: [0], layers: [{kType: 7, k: [row], v: [row]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 32, type: "q5_1"});
    assert.deepEqual(Array.from(state.layers[0].k), codes.map((q) => q * 0.5 - 5));
    assert.deepEqual(Array.from(state.layers[0].v), codes.map((q) => q * 0.5 - 5));
});

// bf16 (ggml type 30): the upper 16 bits of an f32.
check("built bf16: the upper half of an f32", () => {
    const row = Buffer.alloc(4);
    row.writeUInt16LE(0x3fc0, 0);  // 1.5
    row.writeUInt16LE(0xc080, 2);  // -4
    const bytes = build({cells: [0], layers: [{kType: 30, k: [row], v: [row]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 2, type: "bf16"});
    assert.deepEqual(Array.from(state.layers[0].k), [1.5, -4]);
    assert.deepEqual(Array.from(state.layers[0].v), [1.5, -4]);
});

// Different K and V types (llama.cpp's type_k, type_v): each read in its own.
check("built K q8_0 with V f16", () => {
    const codes = Array.from({length: 32}, (_, i) => i - 16);
    const v = Buffer.alloc(64);
    for (let i = 0; i < 32; ++i) v.writeUInt16LE(0x3c00, 2 * i);  // 1
    const bytes = build({cells: [0], layers: [{kType: 8, vType: 1, k: [q8Row(0x3800, codes)], v: [v]}]});
    const state = parseSequenceState(bytes, {layers: 1, width: 32, kType: "q8_0", vType: "f16"});
    assert.deepEqual(Array.from(state.layers[0].k), codes.map((q) => q * 0.5));
    assert.deepEqual(Array.from(state.layers[0].v), Array(32).fill(1));
    assert.throws(() => parseSequenceState(bytes, {layers: 1, width: 32, type: "q8_0"}),
                  /layer 0's V is f16, the cache was created q8_0/);
});

check("an empty sequence", () => {
    const bytes = Buffer.from(new Uint32Array([0x67677371, 3, 0, 2, 0, 0]).buffer);
    assert.equal(snapshotLayer(parseSequenceState(bytes, two), 0, {kvHeads: 1, headDim: 2}).length, 0);
});

function refused(name, bytes, pattern, want = two) {
    check(`refused: ${name}`, () => assert.throws(() => parseSequenceState(bytes, want),
                                                  (e) => e instanceof StateFileError && pattern.test(e.message)));
}
refused("magic", build({...good, magic: 0x67677370}), /magic 0x67677370, expected 0x67677371/);
refused("version", build({...good, version: 2}), /version 2, this reader knows 3/);
refused("truncated", build(good).subarray(0, build(good).length - 5), /the file ends inside layer 0's V rows/);
refused("token count", Buffer.from(new Uint32Array([0x67677371, 3, 0xffffffff]).buffer), /the file ends inside the tokens/);
refused("cell count", Buffer.from(new Uint32Array([0x67677371, 3, 0, 1, 0xffffffff]).buffer), /the file ends inside stream 0's 4294967295 cells/);
refused("trailing bytes", Buffer.concat([build(good), Buffer.alloc(3)]), /3 bytes after the last stream/);
refused("layer count", build(good), /1 layers, the model has 2/, {...two, layers: 2});
refused("K type", build(good), /layer 0's K is f32, the cache was created f16/, {...two, type: "f16"});
refused("unknown type", build({...good, layers: [{...good.layers[0], kType: 3}]}), /layer 0's K is ggml type 3/);
refused("row size", build(good), /K rows are 8 bytes, 3 f32 elements take 12/, {...two, width: 3});
refused("V type", build({...good, layers: [{...good.layers[0], vType: 1}]}), /layer 0's V is f16, the cache was created f32/);
refused("shared cell", build({...good, seqIds: [[0, 1], [0]]}), /cell 0 lists 2 sequences/);
refused("other sequence", build(good), /cell 0 belongs to sequence 0, expected 4/, {...two, seqId: 4});
refused("v_trans", build({...good, vTrans: 2}), /v_trans 2/);
check("refused: two cells at one position", () => assert.throws(
    () => snapshotLayer(parseSequenceState(build({...good, cells: [1, 1]}), two), 0, {kvHeads: 1, headDim: 2}),
    /two cells hold position 1/));
check("refused: cells in two streams", () => {
    const one = build(good);
    // stream count 2, the same stream twice
    const header = one.subarray(0, 12), stream = one.subarray(16);
    const bytes = Buffer.concat([header, Buffer.from(new Uint32Array([2]).buffer), stream, stream]);
    assert.throws(() => parseSequenceState(bytes, two), /cells of the sequence in streams 0 and 1/);
});

console.log(`state_file_test: ${checks} checks held`);

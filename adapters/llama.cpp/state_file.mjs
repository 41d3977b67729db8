// llama.cpp's per-sequence state file, as node-llama-cpp 3.22.1's
// LlamaContextSequence.saveStateToFile writes it (llama_state_seq_save_file),
// read back as kvcheck's cache snapshot (docs/ENGINE_PROTOCOL.md, `cache`).
// Layout, from the bundled llama.cpp source (src/llama-context.cpp
// state_seq_save_file, src/llama-kv-cache.cpp state_write, state_write_meta,
// state_write_data), all little-endian:
//
//   u32 magic 'ggsq' (0x67677371), u32 version 3, u32 n_tokens, i32 tokens[n_tokens]
//   u32 n_stream; per stream:
//     u32 cell_count; if cell_count > 0:
//       per cell (cell order): i32 pos, u32 n_seq_id, i32 seq_id[n_seq_id]
//       u32 v_trans, u32 n_layer
//       per layer: i32 k_type, u64 k_row_bytes, k rows [cell_count][k_row_bytes]
//       v_trans 0: per layer: i32 v_type, u64 v_row_bytes, v rows [cell_count][v_row_bytes]
//       v_trans 1: per layer: i32 v_type, u32 v_element_bytes, u32 v_width,
//                  v [v_width][cell_count] elements
//
// Nothing is guessed: every count, type and size is checked against what the
// model implies, and a file that differs anywhere is an error that names the
// field, never a snapshot of misread bytes.

export const kGgmlTypes = {0: "f32", 1: "f16", 2: "q4_0", 6: "q5_0", 7: "q5_1", 8: "q8_0", 30: "bf16"};  // ggml_type ids read here
const kMagic = 0x67677371;
const kVersion = 3;
const kQ8Block = 32;  // elements per q8_0 block: an f16 scale, then 32 int8 codes
// A q4_0 block: an f16 scale, then 16 bytes; element i < 16 is byte i's low
// nibble, element 16 + i its high one, each read as (nibble - 8) * scale
// (ggml's block_q4_0, dequantize_row_q4_0).
const kQ4Bytes = 2 + kQ8Block / 2;
// A q5_0 block: an f16 scale, a u32 of fifth bits (bit j: element j's),
// then q4_0's 16 bytes of nibbles; each read as (code - 16) * scale
// (ggml's block_q5_0, dequantize_row_q5_0).
const kQ5Bytes = 2 + 4 + kQ8Block / 2;
// A q5_1 block: an f16 scale, an f16 minimum, then q5_0's fifth bits and
// nibbles; each code read as code * scale + minimum, rounded to f32
// (ggml's block_q5_1, dequantize_row_q5_1).
const kQ5_1Bytes = 2 + 2 + 4 + kQ8Block / 2;
const kBlockBytes = {q8_0: 2 + kQ8Block, q4_0: kQ4Bytes, q5_0: kQ5Bytes, q5_1: kQ5_1Bytes};
export const kQuantized = new Set(["q8_0", "q4_0", "q5_0", "q5_1"]);

export class StateFileError extends Error {}

function fail(message) {
    throw new StateFileError(`llama.cpp sequence state: ${message}`);
}

// Bytes of one row of `width` elements (ggml_row_size).
function rowBytes(type, width) {
    if (type === "f32") return 4 * width;
    if (type === "f16" || type === "bf16") return 2 * width;
    if (width % kQ8Block !== 0) fail(`a ${type} row of ${width} elements (not whole blocks of ${kQ8Block})`);
    return (width / kQ8Block) * kBlockBytes[type];
}

// IEEE binary16 bits to a number (exact: every f16 is a float).
export function halfToFloat(bits) {
    const sign = bits & 0x8000 ? -1 : 1;
    const exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
    if (exponent === 0) return sign * fraction * 2 ** -24;
    if (exponent === 31) return fraction === 0 ? sign * Infinity : NaN;
    return sign * (1024 + fraction) * 2 ** (exponent - 25);
}

// bfloat16 bits to a number: the upper 16 bits of an f32 (exact).
export function bf16ToFloat(bits) {
    const view = new DataView(new ArrayBuffer(4));
    view.setUint32(0, bits << 16 >>> 0, false);
    return view.getFloat32(0, false);
}

// One stored row of `width` elements at bytes[offset..] widened to f32 into
// out[at..]. q8_0: code * scale, the product llama.cpp's dequantize_row_q8_0
// computes in float (Math.fround of an exact double product).
function decodeRow(type, bytes, offset, width, out, at) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (type === "f32") {
        for (let i = 0; i < width; ++i) out[at + i] = view.getFloat32(offset + 4 * i, true);
    } else if (type === "f16") {
        for (let i = 0; i < width; ++i) out[at + i] = halfToFloat(view.getUint16(offset + 2 * i, true));
    } else if (type === "bf16") {  // the upper half of an f32 (ggml_bf16_to_fp32): exact
        for (let i = 0; i < width; ++i) out[at + i] = bf16ToFloat(view.getUint16(offset + 2 * i, true));
    } else if (type === "q5_0" || type === "q5_1") {
        // q5_0: (code - 16) * scale; q5_1: code * scale + minimum (the f16
        // after the scale), then the same fifth bits and nibbles.
        const withMin = type === "q5_1", bytes = kBlockBytes[type], codes = withMin ? 8 : 6;
        for (let b = 0; b < width / kQ8Block; ++b) {
            const block = offset + b * bytes;
            const scale = halfToFloat(view.getUint16(block, true));
            const min = withMin ? halfToFloat(view.getUint16(block + 2, true)) : 0;
            const high = view.getUint32(block + codes - 4, true);
            const read = (code) => Math.fround(withMin ? code * scale + min : (code - 16) * scale);
            for (let i = 0; i < kQ8Block / 2; ++i) {
                const byte = view.getUint8(block + codes + i);
                const low = (byte & 0x0f) | (((high >>> i) & 1) << 4);
                const up = (byte >> 4) | (((high >>> (i + 16)) & 1) << 4);
                out[at + b * kQ8Block + i] = read(low);
                out[at + b * kQ8Block + kQ8Block / 2 + i] = read(up);
            }
        }
    } else if (type === "q4_0") {
        for (let b = 0; b < width / kQ8Block; ++b) {
            const block = offset + b * kQ4Bytes;
            const scale = halfToFloat(view.getUint16(block, true));
            for (let i = 0; i < kQ8Block / 2; ++i) {
                const byte = view.getUint8(block + 2 + i);
                out[at + b * kQ8Block + i] = Math.fround(((byte & 0x0f) - 8) * scale);
                out[at + b * kQ8Block + kQ8Block / 2 + i] = Math.fround(((byte >> 4) - 8) * scale);
            }
        }
    } else {
        for (let b = 0; b < width / kQ8Block; ++b) {
            const block = offset + b * (2 + kQ8Block);
            const scale = halfToFloat(view.getUint16(block, true));
            for (let i = 0; i < kQ8Block; ++i)
                out[at + b * kQ8Block + i] = Math.fround(view.getInt8(block + 2 + i) * scale);
        }
    }
}

class Reader {
    constructor(bytes) {
        this.bytes = bytes;
        this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        this.at = 0;
    }

    need(n, what) {
        if (this.at + n > this.bytes.length)
            fail(`the file ends inside ${what} (offset ${this.at}, ${n} bytes needed, ${this.bytes.length - this.at} left)`);
    }

    u32(what) {
        this.need(4, what);
        const value = this.view.getUint32(this.at, true);
        this.at += 4;
        return value;
    }

    i32(what) {
        this.need(4, what);
        const value = this.view.getInt32(this.at, true);
        this.at += 4;
        return value;
    }

    u64(what) {
        this.need(8, what);
        const value = this.view.getBigUint64(this.at, true);
        this.at += 8;
        return value;
    }

    skip(n, what) {
        this.need(n, what);
        const start = this.at;
        this.at += n;
        return start;
    }
}

function ggmlType(id, what) {
    const type = kGgmlTypes[id];
    if (type == null) fail(`${what} is ggml type ${id} (this reader knows ${Object.entries(kGgmlTypes).map(([k, v]) => `${k} ${v}`).join(", ")})`);
    return type;
}

// One stream's cells: meta, then K of every layer, then V of every layer.
function readStream(r, cells, expect, stream) {
    r.need(12 * cells, `stream ${stream}'s ${cells} cells`);  // 12 bytes each at least
    const positions = new Int32Array(cells);
    for (let c = 0; c < cells; ++c) {
        positions[c] = r.i32(`cell ${c}'s position`);
        const nSeq = r.u32(`cell ${c}'s sequence count`);
        if (nSeq !== 1) fail(`stream ${stream} cell ${c} lists ${nSeq} sequences (a one-sequence state lists exactly 1)`);
        const seq = r.i32(`cell ${c}'s sequence id`);
        if (expect.seqId != null && seq !== expect.seqId) fail(`stream ${stream} cell ${c} belongs to sequence ${seq}, expected ${expect.seqId}`);
        if (positions[c] < 0) fail(`stream ${stream} cell ${c} holds position ${positions[c]}`);
    }
    const vTrans = r.u32("v_trans");
    if (vTrans > 1) fail(`v_trans ${vTrans} (0 or 1)`);
    const nLayer = r.u32("the layer count");
    if (nLayer !== expect.layers) fail(`${nLayer} layers, the model has ${expect.layers}`);
    const layers = [];
    for (let l = 0; l < nLayer; ++l) {
        const type = ggmlType(r.i32(`layer ${l}'s K type`), `layer ${l}'s K`);
        if (type !== expect.kType) fail(`layer ${l}'s K is ${type}, the cache was created ${expect.kType}`);
        const bytes = r.u64(`layer ${l}'s K row size`);
        if (bytes !== BigInt(rowBytes(type, expect.width)))
            fail(`layer ${l}'s K rows are ${bytes} bytes, ${expect.width} ${type} elements take ${rowBytes(type, expect.width)}`);
        const k = new Float32Array(cells * expect.width);  // [cell][KVH*D], file order
        const start = r.skip(cells * Number(bytes), `layer ${l}'s K rows`);
        for (let c = 0; c < cells; ++c) decodeRow(type, r.bytes, start + c * Number(bytes), expect.width, k, c * expect.width);
        layers.push({k, v: null});
    }
    for (let l = 0; l < nLayer; ++l) {
        const type = ggmlType(r.i32(`layer ${l}'s V type`), `layer ${l}'s V`);
        if (type !== expect.vType) fail(`layer ${l}'s V is ${type}, the cache was created ${expect.vType}`);
        const v = new Float32Array(cells * expect.width);  // [cell][KVH*D], file order
        if (vTrans === 0) {
            const bytes = r.u64(`layer ${l}'s V row size`);
            if (bytes !== BigInt(rowBytes(type, expect.width)))
                fail(`layer ${l}'s V rows are ${bytes} bytes, ${expect.width} ${type} elements take ${rowBytes(type, expect.width)}`);
            const start = r.skip(cells * Number(bytes), `layer ${l}'s V rows`);
            for (let c = 0; c < cells; ++c) decodeRow(type, r.bytes, start + c * Number(bytes), expect.width, v, c * expect.width);
        } else {
            // Transposed: [element][cell]; only f32 and f16 can be (llama.cpp
            // refuses a quantized V without flash attention, which never transposes).
            if (kQuantized.has(type)) fail(`layer ${l}'s V is ${type} and transposed`);
            const elementBytes = r.u32(`layer ${l}'s V element size`);
            if (elementBytes !== rowBytes(type, 1)) fail(`layer ${l}'s V elements are ${elementBytes} bytes, ${type} takes ${rowBytes(type, 1)}`);
            const width = r.u32(`layer ${l}'s V width`);
            if (width !== expect.width) fail(`layer ${l}'s V is ${width} wide, the model's K/V is ${expect.width}`);
            const start = r.skip(width * cells * elementBytes, `layer ${l}'s V elements`);
            const column = new Float32Array(cells);
            for (let j = 0; j < width; ++j) {
                decodeRow(type, r.bytes, start + j * cells * elementBytes, cells, column, 0);
                for (let c = 0; c < cells; ++c) v[c * width + j] = column[c];
            }
        }
        layers[l].v = v;
    }
    return {positions, layers, vTrans};
}

// expect: {layers, width (KVH*D), type ("f32" | "f16" | "bf16" | "q8_0" | "q4_0"): K's and V's,
// or kType and vType where they differ, seqId (optional)}.
// Returns {tokens: Int32Array, positions: Int32Array [cells] (file order),
// layers: [{k, v}]: Float32Array [cells][width] in file order, vTrans: 0 or 1
// (V stored transposed: llama.cpp's attn_v_trans = !flash_attn; absent
// without cells)}.
export function parseSequenceState(bytes, given) {
    const expect = {...given, kType: given.kType ?? given.type, vType: given.vType ?? given.type};
    const r = new Reader(bytes);
    const magic = r.u32("the magic");
    if (magic !== kMagic) fail(`magic 0x${magic.toString(16)}, expected 0x${kMagic.toString(16)} ('ggsq')`);
    const version = r.u32("the version");
    if (version !== kVersion) fail(`version ${version}, this reader knows ${kVersion} (llama.cpp's LLAMA_STATE_SEQ_VERSION)`);
    const nTokens = r.u32("the token count");
    r.need(4 * nTokens, "the tokens");  // before allocating what a bad count asks for
    const tokens = new Int32Array(nTokens);
    for (let i = 0; i < nTokens; ++i) tokens[i] = r.i32("a token");
    const nStream = r.u32("the stream count");
    if (nStream < 1 || nStream > 65536) fail(`${nStream} streams`);
    let found = null;
    for (let s = 0; s < nStream; ++s) {
        const cells = r.u32(`stream ${s}'s cell count`);
        if (cells === 0) continue;
        if (found != null) fail(`cells of the sequence in streams ${found.stream} and ${s} (one stream per sequence expected)`);
        found = {stream: s, ...readStream(r, cells, expect, s)};
    }
    if (r.at !== bytes.length) fail(`${bytes.length - r.at} bytes after the last stream (offset ${r.at})`);
    if (found == null) return {tokens, positions: new Int32Array(0), layers: []};
    return {tokens, positions: found.positions, layers: found.layers, vTrans: found.vTrans};
}

// Undoes the GGUF writer's q/k row permutation (model/tensor_layout.h,
// docs/WEIGHTS.md): within each head of D rows, canonical element
// j*(D/2) + i was written as element 2i + j, llama.cpp's adjacent-pair RoPE
// layout, so its cached K holds each head in that order.
export function unpermuteHeads(row, kvHeads, headDim) {
    const out = new Float32Array(row.length);
    const half = headDim / 2;
    for (let h = 0; h < kvHeads; ++h) {
        const base = h * headDim;
        for (let i = 0; i < half; ++i)
            for (let j = 0; j < 2; ++j) out[base + j * half + i] = row[base + 2 * i + j];
    }
    return out;
}

// Whether LLAMA_ATTN_ROT_DISABLE turns the rotation off, read as llama.cpp
// reads it (atoi: a nonzero leading number).
export function rotationDisabled(rotDisable) {
    const disabled = Number.parseInt(rotDisable ?? "0", 10);
    return Number.isFinite(disabled) && disabled !== 0;
}

// The sizes of the Hadamard rotations llama.cpp applies to a quantized K and
// V cache (src/llama-kv-cache.cpp, the constructor and build_input_k_rot /
// build_input_v_rot): K by the largest power of two (at least 64) that
// divides head_dim, V by 64, each only when its own type is quantized
// (`type`: K's and V's, or {k, v} where they differ), head_dim
// is a multiple of 64 and LLAMA_ATTN_ROT_DISABLE (read with atoi) is unset
// or 0. 0: not rotated. The graph (src/llama-graph.cpp, build_attn) rotates
// each run of n stored elements by H_n before the store (K after RoPE, in
// the GGUF's adjacent-pair order) and rotates the attention output back.
export function cacheRotations(type, headDim, rotDisable) {
    const {k: kType, v: vType} = typeof type === "string" ? {k: type, v: type} : type;
    if (headDim % 64 !== 0 || rotationDisabled(rotDisable)) return {k: 0, v: 0};
    let k = 64;
    while (headDim % (2 * k) === 0) k *= 2;
    return {k: kQuantized.has(kType) ? k : 0, v: kQuantized.has(vType) ? 64 : 0};
}

// Undoes llama.cpp's rotation of each run of n elements of `row` by the
// orthonormal Walsh-Hadamard matrix H_n (ggml_gen_hadamard: Sylvester's
// construction scaled by 1/sqrt(n), so H_n = H_n^T and H_n H_n = I): the
// stored run is H_n x, and H_n applied once more gives x, here in double
// (a fast transform), rounded to f32 once.
export function unrotateRuns(row, n) {
    if (n === 0) return row;
    if (row.length % n !== 0) fail(`a row of ${row.length} elements is not whole rotations of ${n}`);
    const out = new Float32Array(row.length);
    const run = new Float64Array(n);
    const scale = 1 / Math.sqrt(n);
    for (let base = 0; base < row.length; base += n) {
        for (let i = 0; i < n; ++i) run[i] = row[base + i];
        for (let half = 1; half < n; half *= 2) {
            for (let i = 0; i < n; i += 2 * half) {
                for (let j = i; j < i + half; ++j) {
                    const a = run[j], b = run[j + half];
                    run[j] = a + b;
                    run[j + half] = a - b;
                }
            }
        }
        for (let i = 0; i < n; ++i) out[base + i] = run[i] * scale;
    }
    return out;
}

// One layer of a parsed state as kvcheck's snapshot: K and V [n][KVH][D] f32
// in ascending position order (the order a contiguous cache holds them),
// K in kvcheck's rotate-half head layout when `permuted` (llama family), K
// and V rotated back where llama.cpp stored them rotated (`rotations`,
// cacheRotations: the rotation first, in the stored order, then the
// permutation).
export function snapshotLayer(state, layer, {kvHeads, headDim, permuted, rotations = {k: 0, v: 0}}) {
    const n = state.positions.length;
    const width = kvHeads * headDim;
    if (n === 0) return {length: 0, k: new Float32Array(0), v: new Float32Array(0)};
    if (layer < 0 || layer >= state.layers.length) fail(`layer ${layer} of ${state.layers.length}`);
    const order = Array.from(state.positions.keys()).sort((a, b) => state.positions[a] - state.positions[b]);
    for (let i = 1; i < n; ++i) {
        if (state.positions[order[i]] === state.positions[order[i - 1]])
            fail(`two cells hold position ${state.positions[order[i]]}`);
    }
    const {k, v} = state.layers[layer];
    const outK = new Float32Array(n * width), outV = new Float32Array(n * width);  // [n][KVH][D]
    order.forEach((cell, i) => {
        const row = unrotateRuns(k.subarray(cell * width, (cell + 1) * width), rotations.k);
        outK.set(permuted ? unpermuteHeads(row, kvHeads, headDim) : row, i * width);
        outV.set(unrotateRuns(v.subarray(cell * width, (cell + 1) * width), rotations.v), i * width);
    });
    return {length: n, k: outK, v: outV, positions: order.map((cell) => state.positions[cell])};
}

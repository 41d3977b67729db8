// What llama.cpp guarantees, per mode, as kvcheck traits (docs/ENGINES.md).
// Every entry is a measurement recorded in docs/LLAMA_CPP.md ("Traits"), not
// an assumption; `--declare bitwise` (measurement only) claims every
// invariance bitwise so that kvcheck's properties show which ones break.
import {kQuantized, rotationDisabled} from "./state_file.mjs";

export const kVersion = "node-llama-cpp 3.22.1";

// Invariances measured per mode (docs/LLAMA_CPP.md, "Traits"): key "kv/fa".
// A token's logits depend on the shapes of the matrix products it goes
// through: how many tokens share its llama_decode (the batch width) and how
// wide its K/V projection is (GQA vs its MHA twin). ggml picks its
// matrix-multiplication path by shape, so every comparison across such
// shapes (chunking, batch, P4/P5/P9, whose solo reference runs without the
// scenario's batch partners, and the GQA twin) differs in the last bits, at
// position 0 already. The same scenario run twice gives the same bits.
// P11 (sharing) and P12 (rollback) replay a lineage on a fresh context, fed
// without the scenario's batch partners: the same shape dependence.
const kShapeDependent = {chunking: "bounded", batch: "bounded", reset: "bounded", compaction: "bounded",
                         gqa_twin: "bounded", sharing: "bounded", rollback: "bounded"};
const kMeasured = {
    "f32/off": {...kShapeDependent, determinism: "bitwise"},
    "f32/on": {...kShapeDependent, determinism: "bitwise"},
    "f16/off": {...kShapeDependent, determinism: "bitwise"},
    "f16/on": {...kShapeDependent, determinism: "bitwise"},
    "q8_0/on": {...kShapeDependent, determinism: "bitwise"},
    // Not measured with --declare bitwise: the shape dependence is ggml's
    // matmul choice, not the cache type's, so q8_0's row is taken; P8 checks
    // determinism bitwise. The same for bf16 and for different K and V
    // types (kUnmeasured).
    "q4_0/on": {...kShapeDependent, determinism: "bitwise"}
};
const kUnmeasured = {...kShapeDependent, determinism: "bitwise"};

// The arithmetic the tolerance must model (docs/TOLERANCE.md, "Reduced-
// precision arithmetic"; the same rows as kvcheck's named presets,
// engine/arithmetic_presets.cpp), read in the bundled ggml-cpu source. f32
// everywhere outside attention, RoPE angles theta_scale^i * pos by repeated
// f32 products (rope_f32). Attention:
// - f32 K/V, flash attention off: f32 ("ggml-f32").
// - f16 K/V, flash attention off ("ggml-f16"): mul_mat converts its f32
//   operand to the K/V type: q before QK^T, the probabilities before PV.
// - flash attention with f32 or f16 K/V ("ggml-flash-f16"): an f32 cache is
//   cast to f16 first (llama-graph.cpp; docs/findings/
//   llama_cpp_flash_attn_f32_cache_in_f16.md), q is converted to f16
//   (q_to_vec_dot), the softmax is online, and the sum of p v runs in an f16
//   accumulator (VKQ16, ggml_vec_mad_f16 / ggml_vec_scale_f16).
// - flash attention with q8_0 K/V ("ggml-flash-q8_0"): q quantized to q8_0
//   blocks, K/V by ggml's quantizer (f16 scale, codes from the unrounded
//   one), V dequantized to f32 and summed in f32 (VKQ32), online softmax.
//   q4_0 and q5_0 K/V the same fields: q is quantized to q8_0 (their
//   vec_dot_type) and their storage is ggml's (docs/TOLERANCE.md, "ggml's
//   q4_0", "ggml's q5_0"). q5_1 too: its vec_dot_type q8_1 is q8_0's codes
//   and scale plus a stored block sum, whose term the tolerance adds for a
//   K type with a minimum ("ggml's q5_1").
// - bf16 K/V: q rounded to bf16 (bf16's vec_dot_type); without flash
//   attention the probabilities to bf16 too ("ggml-f16"'s fields), with it
//   V widened to f32 and summed in f32 (VKQ32: only an f16 V has the f16
//   sum), no cast ("ggml-flash-bf16").
// - K and q in the GGUF's adjacent-pair order (kvcheck-export permutes the
//   llama family's q/k rows, docs/WEIGHTS.md), so a quantized K's blocks of
//   32 (and q's, quantized for it) hold elements i and D/2 + i together:
//   k_blocks_in_pair_order, in every mode (it matters where K is quantized
//   and a head has more than one block: head_dim 64 and up).
// - Different K and V types (--kv-k, --kv-v): each field follows its own
//   operand: q rounded to K's vec_dot_type, the probabilities to V's, an f32
//   K or V cast to f16 on its own under flash attention (kv_read applies to
//   the f32 one), the f16 running sum where V is f16 (or cast to it), and
//   arithmetic.v_dtype names V's type (the scenario's kv_dtype is K's).
const kF32 = {accumulation: "f32", activations: "f32", weights: "f32", rope_angles_in_float: true,
              queries_rounded_to_kv_dtype: false, kv_read: "f32",
              probabilities_rounded_to_kv_dtype: false, online_softmax: false,
              value_accumulation: "f32", kv_quantizer: "kvcheck", k_blocks_in_pair_order: true};
function arithmetic(k, v, flashAttention) {
    const own = {...(k !== v ? {v_dtype: v} : {}),
                 ...(kQuantized.has(k) || kQuantized.has(v) ? {kv_quantizer: "ggml"} : {})};
    if (!flashAttention)
        return k === "f32" && v === "f32" ? kF32
            : {...kF32, queries_rounded_to_kv_dtype: true, probabilities_rounded_to_kv_dtype: true, ...own};
    const castToF16 = (t) => t === "f32" || t === "f16";  // an f32 K or V is cast; f16 is f16
    return {...kF32, queries_rounded_to_kv_dtype: true, online_softmax: true,
            kv_read: castToF16(k) || castToF16(v) ? "f16" : "f32",
            value_accumulation: castToF16(v) ? "f16" : "f32", ...own};
}

// llama.cpp stores a quantized K or V Hadamard-rotated where head_dim is a
// multiple of 64 (attn_rot_k / attn_rot_v, src/llama-kv-cache.cpp: each for
// its own type, any quantized one), and rotates q with K and the attention
// output back with V, unless LLAMA_ATTN_ROT_DISABLE is a nonzero number.
// The derived bounds do not model the rotation (it spreads each run's
// quantization error over the run), so the adapter turns it off by default
// (--attn-rot off sets LLAMA_ATTN_ROT_DISABLE=1: engine.mjs) and a quantized
// mode draws heads of 64 and 128; with --attn-rot on (llama.cpp's default)
// such heads are declared outside the limits: not applicable, never a false
// failure (docs/LLAMA_CPP.md, "The Hadamard rotation"). The limit is a
// maximum, so that mode also leaves out 96, which is not rotated. Read
// from the environment llama.cpp reads, which the adapter sets.
function rotates(k, v) {
    return (kQuantized.has(k) || kQuantized.has(v)) && !rotationDisabled(process.env.LLAMA_ATTN_ROT_DISABLE);
}

// Real models' head sizes (issue 33: without --model the generator drew
// head_dim 2..32 only), drawn in half the generated models
// (limits.head_dims) where the mode's limits allow them.
const kHeadDims = [64, 80, 96, 128];

// options: {kvK, kvV (the K and V cache types), flashAttention, declare,
// arithmetic, gpt2, eraseShift} (engine.mjs parseOptions).
export function traitsFor(options) {
    const {kvK: k, kvV: v} = options;
    const fa = options.flashAttention ? "on" : "off";
    const measured = (k === v ? kMeasured[`${k}/${fa}`] : null) ?? kUnmeasured;
    const invariance = options.declare === "bitwise"
        ? Object.fromEntries(Object.keys(measured).map((key) => [key, "bitwise"]))
        : measured;
    const types = k === v ? `kv-${k}` : `k-${k}-v-${v}`;
    // A quantized mode names whether llama.cpp's rotation is off (the
    // adapter's default) or on.
    const rotation = kQuantized.has(k) || kQuantized.has(v) ? `-rot-${rotates(k, v) ? "on" : "off"}` : "";
    return {
        identity: {name: `llama.cpp-${types}-fa-${fa}${rotation}`, version: kVersion},
        // erase and shift: llama_memory_seq_rm / llama_memory_seq_add (engine.mjs).
        // kvcheck draws them for the llama family only (RoPE: gpt2's learned
        // positions have nothing a shift could correct), so --gpt2 declaring
        // them changes nothing for gpt2 scenarios. Declared in every mode: P1
        // and P6 check the shifted sequences under each mode's derived bound
        // (docs/LLAMA_CPP.md, "Erase and shift"); with a q8_0 K cache that
        // finds the shift crash of docs/findings/
        // llama_cpp_quantized_k_shift_crash.md. --erase-shift off leaves them out.
        operations: {multi_sequence_step: true, finish: true, reset: true, cache_snapshot: true,
                     capacity_refusal: true, fault_switches: false, fork: true, truncate: true,
                     erase: options.eraseShift, shift: options.eraseShift,
                     // sequence.saveStateToFile / loadStateFromFile (engine.mjs),
                     // declared with --save-restore on (docs/LLAMA_CPP.md,
                     // "Save and restore").
                     save_restore: options.saveRestore === true,
                     // node-llama-cpp has no seq_div: the native driver's
                     // --div on (docs/LLAMA_CPP.md, "Div").
                     div: false},
        limits: {
            families: options.gpt2 ? ["gpt2", "llama"] : ["llama"],
            // The cache's storage type (K's; V's is arithmetic.v_dtype where
            // it differs): P6 compares the stored K/V within its storage
            // bound (docs/TOLERANCE.md, "The KV dtype").
            kv_dtypes: [k],
            // a q8_0 / q4_0 / q5_0 / q5_1 row is whole blocks of 32 values (llama.cpp refuses others)
            head_dim_multiple: kQuantized.has(k) || kQuantized.has(v) ? 32 : 1,
            head_dims: kHeadDims,
            // Shapes llama.cpp cannot take, never drawn (docs/LLAMA_CPP.md,
            // "Shapes"): a head of 1 aborts ggml (GGML_ASSERT(ggml_can_mul_mat)
            // in gpt2's graph; llama needs an even head for RoPE anyway), and
            // the gpt2 architecture derives its head size from d_model.
            min_head_dim: 2,
            max_head_dim: rotates(k, v) ? 63 : 65536,
            query_width_is_d_model: ["gpt2"],
            max_rows: 64
        },
        invariance,
        // --arithmetic f32 (measurement only) claims f32 arithmetic in any mode,
        // so that P1 shows how far a mode's results are from the f32 bound.
        arithmetic: options.arithmetic === "f32"
            ? arithmetic("f32", "f32", false) : arithmetic(k, v, options.flashAttention)
    };
}

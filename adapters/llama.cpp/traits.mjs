// What llama.cpp guarantees, per mode, as kvcheck traits (docs/ENGINES.md).
// Every entry is a measurement recorded in docs/LLAMA_CPP.md ("Traits"), not
// an assumption; `--declare bitwise` (measurement only) claims every
// invariance bitwise so that kvcheck's properties show which ones break.
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
    "q8_0/on": {...kShapeDependent, determinism: "bitwise"}
};

// The arithmetic the tolerance must model (docs/TOLERANCE.md). f32 K/V with
// flash attention off: f32 everywhere, RoPE angles theta_scale^i * pos by
// repeated f32 products (ggml-cpu rope_f32). Flash attention casts an f32
// K/V cache to f16 before ggml_flash_attn_ext (llama-graph.cpp), and the CPU
// kernel converts q to K's dot type, f16 (docs/findings/
// llama_cpp_flash_attn_f32_cache_in_f16.md). f16 K/V: ggml's mul_mat
// converts the f32 operand to the K/V type (q before QK^T, the probabilities
// before PV); q8_0 the same with q quantized to q8_0 blocks.
function arithmetic(kv, flashAttention) {
    if (kv === "f32" && !flashAttention)
        return {accumulation: "f32", activations: "f32", rope_angles_in_float: true, queries_rounded_to_kv_dtype: false};
    return {accumulation: "f32", activations: "f16", rope_angles_in_float: true, queries_rounded_to_kv_dtype: true};
}

export function traitsFor(options) {
    const mode = `${options.kv}/${options.flashAttention ? "on" : "off"}`;
    const invariance = options.declare === "bitwise"
        ? Object.fromEntries(Object.keys(kMeasured[mode]).map((key) => [key, "bitwise"]))
        : kMeasured[mode];
    return {
        identity: {name: `llama.cpp-kv-${options.kv}-fa-${options.flashAttention ? "on" : "off"}`, version: kVersion},
        // erase and shift: llama_memory_seq_rm / llama_memory_seq_add (engine.mjs).
        // kvcheck draws them for the llama family only (RoPE: gpt2's learned
        // positions have nothing a shift could correct), so --gpt2 declaring
        // them changes nothing for gpt2 scenarios. Declared in every mode: in
        // f32/off P1 checks the shifted sequences, elsewhere (no f16 bound)
        // P8 and freedom from crashes do (docs/LLAMA_CPP.md, "Erase and shift");
        // with a q8_0 K cache that finds the shift crash of docs/findings/
        // llama_cpp_quantized_k_shift_crash.md. --erase-shift off leaves them out.
        operations: {multi_sequence_step: true, finish: true, reset: true, cache_snapshot: true,
                     capacity_refusal: true, fault_switches: false, fork: true, truncate: true,
                     erase: options.eraseShift, shift: options.eraseShift},
        limits: {
            families: options.gpt2 ? ["gpt2", "llama"] : ["llama"],
            // The cache's storage type: P6 compares the stored K/V within its
            // storage bound (docs/TOLERANCE.md, "The KV dtype").
            kv_dtypes: [options.kv],
            // a q8_0 row is whole blocks of 32 values (llama.cpp refuses others)
            head_dim_multiple: options.kv === "q8_0" ? 32 : 1,
            // Shapes llama.cpp cannot take, never drawn (docs/LLAMA_CPP.md,
            // "Shapes"): a head of 1 aborts ggml (GGML_ASSERT(ggml_can_mul_mat)
            // in gpt2's graph; llama needs an even head for RoPE anyway), and
            // the gpt2 architecture derives its head size from d_model.
            min_head_dim: 2,
            query_width_is_d_model: ["gpt2"],
            max_rows: 64
        },
        invariance,
        // --arithmetic f32 (measurement only) claims f32 arithmetic in any mode,
        // so that P1 shows how far a mode's results are from the f32 bound.
        arithmetic: options.arithmetic === "f32"
            ? arithmetic("f32", false) : arithmetic(options.kv, options.flashAttention)
    };
}

// What ONNX Runtime's CPU GroupQueryAttention guarantees, as kvcheck traits
// (docs/ENGINES.md). Only what the operator itself does is declared: fork and
// truncate of a past tensor would be this adapter's own slicing, so they are
// left out (docs/ONNXRUNTIME.md, "Traits"); each invariance entry is a
// measurement recorded there. `--declare bitwise` (measurement only) claims
// every invariance bitwise, so that kvcheck's properties show which break.
export const kVersion = "onnxruntime-node 1.30.0";

// Measured (docs/ONNXRUNTIME.md, "Traits: measured"): a chunk of n tokens
// and n calls of one token differ in the last bits from position 1 on (the
// operator's prompt and decode paths reduce in other orders); every other
// comparison gave the same bits in the bitwise-declared campaigns.
const kMeasured = {chunking: "bounded", batch: "bitwise", reset: "bitwise", compaction: "bitwise",
                   gqa_twin: "bitwise", determinism: "bitwise"};

// The arithmetic the tolerance models (docs/TOLERANCE.md): f32 throughout
// (MLAS sgemm, f32 softmax and normalization); RoPE from a cos/sin cache
// that kvcheck-export fills with the oracle's double angles rounded to float,
// which is the angle the derivation assumes (no float angle term).
const kArithmetic = {accumulation: "f32", activations: "f32", rope_angles_in_float: false,
                     queries_rounded_to_kv_dtype: false};

export function traitsFor(options) {
    const invariance = options.declare === "bitwise"
        ? Object.fromEntries(Object.keys(kMeasured).map((key) => [key, "bitwise"]))
        : kMeasured;
    return {
        identity: {name: `onnxruntime-gqa-f32${options.calls === "grouped" ? "" : `-calls-${options.calls}`}${options.buffer === "shared" ? "-shared" : ""}${options.packed ? "-packed" : ""}`,
                   version: kVersion},
        operations: {multi_sequence_step: true, finish: true, reset: true, cache_snapshot: true,
                     capacity_refusal: true, fault_switches: false, fork: false, truncate: false,
                     sliding_window: options.window, erase: false, shift: false},
        limits: {
            families: options.gpt2 ? ["gpt2", "llama"] : ["llama"],
            kv_dtypes: ["f32"],
            // CPU GroupQueryAttention: head_size a multiple of 16 with the
            // rotary cache (llama), of 8 without it (gpt2): the stricter one.
            head_dim_multiple: 16,
            max_rows: 64
        },
        invariance,
        arithmetic: kArithmetic
    };
}

// What an engine declares about itself, once, before any engine is built:
// the operations it offers, the shapes it accepts, which invariances it keeps
// bitwise and which only within a bound, and the arithmetic the tolerance
// must model. Generators draw only what the traits allow, properties an
// engine cannot express are "not applicable: the engine lacks X", and the
// invariance properties compare within the derived bound where the engine
// is not bitwise invariant. docs/ENGINES.md documents every field; the JSON
// form (engine/traits_json.h) is the one the C plugin ABI, the wire protocol
// and `kvcheck backends --json` share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/kv_dtype.h"
#include "model/config.h"

namespace kvcheck {

struct EngineIdentity {
  std::string name = "unnamed";  // recorded in every case file the engine fails
  std::string version = "0";
};

// Calls beyond start/step/length. A missing one makes every property that
// needs it not applicable, and the generators never draw it.
struct OperationTraits {
  bool multi_sequence_step = true;  // several sequences in one step (P3 needs it)
  bool finish = true;               // EOS frees a sequence's row; compaction may follow (P5)
  bool reset = true;                // drops every sequence (P4)
  bool cache_snapshot = true;       // Engine::cache(): the stored K/V (P6)
  bool capacity_refusal = true;     // EngineError kCapacity past capacity, state intact (P9)
  bool fault_switches = false;      // EngineOptions::faults are honoured (kill matrix)
  bool storage_map = false;         // Engine::storage_map(): the report's cache timeline
  // The operations of docs/OPERATIONS.md; off unless declared.
  bool fork = false;           // Engine::fork (P11 isolation)
  bool truncate = false;       // Engine::truncate (P12 rollback)
  bool paged = false;          // EngineOptions::block_size > 0 honoured
  bool pool_report = false;    // Engine::pool() (P13 pool accounting)
  bool storage_check = false;  // Engine::unheld_storage_check() (P13 re-poisoning)
  bool prefix_cache = false;   // EngineOptions::prefix_cache, reused(), flush_prefix_cache() (P15)
  // Config::sliding_window > 0 honoured on contiguous storage with the core
  // calls (docs/OPERATIONS.md, "Sliding windows"); no engine combines it with
  // fork, truncate, paged storage or a prefix cache yet.
  bool sliding_window = false;
  bool abort = false;       // Engine::abort is a path of its own (else abort runs as finish)
  bool cache_keys = false;  // Engine::start_keyed: prefix blocks shared within one key (P15)
  // On a prefix hit, step() returns every prompt row's logits, reused ones
  // too (vLLM's prompt logprobs), when EngineOptions::prompt_logits asks.
  bool prompt_logits = false;
  bool offload = false;  // Engine::offload and EngineOptions::host_blocks (paged; P13 per tier)
  bool erase = false;    // Engine::erase (P1/P6 replay the history)
  bool shift = false;    // Engine::shift (P1/P6 replay the history)
  bool div = false;      // Engine::div: cells may share a position (P1/P6 replay the history)
  // Engine::save_state / restore_state (contiguous storage; P1/P6/P12 after a restore)
  bool save_restore = false;
};

// Limits as constraints: a scenario outside them is not applicable.
struct ShapeLimits {
  std::vector<Family> families = {Family::kGpt2, Family::kLlama};
  std::vector<KvDtype> kv_dtypes = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16};
  int min_head_dim = 1, max_head_dim = 1 << 16, head_dim_multiple = 1;
  // Head sizes the engine asks the generator to draw (real models' 64, 80,
  // 96, 128, where an engine's kernels may take other paths than at the
  // generator's small heads): half of the generated scenarios take one of
  // those inside the limits above. Empty: the small heads only.
  std::vector<int> head_dims;
  int min_vocab = 1, max_vocab = 1 << 20;
  int max_layers = 1 << 10;
  int min_d_model = 1, max_d_model = 1 << 16, d_model_multiple = 1;
  int max_capacity = 1 << 20;     // positions per sequence (or in all, when shared)
  bool capacity_shared = false;   // one context holds every sequence's tokens
  int max_rows = 1 << 10;         // sequences alive at once
  int max_step_tokens = 1 << 20;  // tokens fed by one step, all entries together
  // Families whose models need n_heads * head_dim == d_model (llama.cpp's
  // gpt2 architecture derives its head size from d_model; the classic
  // from-scratch GPT asserts d_out % num_heads == 0 and splits d_out).
  std::vector<Family> query_width_is_d_model;
  // Families whose models need d_ff == 4 * d_model (an MLP written as
  // Linear(E, 4E), as GPT-2 and the lessons after it write it).
  std::vector<Family> d_ff_is_4x_d_model;
  // Only n_kv_heads == n_heads (an attention without GQA or MQA): P7, which
  // compares a GQA model with its MHA twin, then never applies.
  bool mha_only = false;
  // The JSON's "positions" (["learned", "rope"]) is not a field of its own:
  // a family fixes its positions (gpt2 learned absolute wpe[pos], llama
  // RoPE), so it narrows `families` (engine/traits_json.cpp).
};

// The positions a family's models use: "learned" (gpt2's wpe[pos]) or
// "rope" (llama's rotary embedding of Q and K).
const char* positions_name(Family family);

// Per comparison class: does the engine promise the same bits, or only
// agreement within the derived bound (2B by the triangle inequality)?
enum class Invariance : uint8_t { kBitwise, kBounded };

struct InvarianceTraits {
  Invariance chunking = Invariance::kBitwise;     // P2: any split of a prompt
  Invariance batch = Invariance::kBitwise;        // P3: alone vs in a ragged batch
  Invariance reset = Invariance::kBitwise;        // P4: after reset / in a reused row
  Invariance compaction = Invariance::kBitwise;   // P5: survivors of finishes
  Invariance gqa_twin = Invariance::kBitwise;     // P7: GQA vs its MHA twin
  Invariance determinism = Invariance::kBitwise;  // P8: the same scenario twice
  Invariance sharing = Invariance::kBitwise;      // P11: a forked lineage vs never shared
  Invariance rollback = Invariance::kBitwise;     // P12: truncate-then-refeed vs never fed
};

// The per-kernel error model the tolerance derives its bound from
// (docs/TOLERANCE.md, "The arithmetic an engine declares"). The default is
// f32 arithmetic everywhere with K/V rounded once to the cache dtype; each
// field names one way a real engine computes in less, and the tolerance
// derives the bound of exactly what is declared.
enum class Precision : uint8_t { kF32, kF16, kBF16 };

// How q8_0 K/V blocks are quantized: kvcheck's codec (an f32 scale, codes
// from the stored scale: half a code per element) or ggml's reference
// quantizer (block_q8_0: an f16 scale, codes from the unrounded amax / 127).
enum class KvQuantizer : uint8_t { kKvcheck, kGgml };

struct ArithmeticTraits {
  Precision accumulation = Precision::kF32;  // dot products and sums
  Precision activations = Precision::kF32;   // every kernel's output, rounded
  Precision weights = Precision::kF32;       // the parameters, rounded once (model.to(bf16))
  bool rope_angles_in_float = false;         // angles pos * theta^(-2i/D) rounded to f32
  // q rounded to the type attention reads K in before QK^T (ggml's vec_dot
  // converts q to K's vec_dot_type: f16, or q8_0 blocks for a q8_0 K).
  bool queries_rounded_to_kv_dtype = false;
  // K/V rounded to this as attention reads them (llama.cpp's flash attention
  // casts an f32 cache to f16); f32: read as stored.
  Precision kv_read = Precision::kF32;
  // Softmax weights rounded to V's type before the sum over values (ggml's
  // mul_mat converts its f32 operand to V's type).
  bool probabilities_rounded_to_kv_dtype = false;
  // Flash attention: the max is found as keys arrive and the sums so far are
  // rescaled by exp(old max - new max) ...
  bool online_softmax = false;
  // ... and the running sum of weights times values is rounded to this after
  // every key and every rescale (ggml's CPU kernel: f16 where V is f16).
  Precision value_accumulation = Precision::kF32;
  KvQuantizer kv_quantizer = KvQuantizer::kKvcheck;
  // A quantized K (and q, quantized for it) forms its blocks of 32 in
  // adjacent-pair order, llama family only: element i < D/2 of a head at
  // 2i, element D/2 + i at 2i + 1 (llama.cpp's GGUF permutes the q and k
  // rows so that RoPE rotates adjacent pairs; kvcheck's rotate-half order
  // puts i and D/2 + i apart). V keeps its order.
  bool k_blocks_in_pair_order = false;
  // V stored in a type of its own (llama.cpp's type_v, which may differ from
  // type_k): the scenario's kv_dtype is then K's type only, and the bound
  // stores, reads and checks V in this one. Unset: V is stored as K.
  std::optional<KvDtype> v_dtype;

  bool operator==(const ArithmeticTraits&) const = default;
};

struct EngineTraits {
  EngineIdentity identity;
  OperationTraits operations;
  ShapeLimits limits;
  InvarianceTraits invariance;
  ArithmeticTraits arithmetic;

  // Empty when the traits are consistent; otherwise one message naming the
  // field and its value (a plugin's contradictory traits exit 2 with it).
  std::string validate() const;

  // Empty when an engine with these traits accepts this model and cache
  // shape; otherwise why not ("head_dim 2 is not a multiple of 32").
  std::string refuses(const Config& config, KvDtype kv_dtype, int capacity, int max_rows) const;

  // Traits of a bitwise-invariant engine that is not the in-tree one: every
  // operation, no fault switches. What EngineUnderTest assumes by default.
  static EngineTraits strict();
};

// The shape rules of `limits` applied to a model (where its family or the
// limits ask): d_model = n_heads * head_dim, then d_ff = 4 * d_model, and
// n_kv_heads = n_heads with mha_only. Ranges and multiples are the caller's.
void apply_shape_rules(Config& c, const ShapeLimits& limits);

const char* precision_name(Precision p);
const char* kv_quantizer_name(KvQuantizer q);
const char* invariance_name(Invariance i);
bool accepts_family(const ShapeLimits& limits, Family family);
// Whether the operations include `needs` (fault_needs' names; "" is the core).
bool declares(const OperationTraits& operations, std::string_view needs);
// As above, and "q8_0" when limits.kv_dtypes holds it.
bool declares(const EngineTraits& traits, std::string_view needs);
bool accepts_kv_dtype(const ShapeLimits& limits, KvDtype dtype);

}  // namespace kvcheck

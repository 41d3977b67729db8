// RapidCheck generators of Scenarios that randomize what breaks KV caches:
// family, layers, query and KV heads (MHA, GQA, MQA), head width, prompt
// lengths, chunk splits, which sequences share a step, finish times, resets,
// capacity at the edge and the KV dtype.
//
// Shrinking is the point of the design (docs/GENERATORS.md). RapidCheck cannot
// shrink a schedule that was drawn step by step from the engine's state (each
// draw depends on the previous ones, so most shrinks of one draw invalidate
// the rest). Here every random choice is an independent, shrinkable "gene";
// decode() turns any set of genes into a valid Scenario deterministically,
// clamping what does not fit. So each shrink step of any gene still yields a
// scenario that validates, and every gene shrinks toward the simplest choice:
// fewer layers, heads, sequences and tokens, whole-prompt chunks, all running
// sequences in one step, no finish, no reset.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "engine/kv_dtype.h"
#include "engine/traits.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "properties/scenario.h"

namespace kvcheck::rcgen {

// Upper limits of what the generators draw: small enough that a case runs in
// about a millisecond, large enough for every cache shape that matters.
inline constexpr int kMaxLayers = 4;
inline constexpr int kMaxHeads = 8;
inline constexpr int kMaxSequences = 6;
inline constexpr int kMaxPrompt = 48;
inline constexpr int kMaxDecode = 16;

struct ModelGenes {
  Family family = Family::kGpt2;
  int n_layers = 1;
  int n_kv_heads = 1;
  int group = 1;          // query heads per KV head, clamped so that heads <= kMaxHeads
  int half_head_dim = 1;  // head_dim = 2 * half_head_dim (RoPE needs it even)
  int d_model = 4;
  int d_ff = 4;
  int vocab = 8;
  bool qkv_bias = false;  // gpt2 only; ignored for llama
  int max_pos_slack = 0;  // max_pos = capacity + slack
  uint64_t weight_seed = 0;

  bool operator==(const ModelGenes&) const = default;
};

struct SequenceGenes {
  int prompt_length = 1;
  int decode_length = 0;           // one-token steps after the prompt
  std::vector<int> chunk_lengths;  // prompt split; 0 (or the end) puts the rest in one chunk
  bool finishes = false;           // EOS right after its last token
  int start_delay = 0;             // steps of its epoch that run before it starts
  bool reset_before = false;       // the engine resets before this sequence's epoch
  int shared_prefix = 0;  // prefix cache: leading tokens copied from the sequence before it

  bool operator==(const SequenceGenes&) const = default;
};

// One fork or truncation (docs/OPERATIONS.md), applied right after step
// `after_step` (counted over the whole schedule) to a running sequence.
struct OpGenes {
  int after_step = 0;
  bool truncate = false;  // else a fork
  int target = 0;         // index among the running sequences
  int amount = 0;         // fork: prefix length; truncate: tokens forgotten (mod length + 1)
  int snap = 0;           // 0: amount as drawn, 1: to a block boundary, 2: all of it
  int child_tokens = 1;   // fork: tokens the child is fed afterwards
  bool child_finishes = false;
  bool flush = false;  // instead: flush the prefix cache (scenarios that have one)
  // Instead (RoPE models with contiguous storage, engines that declare erase
  // and shift): 1 a context shift, erase n = amount cells from position
  // keep = child_tokens and shift the rest by -n; 2 erase the tail from
  // keep; 3 the context shift of 1 twice in a row. All keep the positions
  // contiguous, so `held` stays the content.
  int context_shift = 0;

  bool operator==(const OpGenes&) const = default;
};

struct ScenarioGenes {
  ModelGenes model;
  std::vector<SequenceGenes> sequences;  // at least one; beyond kMaxSequences ignored
  // One per step, in order: bit i selects the i-th running sequence that has
  // tokens left; 0 (or no gene left) selects all of them.
  std::vector<int> step_masks;
  int capacity_slack = 0;  // capacity = longest sequence + slack: 0 puts a chunk's end at capacity
  int spare_rows = 0;      // max_rows = most sequences running at once + spare
  KvDtype kv_dtype = KvDtype::kF32;
  uint64_t token_seed = 0;
  std::vector<OpGenes> ops;   // only what the traits declare (fork, truncate) is drawn
  int block_size = 0;         // 0: contiguous; 1..32: paged (engines that declare it)
  bool prefix_cache = false;  // paged: a prefix cache (engines that declare it)
  // Paged: < 0 the engine's default pool (never runs dry); else
  // ceil(longest content / B) - 1 + slack blocks, small enough that
  // sequences compete, cached blocks are evicted and steps are refused.
  int pool_slack = -1;
  // Sliding windows (engines that declare them; docs/OPERATIONS.md): 0 none,
  // else W, drawn below and above the prompts and chunks; the pattern makes
  // every N-th layer global (0: all windowed). Last in the build so that the
  // genes above draw what they drew before windows existed.
  int sliding_window = 0;
  int window_pattern = 0;

  bool operator==(const ScenarioGenes&) const = default;
};

// What the generated scenarios must contain.
enum class Emphasis : uint8_t {
  kAny,            // every shape
  kSharedKvHeads,  // n_kv_heads < n_heads (GQA or MQA): P7 has nothing to check otherwise
  // Erase and shift on every case where the engine declares them: RoPE
  // models, contiguous storage, no window, a context shift early in the
  // schedule. The kill matrix draws the shift faults' cases so.
  kContextShift,
};

// The independent genes; shrinking them shrinks the decoded scenario.
rc::Gen<ScenarioGenes> scenario_genes(Emphasis emphasis = Emphasis::kAny);

// Any genes -> a Scenario that validates (Scenario::validate() == "") and
// that an engine with `traits` can run: its families, dtypes and shape
// multiples, only the operations it declares, steps within its token limit,
// and one context large enough for all sequences when it shares one.
// With a checkpoint (--model) the model genes are ignored: the config and
// weights are the checkpoint's, tokens are drawn from its vocabulary and the
// sequences are cut to fit its context (max_pos); schedules vary as always.
Scenario decode(const ScenarioGenes& genes, const EngineTraits& traits = EngineTraits::strict(),
                const std::shared_ptr<const Checkpoint>& model = nullptr);

// decode() over scenario_genes().
rc::Gen<Scenario> scenario(Emphasis emphasis = Emphasis::kAny,
                           const EngineTraits& traits = EngineTraits::strict(),
                           std::shared_ptr<const Checkpoint> model = nullptr);

// Coverage tags of one scenario, for RC_TAG / RC_CLASSIFY and the docs.
struct Coverage {
  bool gpt2 = false;
  bool mha = false, gqa = false, mqa = false;  // one head counts as MHA
  bool batched_step = false;                   // some step feeds two sequences or more
  bool mixed_step = false;       // some step has a prefill chunk and a decode together
  bool one_token_chunk = false;  // a prompt chunk of 1 token after another chunk
  bool reset = false;
  bool finish = false;
  bool reused_row = false;      // a start after a finish, with no reset between
  bool at_capacity = false;     // a sequence fills the capacity exactly
  bool reduced_dtype = false;   // bf16, f16 or q8_0 KV
  bool q8_multi_block = false;  // q8_0 with head_dim > 32: several scales per head
  bool paged = false;           // block_size > 0
  bool fork = false, fork_mid_block = false, fork_at_boundary = false;
  bool truncate = false, truncate_to_zero = false, truncate_across_blocks = false;
  bool prefix_cache = false, flush = false, small_pool = false;
  bool shared_prompt = false;    // a sequence starts with a whole block of an earlier one's tokens
  bool window = false;           // a sliding window
  bool window_wraps = false;     // a windowed sequence holds more than W tokens (the ring wraps)
  bool window_straddle = false;  // a chunk crosses the ring's edge (a multiple of W)
  bool erase = false, shift = false;
  bool shifts_in_a_row = false;  // one sequence shifted twice or more

  // Every tag either side has (coverage over many scenarios).
  Coverage& operator|=(const Coverage& other);
};
Coverage coverage(const Scenario& scenario);

}  // namespace kvcheck::rcgen

namespace kvcheck {
// RapidCheck prints counterexamples with this (found by argument-dependent
// lookup), so a failure shows the scenario as its case-file-like text.
void showValue(const Scenario& scenario, std::ostream& os);
}  // namespace kvcheck

namespace rc {
template <>
struct Arbitrary<kvcheck::Scenario> {
  static Gen<kvcheck::Scenario> arbitrary() { return kvcheck::rcgen::scenario(); }
};
}  // namespace rc

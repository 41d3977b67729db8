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
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "engine/kv_dtype.h"
#include "engine/traits.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "properties/feature_use.h"
#include "properties/scenario.h"
#include "properties/schedule/operation.h"

namespace kvcheck::rcgen {

// Upper limits of what the generators draw: small enough that a case runs in
// about a millisecond, large enough for every cache shape that matters.
inline constexpr int kMaxLayers = 4;
inline constexpr int kMaxHeads = 8;
inline constexpr int kMaxSequences = 6;
inline constexpr int kMaxPrompt = 48;
inline constexpr int kMaxDecode = 16;

// What the generated scenarios must contain.
enum class Emphasis : uint8_t {
  kAny,            // every shape
  kSharedKvHeads,  // n_kv_heads < n_heads (GQA or MQA): P7 has nothing to check otherwise
  // Erase and shift on every case where the engine declares them: RoPE
  // models, contiguous storage, no window, a context shift early in the
  // schedule. The kill matrix draws the shift faults' cases so.
  kContextShift,
  kForks,             // forks on most cases (P11 compares a fork with a solo run)
  kTruncations,       // truncations on most cases (P12)
  kPrefixCache,       // paged storage with a prefix cache and shared prompts (P15)
  kSeveralSequences,  // two sequences or more (P5 needs one to finish while another runs)
  kOffload,           // paged storage and offloads on most cases (the host tier's faults)
  // Contiguous storage without a window, saves and restores on most cases
  // (the restore fault's kill row; docs/OPERATIONS.md, "Save and restore").
  kSaveRestore,
};

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
  // Offload (paged, where declared): 0 none; k > 0 its blocks go to the host
  // tier after the step that feeds its ((k - 1) mod chunks + 1)-th chunk.
  // A gene of its own, not an operation gene, so that offloads do not thin
  // out the other operations' shares (docs/GENERATORS.md).
  int offload_after = 0;

  bool operator==(const SequenceGenes&) const = default;
};

// One operation on the cache (properties/schedule/: fork, truncate, erase,
// shift, flush), applied `steps_after` steps after the one before it (the
// first counts from the first step; 0: right after the same step, so that
// operations come in runs: an erase, then a shift of what is left). `which`
// picks among the operations the
// engine declares and the scenario allows, by their weights (the
// emphasis may raise some); each draws its parameters from `genes` over its
// whole domain (Operation::draw).
struct OpGenes {
  int steps_after = 0;
  int which = 0;
  OperationGenes genes;
  int child_tokens = 1;  // fork: tokens the child is fed afterwards
  bool child_finishes = false;

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
  // Where the engine declares erase or shift: 0 any scenario; 1 one they
  // apply to (a RoPE model, contiguous storage, no window), so that they are
  // drawn often enough although most scenarios rule them out; 2 as 1, with
  // sequences that hold a few cells before the operations and are fed after
  // them (a range in the middle, then a step). Shrinks 2 -> 1 -> 0.
  int cell_operations = 0;
  // With a prefix cache, on engines that declare cache keys: 0 none; 1 and
  // 2 alternate keys 1 and 2 over the sequences (a prompt shared with the
  // one before crosses keys), 3 gives every sequence key 2 (shared within
  // one key). Drawn after the genes above, so they draw what they drew.
  int cache_keys = 0;
  Emphasis emphasis = Emphasis::kAny;  // not a gene: what decode() favours
  // Not a gene: the model genes serve several scenarios (ModelReuse), so
  // max_pos is the model's own (as a checkpoint's is), not the schedule's.
  bool model_max_pos = false;

  bool operator==(const ScenarioGenes&) const = default;
};

// Several scenarios on one model, for a backend where a model's load is most
// of a case (llama.cpp: docs/PERFORMANCE.md). Scenarios n * k to n * k + n - 1
// of a stream (n = `scenarios_per_model`) share the model genes of model k,
// which are drawn from `key` and k alone; each scenario keeps its own shrink
// tree. So a stream cut into turns, run in any order or in other processes
// (a campaign's shards), draws the same models for the same scenarios. The
// decoded scenarios take max_pos from the model genes (ScenarioGenes::
// model_max_pos), so that they share one config and one set of weights.
// One per hunt sequence (a campaign keeps one per property and backend, so
// a property's cases do not depend on the other properties'); not shared
// between threads.
inline constexpr int kModelReuseMaxSize = 100;  // a hunt's default max_size (HuntOptions)
struct ModelReuse {
  int scenarios_per_model = 1;
  uint64_t key = 0;            // the stream's: model k is drawn from (key, k)
  int64_t next_scenario = 0;   // the stream's number of the next scenario drawn
  int64_t current_model = -1;  // k of `current`
  std::optional<rc::Shrinkable<ModelGenes>> current;  // the model genes of model k
};

// The independent genes; shrinking them shrinks the decoded scenario.
// With `reuse` (and scenarios_per_model > 1) the model genes are reused.
rc::Gen<ScenarioGenes> scenario_genes(Emphasis emphasis = Emphasis::kAny,
                                      std::shared_ptr<ModelReuse> reuse = nullptr);

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
                           std::shared_ptr<const Checkpoint> model = nullptr,
                           std::shared_ptr<ModelReuse> reuse = nullptr);

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
  bool wide_head = false;       // head_dim >= 64 (real models' heads: limits.head_dims)
  bool paged = false;           // block_size > 0
  bool fork = false, fork_mid_block = false, fork_at_boundary = false;
  bool truncate = false, truncate_to_zero = false, truncate_across_blocks = false;
  bool rollback = false;   // a truncate or verify that drops n > 0 tokens
  bool cow_write = false;  // after a fork mid-block, parent or child is fed (paged)
  bool prefix_cache = false, flush = false, small_pool = false;
  bool shared_prompt = false;    // a sequence starts with a whole block of an earlier one's tokens
  bool window = false;           // a sliding window
  bool window_wraps = false;     // a windowed sequence holds more than W tokens (the ring wraps)
  bool window_straddle = false;  // a chunk crosses the ring's edge (a multiple of W)
  bool erase = false, shift = false;
  bool shifts_in_a_row = false;  // one sequence shifted twice or more
  // The shapes of erase and shift that tell a cell's index from its
  // position (docs/GENERATORS.md, "Operations"):
  bool erase_middle_then_step = false;  // cells on both sides stay; fed next, no shift between
  bool shift_up = false;
  bool shift_middle_then_step = false;  // cells above the range stay, and it is fed next
  bool fed_with_gap = false;  // a step feeds a sequence whose cell i does not hold position i
  // div (docs/OPERATIONS.md, "Div"): any, and a step that feeds a sequence
  // two of whose cells share a position.
  bool div = false, fed_with_shared_position = false;
  // Speculative decoding (verify): every draft rejected, every one
  // accepted, a single draft, a rollback that crosses a block boundary, and
  // one of a sequence a fork made or forked from (shared blocks).
  bool verify = false, verify_reject_all = false, verify_accept_all = false;
  bool verify_one_draft = false, verify_across_blocks = false, verify_forked = false;
  // Aborts: any, and a later start whose prompt begins with a whole block an
  // aborted prefill fed (with a prefix cache: where SGLang #38319 read garbage).
  bool abort = false, hit_after_abort = false;
  // Cache keys: any keyed sequence, and a start whose prompt begins with a
  // whole block of an earlier one's with another key (the hit must miss).
  bool cache_keys = false, shared_prompt_across_keys = false;
  bool prompt_logits = false;  // a prefix cache asked for a hit's prompt rows
  // Offload: one that moves blocks to the host tier, and a later step of an
  // offloaded sequence (its blocks come back first).
  bool offload = false, offload_then_step = false;
  // Save and restore: a restore that changes the sequence's cells (it was
  // fed, truncated or shifted since its save), and a later step of it.
  bool restore = false, restore_then_step = false;
  bool prefill = false;  // a chunk of two tokens or more
  bool decode = false;   // a one-token chunk of a sequence that holds tokens
  bool start = false;
  bool f32 = false, bf16 = false, f16 = false, q8_0 = false;

  // Every tag either side has (coverage over many scenarios).
  Coverage& operator|=(const Coverage& other);
};
Coverage coverage(const Scenario& scenario);

// The cache features a scenario with this coverage gives the engine a
// chance to use (feature_use.h): the proof-of-use report's "drawn" column.
FeatureMask drawn_features(const Coverage& coverage);

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

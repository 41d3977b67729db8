// Executes a Scenario on an engine: maps sequence indices to the engine's
// SequenceIds, feeds each step's chunks and files every fed token's logits
// under its sequence. The properties build everything else (solo runs, other
// chunkings, reruns) as scenarios of their own and run them through here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/pipeline.h"
#include "properties/property.h"
#include "properties/scenario.h"
#include "properties/schedule/call_target.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

// Called after every call that succeeded; returning false stops the run there.
class ScenarioRunner;
using CallHook = std::function<bool(int call_index, const ScenarioRunner& runner)>;
// Work the caller does while an engine in another process computes the
// steps sent without waiting (Pipeline::post_step): before the first wait for
// them, else after the last call. It must not touch the engine. Skipped
// when a call that waited has already failed or been refused.
using Meanwhile = std::function<void()>;

struct RunResult {
  std::vector<std::vector<float>> logits;  // [sequence][position][V] flattened per sequence
  bool engine_failed = false;  // an EngineError stopped a valid scenario: the engine's fault
  bool threw = false;          // ... or another exception (error_kind is then meaningless)
  int failed_call = -1;
  EngineError::Kind error_kind = EngineError::Kind::kBadBatch;
  std::string error_message;
  bool stopped = false;  // the hook asked to stop
  // Prefix cache: [sequence][stream index] fed tokens whose logits the engine
  // took from the cache instead of computing (Engine::reused); the properties
  // skip their logits (their K/V are still checked, and so are later tokens).
  std::vector<std::vector<bool>> reused;
  // [sequence][stream index] fed tokens the prefix cache supplied, whether or
  // not their logits were computed (Scenario::prompt_logits): P15's hits.
  std::vector<std::vector<bool>> hit;
  // A step refused for want of pool blocks (EngineError kCapacity, the
  // scenario sets pool_blocks) that changed nothing: the run stopped there.
  // A refusal that changed the pool or a length is engine_failed instead.
  bool refused = false;
  int refused_call = -1;
};

// One scenario on one fresh engine. Keeps the engine after the run so a
// property (P9) can go on driving it. Each call runs through its operation
// (operation.h, `run`) on the runner as a CallTarget.
class ScenarioRunner final : private CallTarget {
 public:
  // `config` and `weights` may differ from the scenario's (P7 runs the MHA
  // twin); the options come from the scenario, faults from the factory.
  ScenarioRunner(const Scenario& scenario, const Config& config, const Weights& weights,
                 const EngineFactory& factory);

  // Runs every call in order. EngineErrors become RunResult::engine_failed.
  RunResult run(const CallHook& hook = {});
  // The same, but the result takes the logits over instead of copying them;
  // the runner keeps none (logits() is empty afterwards). Run once.
  RunResult run_and_take_logits(const CallHook& hook = {}, const Meanwhile& meanwhile = {});

  Engine& engine() override { return *engine_; }
  const Engine& engine() const { return *engine_; }
  bool running(int sequence) const { return sequences_[size_t(sequence)].running; }
  SequenceId id(int sequence) const { return sequences_[size_t(sequence)].id; }
  int fed(int sequence) const { return sequences_[size_t(sequence)].fed; }
  int held(int sequence) const { return sequences_[size_t(sequence)].held; }  // content length
  const std::vector<float>& logits(int sequence) const { return logits_[size_t(sequence)]; }
  // [stream index] whose logits came from the prefix cache (RunResult::reused).
  const std::vector<bool>& reused(int sequence) const { return reused_[size_t(sequence)]; }
  // Hands the collected logits over; the runner keeps the engine.
  std::vector<std::vector<float>> take_logits() { return std::move(logits_); }

 private:
  // Executes each call in order; on a refusal, compares the states before
  // and after it (docs/OPERATIONS.md, "Small pools").
  RunResult run_calls(const CallHook& hook, const Meanwhile& meanwhile = {});
  // One call; its failure or refusal goes into `result`.
  void run_call(const Call& call, int call_index, RunResult& result);
  // The engine's call for `call`, and its effect on the sequences as the
  // runner models them (ids, fed and held tokens, cells): its operation's
  // `run` on this runner.
  void execute(const Call& call, int call_index);
  // CallTarget: what an operation's `run` reaches.
  std::span<RunnerSequence> sequences() override { return sequences_; }
  const Scenario& scenario() const override { return scenario_; }
  int max_pos() const override { return scenario_.config.max_pos; }
  void feed(const Call& call, int call_index) override;  // a step
  std::vector<int> fill_batch(const Call& call);         // [chunk] fed before the step
  void advance(const Call& call);                        // a step's tokens are now held
  // Files a step's logits and prefix-cache counts; fed_at: [chunk] the
  // sequence's stream tokens fed before the step.
  void file_step(const Call& call, std::span<const int> fed_at);

  // The run's outcome so far: it ended (failed, refused or stopped), and
  // the failure of a call (error null: another exception than EngineError).
  static bool ended(const RunResult& result);
  static void clear_failure(RunResult& result);
  static void record_failure(RunResult& result, int call, const EngineError* error,
                             const char* what);
  // A refused step ends the run if it changed nothing, else fails it.
  static void settle_refusal(RunResult& result, int call, const EngineError& e,
                             const std::string& before, const std::string& after);
  // What a refused step must leave as it was: the pool and the length of
  // every running sequence (scenario indices; engine_ids maps them), as text.
  std::vector<size_t> running_sequences() const;
  std::vector<SequenceId> engine_ids(std::span<const size_t> sequences) const;
  std::string digest(const EngineState& state, std::span<const size_t> sequences) const;
  std::string state_digest() const;

  // Steps sent through the engine's pipeline (engine/pipeline.h; the
  // functions below live in runner_pipeline.cpp): posted
  // where nothing reads the engine between calls (no hook) and, in a pool
  // that may run dry, watched so that a refusal can be judged.
  struct PostedStep {
    int call = -1;
    std::vector<int> fed_at;      // [chunk]
    std::vector<size_t> watched;  // running sequences whose state it carries, if watched
  };
  bool posts(const Call& call) const;
  // Whether the posted steps must be read before `call`: in a pool that may
  // run dry, every call a refusal before it could change (all but a start,
  // finish, reset or another step) waits for them.
  bool waits_for_posted(const Call& call) const;
  // Reads the posted steps in order; the first that fails or is refused
  // becomes the run's failure if it came before `result`'s.
  void collect_posted(RunResult& result);
  bool collect(const PostedStep& step, RunResult& result);
  // The caller's meanwhile work, once, with the posted steps sent first.
  void run_meanwhile();
  // The end of a run: meanwhile, the posted steps, and any refusal of a call
  // sent ahead that nothing raised (Pipeline::settle_sent).
  void finish_run(RunResult& result);

  // Proof of use (feature_use.h; runner_features.cpp): what the engine's
  // introspection says happened, noted into the thread's FeatureUse scope.
  struct Observed {
    int cached = -1;  // pool().cached before a step, when eviction is watched
  };
  struct SharedBlock {
    int parent = -1, child = -1;  // scenario indices
    int index = -1;               // table index of the block both held after the fork
  };
  bool observes(const Call& call) const;  // nothing in flight: the engine may be read
  Observed observe_before(const Call& call);
  void observe_after(const Call& call, const Observed& before);
  void observe_eviction(const Call& call, int cached_before);
  void observe_fork(const Call& call);
  void observe_split(const Call& call);

  const Scenario& scenario_;
  std::unique_ptr<Engine> engine_;
  int vocab_;
  std::vector<RunnerSequence> sequences_;   // [sequence] engine id, running, fed, held, cells
  std::vector<std::vector<float>> logits_;  // [sequence][position][V]
  std::vector<std::vector<bool>> reused_;   // [sequence][stream index] logits not computed
  std::vector<std::vector<bool>> hit_;      // [sequence][stream index] from the prefix cache
  std::vector<BatchEntry> batch_;           // [chunk] of the current step
  std::vector<float> step_logits_;          // [tokens in step][V]
  bool may_run_dry_ = false;              // a sized pool: a step may be refused for want of blocks
  Pipeline* pipeline_ = nullptr;          // Engine::pipeline, null in process
  bool defer_ = false;                    // posted steps are read when needed, not at once
  std::vector<PostedStep> posted_;        // oldest first
  const Meanwhile* meanwhile_ = nullptr;  // the caller's, until it has run
  SharedBlock cow_;                       // a fork's shared partial block, until written
};

// The scenario on a fresh engine built from its own config and weights.
// Logits are filed per sequence in feed order (stream index), whatever
// truncations did to its content.
RunResult run_scenario(const Scenario& scenario, const Weights& weights,
                       const EngineFactory& factory, const CallHook& hook = {},
                       const Meanwhile& meanwhile = {});

// A scenario that feeds `tokens` to one sequence in the given chunk lengths,
// on the same model and engine options as `base`. `leading_dummies` sequences
// are started first (so the sequence lands in a later row) and, while they
// have room, each gets a one-token decode placed before the sequence's chunk
// in every step (so it also sits later in the batch); the dummies' tokens come
// from `dummy_seed`. The sequence of interest is index 0.
Scenario solo_scenario(const Scenario& base, std::span<const int32_t> tokens,
                       const std::vector<int>& chunk_lengths, int leading_dummies = 0,
                       uint64_t dummy_seed = 0);

// A stable 64-bit digest of a scenario, used to seed its derived choices
// (P2's random split, P3's dummy tokens, P9's extra tokens) so a replay makes
// the very same ones.
uint64_t scenario_digest(const Scenario& scenario);

// Index of the first element whose bits differ, or nullopt when the two are
// the same bits (sizes must match; a size difference reports min size).
std::optional<size_t> first_bit_difference(std::span<const float> a, std::span<const float> b);

// "0.12345678 (0x3dfcd35b)": the value and its bit pattern.
std::string float_with_bits(float value);

}  // namespace kvcheck

// The smallest scenario of each fault, derived by hand in docs/FAULTS.md,
// and a runner that plays it on any engine. The CPU engine's fault tests and
// the CUDA engine's run the very same cases.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/engine.h"

namespace kvcheck::test {

struct Op {
  // kFork starts a new sequence (the next index) from `sequence`'s first
  // `count` tokens; kObserve appends the pool's free, used and reference
  // count total and 1 (0) when unheld storage is (not) all poisoned to the
  // outcome, for faults that show in the pool or storage, not in logits.
  // kTryStep is a step the engine may refuse (a pool that runs dry): the
  // refusal is recorded as -1 in the outcome and the script goes on.
  // kShift moves every cached position of `sequence` by `count` (an
  // erase-free context shift).
  enum Kind {
    kStart,
    kStep,
    kFinish,
    kReset,
    kFork,
    kTruncate,
    kObserve,
    kTryStep,
    kShift,
    kAbort,
    kOffload,
    kSave,
    kRestore
  } kind;
  std::vector<std::pair<int, int>> entries = {};  // kStep: (sequence index, tokens)
  int sequence = 0;  // kFinish, kAbort, kOffload, kFork (parent), kTruncate, kSave, kRestore
  int count = 0;     // kFork, kTruncate; kShift: delta; kStart: cache key (0: none)
};

Op start();
Op step(std::vector<std::pair<int, int>> entries);
Op finish(int sequence);
Op reset();
Op fork(int parent, int n);
Op truncate(int sequence, int n);
Op observe();
Op try_step(std::vector<std::pair<int, int>> entries);
Op shift(int sequence, int delta);
Op abort(int sequence);
Op start_keyed(int cache_key);
Op offload(int sequence);
Op save(int sequence);
Op restore(int sequence);

struct MinimalCase {
  Fault fault;
  Family family;
  int n_layers, n_heads, n_kv_heads, capacity;
  std::vector<Op> ops;
  int block_size = 0;  // paged storage when > 0
  KvDtype kv_dtype = KvDtype::kF32;
  int head_dim = 0;     // 0: the tiny model's
  int pool_blocks = 0;  // paged: 0 the engine's default
  bool prefix_cache = false;
  std::vector<std::vector<int32_t>> prompts = {};  // [sequence] its tokens; empty: random ones
  int sliding_window = 0;                          // Config::sliding_window (every layer)
  bool prompt_logits = false;                      // EngineOptions::prompt_logits

  // Uses what only the CPU engine offers (docs/OPERATIONS.md): q8_0 K/V,
  // sliding windows; erase and shift; a host tier (offload); save and restore.
  bool cpu_only() const;
};

// One minimal case per fault, in the order of engine/faults.h.
const std::vector<MinimalCase>& minimal_cases();

using MakeEngine =
    std::function<std::unique_ptr<Engine>(const Config&, const Weights&, const EngineOptions&)>;

// All logits the script produced, or the error it stopped on.
using Outcome = std::variant<std::vector<float>, std::string>;

Outcome run_minimal_case(const MinimalCase& m, FaultSet faults, const MakeEngine& make_engine);

// Same kind of outcome and the same bits (or the same error message).
bool same_outcome(const Outcome& a, const Outcome& b);

}  // namespace kvcheck::test

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
  enum Kind { kStart, kStep, kFinish, kReset } kind;
  std::vector<std::pair<int, int>> entries = {};  // kStep: (sequence index, tokens)
  int sequence = 0;                               // kFinish
};

Op start();
Op step(std::vector<std::pair<int, int>> entries);
Op finish(int sequence);
Op reset();

struct MinimalCase {
  Fault fault;
  Family family;
  int n_layers, n_heads, n_kv_heads, capacity;
  std::vector<Op> ops;
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

// What every kvcheck fuzz target provides, so that one harness serves both
// libFuzzer (libfuzzer_main.cpp) and the plain replay driver that runs seeds
// and regressions in ctest (replay_main.cpp).
//
// The convention for rejected inputs (docs/FUZZING.md):
//  - run_one() returns kRejected for an input outside what the target means
//    to accept: bytes outside schedule_fuzz's canonical framing, a case file
//    or safetensors file that its parser refuses. The target still checks
//    everything it can on such an input (a crash there is still a crash).
//  - Under libFuzzer, a target whose rejected inputs carry no coverage worth
//    keeping (schedule_fuzz: every non-canonical input has a canonical twin
//    that the custom mutator writes instead) returns -1, so they never enter
//    the corpus; the parser targets return 0, because a parser's error paths
//    are exactly the coverage to keep.
//  - The replay driver with --strict fails on any rejected input, so committed
//    seeds cannot drift from the framing or the formats.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kvcheck::fuzz {

enum class Outcome : uint8_t { kAccepted, kRejected };

struct TargetTraits {
  std::string_view name;
  bool keep_rejected_in_corpus;
};

// Defined once by each target.
extern const TargetTraits kTarget;
// Reads the environment (KVCHECK_FAULT and the like); called once before any input.
void initialize();
// Checks one input; aborts (with a report on stderr) when a check fails.
Outcome run_one(std::span<const uint8_t> input);

}  // namespace kvcheck::fuzz

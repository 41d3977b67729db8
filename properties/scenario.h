// A Scenario is everything needed to replay one check: the model (config and
// weight seed), the engine options that shape the cache, the sequences with
// every token fixed in advance (teacher forcing, so a near-tie argmax can never
// fork engine and oracle), and the schedule of engine calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace kvcheck {

// One entry of a step: `length` next tokens of sequence `sequence`.
struct ChunkSpec {
  int sequence = 0;  // index into Scenario::sequences
  int length = 0;

  bool operator==(const ChunkSpec&) const = default;
};

struct Call {
  enum class Kind : uint8_t { kStart, kStep, kFinish, kReset };
  Kind kind = Kind::kStep;
  int sequence = 0;               // kStart, kFinish: index into Scenario::sequences
  std::vector<ChunkSpec> chunks;  // kStep: the batch, in order

  static Call start(int s) { return {Kind::kStart, s, {}}; }
  static Call step(std::vector<ChunkSpec> c) { return {Kind::kStep, 0, std::move(c)}; }
  static Call finish(int s) { return {Kind::kFinish, s, {}}; }
  static Call reset() { return {Kind::kReset, 0, {}}; }

  bool operator==(const Call&) const = default;
};

struct Scenario {
  Config config;
  uint64_t weight_seed = 1;
  int capacity = 64;  // positions per sequence
  int max_rows = 4;   // sequences alive at once
  KvDtype kv_dtype = KvDtype::kF32;
  std::vector<std::vector<int32_t>> sequences;  // [sequence][token], fed in order
  std::vector<Call> calls;
  // A user's checkpoint (--model): its weights replace init_weights(config,
  // weight_seed), and `config` must be its config. Null for seeded models.
  std::shared_ptr<const Checkpoint> model;

  bool operator==(const Scenario&) const = default;

  // Engine options for this scenario (faults off; the caller adds them).
  EngineOptions engine_options() const;

  // Shrinking measure: layers + query heads + sequences + tokens fed + calls
  // (steps, finishes, resets; a start counts through its sequence).
  int size() const;

  // Empty when the scenario is well formed: every sequence starts once before
  // it is fed, is fed only while running, never past its tokens or the
  // capacity, at most max_rows run at once, and the config validates.
  // Otherwise one message naming the call and what is wrong.
  std::string validate() const;

  // Readable multi-line text form (RapidCheck's showValue uses it too).
  std::string to_text() const;
};

// The weights a scenario runs: its checkpoint's, else init_weights(config,
// weight_seed), computed once per thread for the most recent (config, seed)
// since the drivers check many scenarios of one model in a row.
std::shared_ptr<const Weights> scenario_weights(const Scenario& scenario);

}  // namespace kvcheck

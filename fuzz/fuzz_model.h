// The fuzz decoder's model of a schedule (FuzzModel): the harness's own
// ScheduleModel (properties/schedule/) over the bounds of schedule_fuzz's
// byte framing, so decode(), encode() and to_scenario() check each call by
// its operation's precondition and apply it by its operation's apply, as
// validation, the generators and the shrinker do.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz/schedule_program.h"
#include "properties/schedule/operation.h"

namespace kvcheck::fuzz {

// A flush applies only where the scenario has a prefix cache.
inline bool has_prefix_cache(const ProgramHeader& h) {
  return std::clamp(h.prefix_cache, 0, 1) == 1 && std::clamp(h.block_size, 0, kMaxBlockSize) > 0;
}

// Positions and cells a schedule may reach while it is decoded: the
// scenario's capacity and max_pos are sized afterwards, to fit.
constexpr int kUnbounded = std::numeric_limits<int>::max() / 2;

// The scenario a program's calls are decoded against: the header's storage
// and family (which decide where flush, erase and shift apply, through the
// operations' scope and precondition), kMaxSequences streams of kMaxTokens
// tokens (values unused), kMaxRunning rows, and no other limit.
inline Scenario decoding_bounds(const ProgramHeader& h) {
  Scenario s;
  s.config.family = std::clamp(h.family, 0, 1) == 1 ? Family::kLlama : Family::kGpt2;
  s.config.max_pos = kUnbounded;
  s.capacity = kUnbounded;
  s.max_rows = kMaxRunning;
  s.block_size = std::clamp(h.block_size, 0, kMaxBlockSize);
  s.prefix_cache = has_prefix_cache(h);
  s.sequences.assign(size_t(kMaxSequences), std::vector<int32_t>(size_t(kMaxTokens)));
  return s;
}

// The schedule so far, on the harness's own ScheduleModel: each call is
// checked by its operation's precondition and applied by its operation's
// apply (properties/schedule/), so the decoder means by a call what
// validation, the generators and the shrinker mean. It also keeps the
// peaks to_scenario() sizes the scenario by.
class FuzzModel {
 public:
  explicit FuzzModel(const ProgramHeader& h) : bounds_(decoding_bounds(h)), model_(bounds_) {}
  FuzzModel(const FuzzModel&) = delete;  // model_ refers to bounds_
  FuzzModel& operator=(const FuzzModel&) = delete;

  const Scenario& bounds() const { return bounds_; }
  const SequenceModel& at(int s) const { return model_.at(s); }
  bool allows(const Call& call) const {
    return operation(call.kind).precondition(model_, call).empty();
  }
  // Sequences started so far; the next start or fork takes this index.
  int started() const {
    return static_cast<int>(std::count_if(
        model_.sequences.begin(), model_.sequences.end(),
        [](const SequenceModel& s) { return s.state != SequenceModel::State::kNotStarted; }));
  }
  bool can_start() const { return allows(Call::start(started())); }
  // The sequences `probe(s)` may run on, in index order.
  template <class Probe>
  std::vector<int> sequences_where(Probe probe) const {
    std::vector<int> out;
    for (int s = 0; s < kMaxSequences; ++s) {
      if (allows(probe(s))) out.push_back(s);
    }
    return out;
  }
  std::vector<int> running() const { return sequences_where(Call::finish); }
  // Running sequences that can still be fed.
  std::vector<int> feedable() const {
    return sequences_where([](int s) { return Call::step({{s, 1}}); });
  }
  // Running sequences holding a cell (what truncate, erase and shift act on).
  std::vector<int> holding() const {
    return sequences_where([](int s) { return Call::truncate(s, 1); });
  }
  int longest_chunk(int s) const { return std::min(kMaxChunk, kMaxTokens - at(s).fed); }

  void apply(const Call& call) {
    operation(call.kind).apply(model_, call);
    peak_running = std::max(peak_running, model_.running);
    for (const SequenceModel& seq : model_.sequences) {
      longest_held = std::max(longest_held, seq.held());
      longest_position = std::max(longest_position, seq.next_position());
    }
  }

  int peak_running = 0;      // the most sequences running at once
  int longest_held = 0;      // the most cells one sequence held
  int longest_position = 0;  // the largest next position

 private:
  Scenario bounds_;
  ScheduleModel model_;
};

}  // namespace kvcheck::fuzz

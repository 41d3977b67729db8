// The harness's model of the sequences (schedule_model.h).
#include "properties/schedule/schedule_model.h"

#include <algorithm>

namespace kvcheck {

bool SequenceModel::gapped() const {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i] != int32_t(i)) return true;
  }
  return false;
}

ScheduleModel::ScheduleModel(const Scenario& s) : scenario(s), sequences(s.sequences.size()) {}

std::string cell_operation_scope(const Scenario& scenario) {
  if (scenario.config.family != Family::kLlama) {
    return "needs a RoPE model (llama family); gpt2's learned positions are not applicable";
  }
  if (scenario.block_size != 0) return "needs contiguous storage (block_size 0)";
  if (scenario.config.sliding_window > 0) {
    // No engine keeps a ring and moves its cells yet.
    return "not with a sliding window (sliding_window " +
           std::to_string(scenario.config.sliding_window) + ")";
  }
  return {};
}

std::string cell_range_precondition(const ScheduleModel& model, const Call& call,
                                    const std::string& keyword) {
  if (!model.is_running(call.sequence)) {
    return keyword + " of sequence " + std::to_string(call.sequence) + " which is not running";
  }
  if (std::string why = cell_operation_scope(model.scenario); !why.empty()) {
    return keyword + ": " + why;
  }
  if (call.p0 < 0 || call.p1 < call.p0) {
    return keyword + " of [" + std::to_string(call.p0) + ", " + std::to_string(call.p1) +
           "): needs 0 <= p0 <= p1";
  }
  return {};
}

std::vector<int32_t> sorted_positions(const SequenceModel& sequence) {
  std::vector<int32_t> positions = sequence.cells;
  std::sort(positions.begin(), positions.end());
  return positions;
}

}  // namespace kvcheck

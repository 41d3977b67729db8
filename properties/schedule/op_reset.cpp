// reset: every running sequence is dropped at once (Engine::reset).
#include "properties/schedule/operation.h"

namespace kvcheck {

namespace {

std::string precondition(const ScheduleModel&, const Call&) {
  return {};
}

void apply(ScheduleModel& model, const Call&) {
  for (SequenceModel& s : model.sequences) {
    if (s.running()) s.state = SequenceModel::State::kDropped;
  }
  model.running = 0;
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.reset ? "" : "reset";
}

}  // namespace

extern const Operation kResetOperation{.kind = Call::Kind::kReset,
                                       .keyword = "reset",
                                       .precondition = precondition,
                                       .apply = apply,
                                       .needs = needs};

}  // namespace kvcheck

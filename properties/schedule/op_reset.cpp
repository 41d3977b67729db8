// reset: every running sequence is dropped at once (Engine::reset).
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_reset {

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

void plan(PlanBuilder& builder, const Call&, int call_index) {
  for (size_t s = 0; s < builder.running.size(); ++s) {
    if (builder.running[s]) builder.plan.end_call[s] = call_index, builder.close(s);
    builder.running[s] = false;
  }
}

void run(CallTarget& target, const Call&, int) {
  target.engine().reset();
  for (RunnerSequence& seq : target.sequences()) seq.running = false;
}

}  // namespace op_reset

extern const Operation kResetOperation{.kind = Call::Kind::kReset,
                                       .keyword = "reset",
                                       .precondition = op_reset::precondition,
                                       .apply = op_reset::apply,
                                       .plan = op_reset::plan,
                                       .run = op_reset::run,
                                       .needs = op_reset::needs,
                                       .releases = true};

}  // namespace kvcheck

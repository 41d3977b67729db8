// finish s: the sequence ends (EOS) and frees its row (Engine::finish).
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_finish {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (model.is_running(call.sequence)) return {};
  return "finish of sequence " + std::to_string(call.sequence) + " which is not running";
}

void apply(ScheduleModel& model, const Call& call) {
  model.at(call.sequence).state = SequenceModel::State::kDropped;
  --model.running;
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.finish ? "" : "finish";
}

constexpr Argument kSyntax[] = {{"finish", &Call::sequence, true}};

void plan(PlanBuilder& builder, const Call& call, int call_index) {
  const size_t s = size_t(call.sequence);
  builder.plan.end_call[s] = call_index;
  builder.running[s] = false;
  builder.close(s);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().finish(seq.id);
  seq.running = false;
}

}  // namespace op_finish

extern const Operation kFinishOperation{.kind = Call::Kind::kFinish,
                                        .keyword = "finish",
                                        .syntax = op_finish::kSyntax,
                                        .precondition = op_finish::precondition,
                                        .apply = op_finish::apply,
                                        .plan = op_finish::plan,
                                        .run = op_finish::run,
                                        .needs = op_finish::needs,
                                        .releases = true};

}  // namespace kvcheck

// finish s: the sequence ends (EOS) and frees its row (Engine::finish).
#include "properties/schedule/operation.h"

namespace kvcheck {

namespace {

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

}  // namespace

extern const Operation kFinishOperation{.kind = Call::Kind::kFinish,
                                        .keyword = "finish",
                                        .syntax = kSyntax,
                                        .precondition = precondition,
                                        .apply = apply,
                                        .needs = needs};

}  // namespace kvcheck

// start s: a new sequence takes a row (Engine::add_sequence).
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_start {

std::string precondition(const ScheduleModel& model, const Call& call) {
  const std::string which = "start of sequence " + std::to_string(call.sequence);
  if (!model.exists(call.sequence)) {
    return which + ", which does not exist (there are " + std::to_string(model.sequences.size()) +
           ")";
  }
  if (model.at(call.sequence).state != SequenceModel::State::kNotStarted) {
    return which + ", which was already started";
  }
  if (model.running == model.scenario.max_rows) {
    return which + " exceeds max_rows " + std::to_string(model.scenario.max_rows) + " (" +
           std::to_string(model.running) + " sequences are running)";
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  model.at(call.sequence).state = SequenceModel::State::kRunning;
  ++model.running;
}

constexpr Argument kSyntax[] = {{"start", &Call::sequence, true}};

void plan(PlanBuilder& builder, const Call& call, int call_index) {
  const size_t s = size_t(call.sequence);
  builder.plan.start_call[s] = call_index;
  builder.running[s] = true;
  builder.open(s, call_index);
}

// A keyed start needs the engine's cache keys.
std::string needs(const EngineTraits& traits, const Scenario& scenario, const Call& call) {
  if (scenario.cache_key(call.sequence) == 0 || traits.operations.cache_keys) return {};
  return "cache_keys";
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  const uint32_t key = target.scenario().cache_key(call.sequence);
  seq.id = key == 0 ? target.engine().start() : target.engine().start_keyed(key);
  seq.running = true;
}

}  // namespace op_start

extern const Operation kStartOperation{.kind = Call::Kind::kStart,
                                       .keyword = "start",
                                       .syntax = op_start::kSyntax,
                                       .precondition = op_start::precondition,
                                       .apply = op_start::apply,
                                       .plan = op_start::plan,
                                       .run = op_start::run,
                                       .needs = op_start::needs,
                                       .starts = true};

}  // namespace kvcheck

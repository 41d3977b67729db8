// flush: the prefix cache forgets every cached block (Engine::flush_prefix_cache).
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_flush {

std::string precondition(const ScheduleModel& model, const Call&) {
  if (model.scenario.prefix_cache) return {};
  return "flush of the prefix cache, which the scenario does not have (prefix_cache 0)";
}

void apply(ScheduleModel&, const Call&) {}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.prefix_cache ? "" : "a prefix cache";
}

std::string scope(const Scenario& scenario) {
  return scenario.prefix_cache ? "" : "no prefix cache";
}

std::optional<Call> draw(const DrawContext&, const OperationGenes&) {
  return Call::flush();
}

// The cache holds what the oracle recomputes anyway.
void plan(PlanBuilder&, const Call&, int) {}

void run(CallTarget& target, const Call&, int) {
  target.engine().flush_prefix_cache();
}

}  // namespace op_flush

extern const Operation kFlushOperation{.kind = Call::Kind::kFlush,
                                       .keyword = "flush",
                                       .weight = 12,
                                       .precondition = op_flush::precondition,
                                       .apply = op_flush::apply,
                                       .plan = op_flush::plan,
                                       .run = op_flush::run,
                                       .needs = op_flush::needs,
                                       .scope = op_flush::scope,
                                       .draw = op_flush::draw,
                                       .releases = true};

}  // namespace kvcheck

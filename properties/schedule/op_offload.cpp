// offload s: the running sequence's blocks move to the engine's second
// memory tier, host memory (Engine::offload), and its next step brings them
// back (docs/OPERATIONS.md, "Offload"). The round trip must equal never
// having offloaded, so for the model and the oracle it is the identity: P1,
// P6 and the others already compare what follows with a run without it,
// and P13 checks each tier's accounting after it. Its own operation because
// the tier moves are where vLLM #45704 (a copy that did not wait for the
// compute stream) and TensorRT-LLM PR #12834 (drifting block counters) live.
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_offload {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (!model.is_running(call.sequence)) {
    return "offload of sequence " + std::to_string(call.sequence) + " which is not running";
  }
  if (model.scenario.block_size == 0) {
    return "offload needs paged storage (block_size > 0): contiguous rows have no blocks to move";
  }
  return {};
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return declares(traits.operations, "offload") ? "" : "offload (a second memory tier)";
}

std::string scope(const Scenario& scenario) {
  return scenario.block_size > 0 ? "" : "contiguous storage (block_size 0)";
}

// A sequence that holds tokens: an empty one has no blocks to move. Not
// drawn as an operation gene (weight 0): the generators offload through
// each sequence's own offload gene (SequenceGenes::offload_after), which
// thins out no other operation.
std::optional<Call> draw(const DrawContext& context, const OperationGenes&) {
  if (context.model.at(context.sequence).held() == 0) return std::nullopt;
  return Call::offload(context.sequence);
}

constexpr Argument kSyntax[] = {{"offload", &Call::sequence, true}};

// Where the blocks live is no part of the content.
void apply(ScheduleModel&, const Call&) {}

void plan(PlanBuilder&, const Call&, int) {}

void run(CallTarget& target, const Call& call, int) {
  target.engine().offload(target.sequences()[size_t(call.sequence)].id);
}

}  // namespace op_offload

extern const Operation kOffloadOperation{.kind = Call::Kind::kOffload,
                                         .keyword = "offload",
                                         .syntax = op_offload::kSyntax,
                                         .weight = 0,
                                         .precondition = op_offload::precondition,
                                         .apply = op_offload::apply,
                                         .plan = op_offload::plan,
                                         .run = op_offload::run,
                                         .needs = op_offload::needs,
                                         .scope = op_offload::scope,
                                         .draw = op_offload::draw,
                                         .releases = true};

}  // namespace kvcheck

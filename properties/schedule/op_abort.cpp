// abort s: a request cancelled before its stream was fed, typically between
// the chunks of a chunked prefill (Engine::abort). The sequence ends as a
// finish ends it; blocks it wrote whole may stay in the prefix cache, and a
// later request that hits them must equal a cold run (docs/OPERATIONS.md,
// "Abort"). Apart from finish because engines abort on a path of their own
// (SGLang #38319 freed an aborted prefill's pages and left them in the radix
// tree), and because it is drawn mid-stream, where finish never is.
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_abort {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (model.is_running(call.sequence)) return {};
  return "abort of sequence " + std::to_string(call.sequence) + " which is not running";
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.finish ? "" : "finish (abort ends a sequence as finish does)";
}

// Only between chunks: the sequence was fed and has tokens still to feed.
std::optional<Call> draw(const DrawContext& context, const OperationGenes&) {
  const SequenceModel& seq = context.model.at(context.sequence);
  const size_t stream = context.model.scenario.sequences[size_t(context.sequence)].size();
  if (seq.fed == 0 || size_t(seq.fed) >= stream) return std::nullopt;
  return Call::abort(context.sequence);
}

constexpr Argument kSyntax[] = {{"abort", &Call::sequence, true}};

// For the model and the oracle an abort is a finish: the sequence is gone
// and what it fed was fed.
void apply(ScheduleModel& model, const Call& call) {
  operation(Call::Kind::kFinish).apply(model, call);
}

void plan(PlanBuilder& builder, const Call& call, int call_index) {
  operation(Call::Kind::kFinish).plan(builder, call, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().abort(seq.id);
  seq.running = false;
}

}  // namespace op_abort

extern const Operation kAbortOperation{.kind = Call::Kind::kAbort,
                                       .keyword = "abort",
                                       .syntax = op_abort::kSyntax,
                                       .weight = 2,
                                       .precondition = op_abort::precondition,
                                       .apply = op_abort::apply,
                                       .plan = op_abort::plan,
                                       .run = op_abort::run,
                                       .needs = op_abort::needs,
                                       .draw = op_abort::draw,
                                       .releases = true};

}  // namespace kvcheck

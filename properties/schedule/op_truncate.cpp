// truncate s n: the running sequence forgets its last n cells
// (Engine::truncate; speculative decoding's rollback).
#include <algorithm>

#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_truncate {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (!model.is_running(call.sequence)) {
    return "truncate of sequence " + std::to_string(call.sequence) + " which is not running";
  }
  const int held = model.at(call.sequence).held();
  if (call.count < 0 || call.count > held) {
    return "truncate of " + std::to_string(call.count) + " tokens from sequence " +
           std::to_string(call.sequence) + ", which holds " + std::to_string(held);
  }
  if (std::string why =
          cut_keeps_shared_positions(model.at(call.sequence).cells, held - call.count);
      !why.empty()) {
    return "truncate of " + std::to_string(call.count) + " tokens from sequence " +
           std::to_string(call.sequence) + ": " + why;
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  SequenceModel& seq = model.at(call.sequence);
  seq.cells.resize(size_t(seq.held() - call.count));
}

std::string needs(const EngineTraits& traits, const Scenario& scenario, const Call&) {
  if (!traits.operations.truncate) return "truncate";
  if (scenario.config.sliding_window > 0) return "truncate with a sliding window";
  return {};
}

// Any count: as drawn, back to the last block boundary, all of it, or
// across a boundary (freeing a whole block and part of another).
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const int held = context.model.at(context.sequence).held();
  if (held == 0) return std::nullopt;
  const int B = context.block_size;
  const int to_boundary = held % B != 0 ? held % B : std::min(held, B);
  int n = 0;
  switch (genes.variant % 4) {
    case 0:
      n = genes.a % (held + 1);
      break;
    case 1:
      n = to_boundary;
      break;
    case 2:
      n = held;
      break;
    default:
      n = std::min(held, to_boundary + 1 + genes.a % B);
      break;
  }
  return Call::truncate(context.sequence, n);
}

std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  for (int n : smaller_values(call.count, 0)) out.push_back(Call::truncate(call.sequence, n));
  return out;
}

constexpr Argument kSyntax[] = {{"truncate", &Call::sequence, true},
                                {"truncate count", &Call::count}};

// The sequence loses its last n tokens (content, cells, chunks); a new
// segment starts. A truncation of nothing changes nothing.
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  if (call.count == 0) return;
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  plan.plain[q] = false;
  plan.truncated[q] = true;
  builder.close(q);
  const size_t keep = plan.content[q].size() - size_t(call.count);
  plan.content[q].resize(keep);
  plan.content_stream[q].resize(keep);
  plan.cells[q].resize(keep);
  plan.history[q].push_back(oracle::Event::truncate(call.count));
  std::vector<int>& chunks = plan.content_chunks[q];
  for (int drop = call.count; drop > 0;) {
    const int cut = std::min(drop, chunks.back());
    chunks.back() -= cut;
    drop -= cut;
    if (chunks.back() == 0) chunks.pop_back();
  }
  builder.reopen(q, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().truncate(seq.id, call.count);
  seq.held -= call.count;
  seq.cells.resize(size_t(seq.held));
}

// A truncation of more than is held takes what is held; one of nothing goes.
bool normalize(Call& call, ContentLengths& lengths) {
  if (lengths.valid(call.sequence)) {
    call.count = std::clamp(call.count, 0, lengths.held[size_t(call.sequence)]);
    lengths.held[size_t(call.sequence)] -= call.count;
  }
  return call.count != 0;
}

}  // namespace op_truncate

extern const Operation kTruncateOperation{.kind = Call::Kind::kTruncate,
                                          .keyword = "truncate",
                                          .syntax = op_truncate::kSyntax,
                                          .weight = 4,
                                          .precondition = op_truncate::precondition,
                                          .apply = op_truncate::apply,
                                          .plan = op_truncate::plan,
                                          .run = op_truncate::run,
                                          .needs = op_truncate::needs,
                                          .draw = op_truncate::draw,
                                          .simpler = op_truncate::simpler,
                                          .normalize = op_truncate::normalize,
                                          .releases = true};

}  // namespace kvcheck

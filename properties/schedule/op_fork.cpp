// fork c p n: a new sequence c starts with the first n cells of running
// sequence p (Engine::fork; beam search, parallel sampling).
#include <algorithm>

#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_fork {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (!model.exists(call.sequence) ||
      model.at(call.sequence).state != SequenceModel::State::kNotStarted) {
    return "fork into sequence " + std::to_string(call.sequence) +
           ", which does not exist or was already started";
  }
  if (!model.is_running(call.parent)) {
    return "fork from sequence " + std::to_string(call.parent) + " which is not running";
  }
  const int held = model.at(call.parent).held();
  if (call.count < 0 || call.count > held) {
    return "fork of " + std::to_string(call.count) + " tokens from sequence " +
           std::to_string(call.parent) + ", which holds " + std::to_string(held);
  }
  if (std::string why = cut_keeps_shared_positions(model.at(call.parent).cells, call.count);
      !why.empty()) {
    return "fork of " + std::to_string(call.count) + " tokens from sequence " +
           std::to_string(call.parent) + ": " + why;
  }
  if (model.running == model.scenario.max_rows) {
    return "fork into sequence " + std::to_string(call.sequence) + " exceeds max_rows " +
           std::to_string(model.scenario.max_rows);
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  const std::vector<int32_t>& parent = model.at(call.parent).cells;
  SequenceModel& child = model.at(call.sequence);
  child.state = SequenceModel::State::kRunning;
  child.cells.assign(parent.begin(), parent.begin() + call.count);
  ++model.running;
}

std::string needs(const EngineTraits& traits, const Scenario& scenario, const Call&) {
  if (!traits.operations.fork) return "fork";
  if (scenario.config.sliding_window > 0) return "fork with a sliding window";
  return {};
}

// Any prefix length: as drawn, at a block boundary, all of it, or one
// either side of a boundary (where copy-on-write of a partial block starts).
// The child's index is the generator's to fill in.
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const int held = context.model.at(context.sequence).held();
  const int B = context.block_size;
  int n = 0;
  switch (genes.variant % 4) {
    case 0:
      n = genes.a % (held + 1);
      break;
    case 1:
      n = held / B * B;
      break;
    case 2:
      n = held;
      break;
    default:
      n = std::clamp((genes.a % (held / B + 1)) * B + genes.b % 3 - 1, 0, held);
      break;
  }
  return Call::fork(-1, context.sequence, n);
}

std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  for (int n : smaller_values(call.count, 0))
    out.push_back(Call::fork(call.sequence, call.parent, n));
  return out;
}

constexpr Argument kSyntax[] = {{"fork child", &Call::sequence, true},
                                {"fork parent", &Call::parent, true},
                                {"fork length", &Call::count}};

// The child inherits the parent's first n cells: content, history (with a
// truncation of the rest) and the parent's chunks cut at n.
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  const size_t p = size_t(call.parent);
  plan.start_call[q] = call_index;
  builder.running[q] = true;
  plan.plain[q] = false;
  plan.forked_from[q] = call.parent;
  plan.forked[p] = true;
  const size_t keep = size_t(call.count);
  plan.content[q].assign(plan.content[p].begin(), plan.content[p].begin() + std::ptrdiff_t(keep));
  plan.cells[q].assign(plan.cells[p].begin(), plan.cells[p].begin() + std::ptrdiff_t(keep));
  plan.history[q] = plan.history[p];
  plan.history[q].push_back(oracle::Event::truncate(int(plan.cells[p].size() - keep)));
  plan.shifted[q] = plan.shifted[p];
  plan.content_stream[q].assign(keep, -1);
  int left = call.count;
  for (int length : plan.content_chunks[p]) {
    if (left == 0) break;
    plan.content_chunks[q].push_back(std::min(length, left));
    left -= plan.content_chunks[q].back();
  }
  builder.reopen(q, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& child = target.sequences()[size_t(call.sequence)];
  const RunnerSequence& parent = target.sequences()[size_t(call.parent)];
  child.id = target.engine().fork(parent.id, call.count);
  child.running = true;
  child.held = call.count;
  child.cells.assign(parent.cells.begin(), parent.cells.begin() + call.count);
}

// A fork of more than the parent holds takes what it holds.
bool normalize(Call& call, ContentLengths& lengths) {
  if (lengths.valid(call.parent) && lengths.valid(call.sequence)) {
    call.count = std::clamp(call.count, 0, lengths.held[size_t(call.parent)]);
    lengths.held[size_t(call.sequence)] = call.count;
  }
  return true;
}

}  // namespace op_fork

extern const Operation kForkOperation{.kind = Call::Kind::kFork,
                                      .keyword = "fork",
                                      .syntax = op_fork::kSyntax,
                                      .weight = 4,
                                      .precondition = op_fork::precondition,
                                      .apply = op_fork::apply,
                                      .plan = op_fork::plan,
                                      .run = op_fork::run,
                                      .needs = op_fork::needs,
                                      .draw = op_fork::draw,
                                      .simpler = op_fork::simpler,
                                      .normalize = op_fork::normalize,
                                      .starts = true,
                                      .releases = true};

}  // namespace kvcheck

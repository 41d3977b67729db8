// erase s p0 p1: the cells holding positions [p0, p1) are removed, leaving
// a gap in the positions (Engine::erase; llama.cpp's llama_memory_seq_rm).
#include <utility>

#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_erase {

std::string precondition(const ScheduleModel& model, const Call& call) {
  return cell_range_precondition(model, call, "erase");
}

void apply(ScheduleModel& model, const Call& call) {
  erase_cells(model.at(call.sequence).cells, call.p0, call.p1);
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.erase ? "" : "erase";
}

// Any range of the held positions: most often a middle one, with cells
// left on both sides (the gap stays unless a shift closes it), else any
// range, or everything from p0 on (the tail).
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const SequenceModel& seq = context.model.at(context.sequence);
  const int next = seq.next_position();
  if (seq.held() == 0 || !cell_operation_scope(context.model.scenario).empty()) {
    return std::nullopt;
  }
  const int s = context.sequence;
  switch (genes.variant % 5) {
    case 0:
    case 1:
    case 2:
      if (next >= 3) {
        const int p0 = 1 + genes.a % (next - 2);
        return Call::erase(s, p0, p0 + 1 + genes.b % (next - p0 - 1));
      }
      [[fallthrough]];
    case 3: {
      const int p0 = genes.a % next;
      return Call::erase(s, p0, p0 + 1 + genes.b % (next - p0));
    }
    default:
      return Call::erase(s, genes.a % next, context.max_pos);
  }
}

// A narrower range, or one that starts earlier.
std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  for (int p1 : smaller_values(call.p1, call.p0)) {
    out.push_back(Call::erase(call.sequence, call.p0, p1));
  }
  for (int p0 : smaller_values(call.p0, 0)) out.push_back(Call::erase(call.sequence, p0, call.p1));
  return out;
}

constexpr Argument kSyntax[] = {
    {"erase", &Call::sequence, true}, {"erase p0", &Call::p0}, {"erase p1", &Call::p1}};

// The erased cells leave the content with their positions; from here on the
// reference replays the history (PlanBuilder::mark_shifted).
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  builder.mark_shifted(q);
  std::vector<int32_t>& c = plan.cells[q];
  std::vector<int32_t> content, stream;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i] >= call.p0 && c[i] < call.p1) continue;
    content.push_back(plan.content[q][i]);
    stream.push_back(plan.content_stream[q][i]);
  }
  plan.content[q] = std::move(content);
  plan.content_stream[q] = std::move(stream);
  erase_cells(c, call.p0, call.p1);
  plan.history[q].push_back(oracle::Event::erase(call.p0, call.p1));
  builder.open_history(q, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().erase(seq.id, call.p0, call.p1);
  seq.held -= erase_cells(seq.cells, call.p0, call.p1);
}

}  // namespace op_erase

extern const Operation kEraseOperation{.kind = Call::Kind::kErase,
                                       .keyword = "erase",
                                       .syntax = op_erase::kSyntax,
                                       .weight = 10,
                                       .precondition = op_erase::precondition,
                                       .apply = op_erase::apply,
                                       .plan = op_erase::plan,
                                       .run = op_erase::run,
                                       .needs = op_erase::needs,
                                       .scope = cell_operation_scope,
                                       .draw = op_erase::draw,
                                       .simpler = op_erase::simpler,
                                       .releases = true};

}  // namespace kvcheck

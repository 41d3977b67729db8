// div s p0 p1 d: the cells holding positions [p0, p1) now hold position / d
// (rounded down), keys re-rotated by each cell's own change (Engine::div;
// llama.cpp's llama_memory_seq_div, self-extend's grouped positions). The
// one operation after which cells may share a position (docs/OPERATIONS.md,
// "Div").
#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_div {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (std::string why = cell_range_precondition(model, call, "div"); !why.empty()) return why;
  if (call.divisor < 1) return "div by " + std::to_string(call.divisor) + ": needs d >= 1";
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  div_cells(model.at(call.sequence).cells, call.p0, call.p1, call.divisor);
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.div ? "" : "div";
}

// A range of the held positions divided by 2 to 5 (1, which changes
// nothing, one time in eight): a middle range of two positions or more (cells stay above it, so the
// next token's position is not the divided range's), the tail from p0 (as
// self-extend divides its window), or every cell.
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const SequenceModel& seq = context.model.at(context.sequence);
  if (seq.held() == 0 || !cell_operation_scope(context.model.scenario).empty()) {
    return std::nullopt;
  }
  const int s = context.sequence, next = seq.next_position();
  const int d = genes.c % 8 == 7 ? 1 : 2 + genes.c % 4;
  const int p0 = genes.a % next;
  switch (genes.variant % 4) {
    case 0:
    case 1: {  // two positions or more where there are: some then share one
      const int least = next - p0 >= 2 ? 2 : 1;
      return Call::div(s, p0, p0 + least + genes.b % (next - p0 - least + 1), d);
    }
    case 2:
      return Call::div(s, p0, context.max_pos, d);
    default:
      return Call::div(s, 0, context.max_pos, d);
  }
}

// A narrower range, one that starts earlier, or a smaller divisor (1 last:
// it changes nothing).
std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  const int s = call.sequence;
  for (int p1 : smaller_values(call.p1, call.p0))
    out.push_back(Call::div(s, call.p0, p1, call.divisor));
  for (int p0 : smaller_values(call.p0, 0)) out.push_back(Call::div(s, p0, call.p1, call.divisor));
  for (int d : smaller_values(call.divisor, 2)) out.push_back(Call::div(s, call.p0, call.p1, d));
  return out;
}

constexpr Argument kSyntax[] = {{"div", &Call::sequence, true},
                                {"div p0", &Call::p0},
                                {"div p1", &Call::p1},
                                {"div d", &Call::divisor, false, 1}};

// The cells move; the content stays. From here on the reference replays
// the history (PlanBuilder::mark_shifted), as after a shift.
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  builder.mark_shifted(q);
  div_cells(plan.cells[q], call.p0, call.p1, call.divisor);
  plan.history[q].push_back(oracle::Event::div(call.p0, call.p1, call.divisor));
  builder.open_history(q, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().div(seq.id, call.p0, call.p1, call.divisor);
  div_cells(seq.cells, call.p0, call.p1, call.divisor);
}

}  // namespace op_div

extern const Operation kDivOperation{.kind = Call::Kind::kDiv,
                                     .keyword = "div",
                                     .syntax = op_div::kSyntax,
                                     .weight = 7,
                                     .precondition = op_div::precondition,
                                     .apply = op_div::apply,
                                     .plan = op_div::plan,
                                     .run = op_div::run,
                                     .needs = op_div::needs,
                                     .scope = cell_operation_scope,
                                     .draw = op_div::draw,
                                     .simpler = op_div::simpler};

}  // namespace kvcheck

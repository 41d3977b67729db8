// shift s p0 p1 d: the cells holding positions [p0, p1) now hold position
// + d, keys re-rotated (Engine::shift; llama.cpp's llama_memory_seq_add).
#include <algorithm>

#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_shift {

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (std::string why = cell_range_precondition(model, call, "shift"); !why.empty()) return why;
  std::vector<int32_t> cells = model.at(call.sequence).cells;
  if (std::string error =
          shift_cells(cells, call.p0, call.p1, call.delta, model.scenario.config.max_pos);
      !error.empty()) {
    return "shift of s" + std::to_string(call.sequence) + " [" + std::to_string(call.p0) + ", " +
           std::to_string(call.p1) + ") by " + std::to_string(call.delta) + ": " + error;
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  shift_cells(model.at(call.sequence).cells, call.p0, call.p1, call.delta,
              model.scenario.config.max_pos);
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call&) {
  return traits.operations.shift ? "" : "shift";
}

// The moves that keep the cells apart: every cell in [p0, p1) moves by
// delta in [lowest, highest] without meeting a cell outside the range or
// leaving [0, max_pos). {0, 0} when no cell is in the range.
std::pair<int, int> free_deltas(const std::vector<int32_t>& sorted, int p0, int p1, int max_pos) {
  int below = -1, above = max_pos, first = -1, last = -1;
  for (int32_t p : sorted) {
    if (p < p0) below = p;
    if (p >= p1 && above == max_pos) above = p;
    if (p >= p0 && p < p1) last = p, first = first < 0 ? p : first;
  }
  if (first < 0) return {0, 0};
  return {below + 1 - first, above - 1 - last};
}

// Runs of consecutive held positions: [first, last + 1), ascending.
std::vector<std::pair<int, int>> runs_of(const std::vector<int32_t>& sorted) {
  std::vector<std::pair<int, int>> runs;
  for (int32_t p : sorted) {
    if (!runs.empty() && runs.back().second == p) {
      ++runs.back().second;
    } else {
      runs.push_back({p, p + 1});
    }
  }
  return runs;
}

// A middle range moved into a gap next to it: part of a run up into the
// gap above it, or down into the gap below it. Only a gap makes room for a
// middle range, and a sequence fed after it tells index from position.
std::optional<Call> into_a_gap(int sequence, const std::vector<int32_t>& sorted,
                               const OperationGenes& genes) {
  const std::vector<std::pair<int, int>> runs = runs_of(sorted);
  struct Move {
    int run, gap;  // the run's index; the gap's size, negative below it
  };
  std::vector<Move> moves;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i + 1 < runs.size()) moves.push_back({int(i), runs[i + 1].first - runs[i].second});
    const int below = i == 0 ? runs[0].first : runs[i].first - runs[i - 1].second;
    if (below > 0) moves.push_back({int(i), -below});
  }
  if (moves.empty()) return std::nullopt;
  const Move move = moves[size_t(genes.a) % moves.size()];
  const auto [first, end] = runs[size_t(move.run)];
  const int keep = genes.b % (end - first);  // cells of the run that stay
  const int delta = 1 + genes.c % std::abs(move.gap);
  if (move.gap > 0) return Call::shift(sequence, first + keep, end, delta);
  return Call::shift(sequence, first, end - keep, -delta);
}

// The tail above the first gap moved down to close it: with the erase
// before it, llama.cpp's context shift.
std::optional<Call> close_first_gap(int sequence, const std::vector<int32_t>& sorted, int max_pos) {
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int expected = i == 0 ? 0 : sorted[i - 1] + 1;
    if (sorted[i] > expected)
      return Call::shift(sequence, sorted[i], max_pos, expected - sorted[i]);
  }
  return std::nullopt;
}

// Any range [p0, p1) (the tail when p1 is max_pos), moved up or down by
// any amount that keeps the cells apart.
std::optional<Call> any_range(int sequence, const std::vector<int32_t>& sorted, bool tail,
                              int max_pos, const OperationGenes& genes) {
  const int next = sorted.back() + 1;
  const int p0 = genes.a % next;
  const int p1 = tail ? max_pos : p0 + 1 + genes.b % (next - p0);
  const auto [lowest, highest] = free_deltas(sorted, p0, p1, max_pos);
  const bool up = genes.c % 2 == 1;
  const int amount = genes.c / 2;
  if ((up || lowest == 0) && highest > 0)
    return Call::shift(sequence, p0, p1, 1 + amount % highest);
  if (lowest < 0) return Call::shift(sequence, p0, p1, -(1 + amount % -lowest));
  return std::nullopt;
}

// A range moved above every cell it does not move: cells then hold
// positions out of slot order, which the positions allow (only two cells on
// one position are refused).
std::optional<Call> over_the_top(int sequence, const std::vector<int32_t>& sorted, int max_pos,
                                 const OperationGenes& genes) {
  const int next = sorted.back() + 1;
  if (next < 2) return std::nullopt;
  const int p0 = genes.a % (next - 1);  // the top cell stays: a middle range
  const int p1 = p0 + 1 + genes.b % (next - 1 - p0);
  const auto first = std::lower_bound(sorted.begin(), sorted.end(), p0);
  const auto end = std::lower_bound(sorted.begin(), sorted.end(), p1);
  if (first == end) return std::nullopt;
  const int lowest = next - *first, highest = max_pos - 1 - *(end - 1);
  if (lowest > highest) return std::nullopt;
  return Call::shift(sequence, p0, p1, lowest + genes.c % (highest - lowest + 1));
}

// A middle range into a gap (over the top where there is none), the first
// gap closed, any range without passing a cell, a middle range over the
// top (twice as often: with the into-a-gap forms it keeps cells above the
// range, the shape that tells a cell's index from its position), or the
// tail; a form that has nothing to move falls back to the tail.
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const SequenceModel& seq = context.model.at(context.sequence);
  if (seq.held() == 0 || !cell_operation_scope(context.model.scenario).empty()) {
    return std::nullopt;
  }
  const std::vector<int32_t> sorted = sorted_positions(seq);
  std::optional<Call> call;
  switch (genes.variant % 7) {
    case 0:
    case 1:
      call = into_a_gap(context.sequence, sorted, genes);
      if (!call) call = over_the_top(context.sequence, sorted, context.max_pos, genes);
      break;
    case 2:
      call = close_first_gap(context.sequence, sorted, context.max_pos);
      break;
    case 3:
      call = any_range(context.sequence, sorted, false, context.max_pos, genes);
      break;
    case 4:
    case 5:
      call = over_the_top(context.sequence, sorted, context.max_pos, genes);
      break;
    default:
      break;
  }
  if (!call) call = any_range(context.sequence, sorted, true, context.max_pos, genes);
  return call;
}

// A narrower range, one that starts earlier, or a smaller delta of the
// same sign (the shrinker drops those that would make cells collide).
std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  const int s = call.sequence;
  for (int p1 : smaller_values(call.p1, call.p0))
    out.push_back(Call::shift(s, call.p0, p1, call.delta));
  for (int p0 : smaller_values(call.p0, 0)) out.push_back(Call::shift(s, p0, call.p1, call.delta));
  for (int d : smaller_values(std::abs(call.delta), 1)) {
    out.push_back(Call::shift(s, call.p0, call.p1, call.delta < 0 ? -d : d));
  }
  return out;
}

constexpr Argument kSyntax[] = {{"shift", &Call::sequence, true},
                                {"shift p0", &Call::p0},
                                {"shift p1", &Call::p1},
                                {"shift delta", &Call::delta, false, -(1 << 30), 1 << 30}};

// The cells move; the content stays. From here on the reference replays
// the history (PlanBuilder::mark_shifted).
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  const size_t q = size_t(call.sequence);
  builder.mark_shifted(q);
  shift_cells(plan.cells[q], call.p0, call.p1, call.delta, builder.scenario.config.max_pos);
  plan.history[q].push_back(oracle::Event::shift(call.p0, call.p1, call.delta));
  builder.open_history(q, call_index);
}

void run(CallTarget& target, const Call& call, int) {
  RunnerSequence& seq = target.sequences()[size_t(call.sequence)];
  target.engine().shift(seq.id, call.p0, call.p1, call.delta);
  shift_cells(seq.cells, call.p0, call.p1, call.delta, target.max_pos());
}

}  // namespace op_shift

extern const Operation kShiftOperation{.kind = Call::Kind::kShift,
                                       .keyword = "shift",
                                       .syntax = op_shift::kSyntax,
                                       .weight = 10,
                                       .precondition = op_shift::precondition,
                                       .apply = op_shift::apply,
                                       .plan = op_shift::plan,
                                       .run = op_shift::run,
                                       .needs = op_shift::needs,
                                       .scope = cell_operation_scope,
                                       .draw = op_shift::draw,
                                       .simpler = op_shift::simpler};

}  // namespace kvcheck

// verify s k j: speculative decoding's verification. The sequence's last k
// cells are draft tokens (a step fed them); the target model accepts the
// first j and the other k - j are rolled back (Engine::truncate, as vLLM,
// llama.cpp's seq_rm and transformers' crop do). The sequence then goes on
// as if only the j accepted tokens had been fed: its next fed token takes
// the place of the first rejected one (docs/OPERATIONS.md, "Speculative
// decoding"). Apart from truncate because its domain is the speculation's:
// k from the drafting step, j from 0 (reject all) to k (accept all).
#include <algorithm>

#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_verify {

int rejected(const Call& call) {
  return call.count - call.accepted;
}

std::string precondition(const ScheduleModel& model, const Call& call) {
  const std::string of = "verify of sequence " + std::to_string(call.sequence);
  if (!model.is_running(call.sequence)) return of + " which is not running";
  const int held = model.at(call.sequence).held();
  if (call.count < 1 || call.count > held) {
    return of + ": " + std::to_string(call.count) + " draft tokens, but it holds " +
           std::to_string(held) + " (1 to its length)";
  }
  if (call.accepted < 0 || call.accepted > call.count) {
    return of + ": " + std::to_string(call.accepted) + " accepted of " +
           std::to_string(call.count) + " draft tokens (0 to " + std::to_string(call.count) + ")";
  }
  const std::vector<int32_t>& cells = model.at(call.sequence).cells;
  if (std::string why = cut_keeps_shared_positions(cells, held - rejected(call)); !why.empty()) {
    return of + ": " + why;
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  SequenceModel& seq = model.at(call.sequence);
  seq.cells.resize(size_t(seq.held() - rejected(call)));
  seq.draft = 0;
}

std::string needs(const EngineTraits& traits, const Scenario& scenario, const Call&) {
  if (!traits.operations.truncate) return "truncate (verify rolls back rejected drafts)";
  if (scenario.config.sliding_window > 0) return "truncate with a sliding window";
  return {};
}

// The draft is what the sequence's last step fed (nothing to verify
// otherwise). Which of them are accepted: as drawn, none, all, one (k = 1
// drafts are speculation's most common), or back to a block boundary and
// one past it (the rollback frees a block, or part of one).
std::optional<Call> draw(const DrawContext& context, const OperationGenes& genes) {
  const SequenceModel& seq = context.model.at(context.sequence);
  const int k = std::min(seq.draft, seq.held());
  if (k < 1) return std::nullopt;
  const int B = context.block_size;
  const int after_boundary = seq.held() % B;  // rejecting these keeps whole blocks only
  int j = 0;
  switch (genes.variant % 5) {
    case 0:
      j = genes.a % (k + 1);
      break;
    case 1:
      j = 0;
      break;
    case 2:
      j = k;
      break;
    case 3:
      j = std::max(0, k - std::max(1, after_boundary));
      break;
    default:
      j = std::max(0, k - after_boundary - 1);
      break;
  }
  return Call::verify(context.sequence, k, j);
}

// Fewer drafts (the rejected ones keep their count), then more accepted.
std::vector<Call> simpler(const Call& call) {
  std::vector<Call> out;
  for (int k : smaller_values(call.count, 1)) {
    out.push_back(Call::verify(call.sequence, k, std::max(0, call.accepted - (call.count - k))));
  }
  for (int j = call.accepted + 1; j <= call.count && j <= call.accepted + 2; ++j) {
    out.push_back(Call::verify(call.sequence, call.count, j));
  }
  return out;
}

constexpr Argument kSyntax[] = {{"verify", &Call::sequence, true},
                                {"verify drafts", &Call::count, false, 1},
                                {"verify accepted", &Call::accepted}};

// For the oracle and the engine, a verification is the truncation of its
// rejected tail.
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  operation(Call::Kind::kTruncate)
      .plan(builder, Call::truncate(call.sequence, rejected(call)), call_index);
}

void run(CallTarget& target, const Call& call, int call_index) {
  operation(Call::Kind::kTruncate)
      .run(target, Call::truncate(call.sequence, rejected(call)), call_index);
}

// A draft of at least one token and at most what is held; the accepted
// ones at most the draft.
bool normalize(Call& call, ContentLengths& lengths) {
  if (lengths.valid(call.sequence)) {
    call.count = std::clamp(call.count, 1, std::max(1, lengths.held[size_t(call.sequence)]));
    call.accepted = std::clamp(call.accepted, 0, call.count);
    lengths.held[size_t(call.sequence)] -= call.count - call.accepted;
  }
  return true;
}

}  // namespace op_verify

extern const Operation kVerifyOperation{.kind = Call::Kind::kVerify,
                                        .keyword = "verify",
                                        .syntax = op_verify::kSyntax,
                                        .weight = 7,
                                        .precondition = op_verify::precondition,
                                        .apply = op_verify::apply,
                                        .plan = op_verify::plan,
                                        .run = op_verify::run,
                                        .needs = op_verify::needs,
                                        .draw = op_verify::draw,
                                        .simpler = op_verify::simpler,
                                        .normalize = op_verify::normalize,
                                        .releases = true};

}  // namespace kvcheck

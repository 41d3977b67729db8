// step s0:n0 s1:n1 ...: one batch feeding each listed sequence its next
// chunk of tokens (Engine::step). The generators build steps from each
// sequence's plan of chunks rather than from operation genes (weight 0).
#include <algorithm>

#include "properties/schedule/call_target.h"
#include "properties/schedule/operation.h"
#include "properties/schedule/plan.h"

namespace kvcheck {

namespace op_step {

std::string arguments(const Call& call) {
  std::string out;
  for (const ChunkSpec& chunk : call.chunks) {
    if (!out.empty()) out += " ";
    out += "s" + std::to_string(chunk.sequence) + ":" + std::to_string(chunk.length);
  }
  return out;
}

// What is wrong with chunk i of the step, "" when nothing.
std::string chunk_problem(const ScheduleModel& model, const Call& call, size_t i) {
  const Scenario& scenario = model.scenario;
  const ChunkSpec& chunk = call.chunks[i];
  const int s = chunk.sequence;
  const std::string feeds = "step feeds sequence " + std::to_string(s);
  if (!model.exists(s)) {
    return feeds + ", which does not exist (there are " + std::to_string(model.sequences.size()) +
           ")";
  }
  const SequenceModel& seq = model.at(s);
  if (!seq.running()) return feeds + " which is not running";
  for (size_t j = 0; j < i; ++j) {
    if (call.chunks[j].sequence == s) return feeds + " twice";
  }
  if (chunk.length < 1) return feeds + " a chunk of length " + std::to_string(chunk.length);
  const int end = seq.fed + chunk.length;
  const size_t stream = scenario.sequences[size_t(s)].size();
  if (end > static_cast<int>(stream)) {
    return feeds + " tokens " + std::to_string(seq.fed) + ".." + std::to_string(end - 1) +
           " but it has only " + std::to_string(stream);
  }
  if (seq.held() + chunk.length > scenario.capacity) {
    return feeds + " up to position " + std::to_string(seq.held() + chunk.length - 1) +
           ", past the capacity of " + std::to_string(scenario.capacity);
  }
  const int last = seq.next_position() + chunk.length - 1;
  if (last >= scenario.config.max_pos) {
    return feeds + " up to position " + std::to_string(last) + ", past max_pos " +
           std::to_string(scenario.config.max_pos);
  }
  return {};
}

std::string precondition(const ScheduleModel& model, const Call& call) {
  if (call.chunks.empty()) return "step feeds no sequence";
  for (size_t i = 0; i < call.chunks.size(); ++i) {
    if (std::string problem = chunk_problem(model, call, i); !problem.empty()) return problem;
  }
  return {};
}

void apply(ScheduleModel& model, const Call& call) {
  for (const ChunkSpec& chunk : call.chunks) {
    SequenceModel& seq = model.at(chunk.sequence);
    const int next = seq.next_position();
    seq.fed += chunk.length;
    seq.draft = chunk.length;
    for (int i = 0; i < chunk.length; ++i) seq.cells.push_back(next + i);
  }
}

std::string needs(const EngineTraits& traits, const Scenario&, const Call& call) {
  if (call.chunks.size() > 1 && !traits.operations.multi_sequence_step) {
    return "several sequences in one step";
  }
  int tokens = 0;
  for (const ChunkSpec& c : call.chunks) tokens += c.length;
  if (tokens > traits.limits.max_step_tokens) {
    return "steps of " + std::to_string(tokens) + " tokens (at most " +
           std::to_string(traits.limits.max_step_tokens) + ")";
  }
  return {};
}

// Each chunk's tokens join its sequence's content, chunks and history; a
// shifted sequence gets a segment of its own for every chunk.
void plan(PlanBuilder& builder, const Call& call, int call_index) {
  SchedulePlan& plan = builder.plan;
  for (const ChunkSpec& chunk : call.chunks) {
    const size_t s = size_t(chunk.sequence);
    plan.chunks[s].push_back(chunk.length);
    plan.content_chunks[s].push_back(chunk.length);
    if (plan.shifted[s]) builder.open_history(s, call_index);
    const int next = next_position(plan.cells[s]);
    for (int i = 0; i < chunk.length; ++i) {
      const int k = plan.fed[s] + i;
      const int32_t token = builder.scenario.sequences[s][size_t(k)];
      const int feed = builder.feeds(s);
      plan.segments[s].back().fed.push_back(
          {k, plan.shifted[s] ? feed : int(plan.content[s].size())});
      plan.content[s].push_back(token);
      plan.content_stream[s].push_back(k);
      plan.cells[s].push_back(next + i);
      plan.history[s].push_back(oracle::Event::feed(token));
    }
    if (plan.shifted[s]) plan.segments[s].back().history = plan.history[s];
    plan.fed[s] += chunk.length;
    plan.call_of_position[s].resize(size_t(plan.fed[s]), call_index);
    plan.max_content = std::max(plan.max_content, int(plan.content[s].size()));
    if (call.chunks.size() > 1) plan.shared_step[s] = true;
  }
}

void run(CallTarget& target, const Call& call, int call_index) {
  target.feed(call, call_index);
}

// Its chunks add to their sequences' lengths.
bool normalize(Call& call, ContentLengths& lengths) {
  for (const ChunkSpec& chunk : call.chunks) {
    if (lengths.valid(chunk.sequence)) lengths.held[size_t(chunk.sequence)] += chunk.length;
  }
  return true;
}

}  // namespace op_step

extern const Operation kStepOperation{.kind = Call::Kind::kStep,
                                      .keyword = "step",
                                      .arguments = op_step::arguments,
                                      .precondition = op_step::precondition,
                                      .apply = op_step::apply,
                                      .plan = op_step::plan,
                                      .run = op_step::run,
                                      .needs = op_step::needs,
                                      .normalize = op_step::normalize};

}  // namespace kvcheck

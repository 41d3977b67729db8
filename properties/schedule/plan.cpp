// plan_schedule: one loop over the calls, each changing the plan as its
// operation says (operation.h, `plan`); the segment rules they share.
#include "properties/schedule/plan.h"

#include <algorithm>

#include "properties/schedule/operation.h"

namespace kvcheck {

PlanBuilder::PlanBuilder(const Scenario& s)
    : scenario(s), running(s.sequences.size(), false), saved(s.sequences.size()) {
  const size_t n = s.sequences.size();
  plan.fed.assign(n, 0);
  plan.chunks.assign(n, {});
  plan.call_of_position.assign(n, {});
  plan.start_call.assign(n, -1);
  plan.end_call.assign(n, -1);
  plan.shared_step.assign(n, false);
  plan.plain.assign(n, true);
  plan.forked_from.assign(n, -1);
  plan.forked.assign(n, false);
  plan.truncated.assign(n, false);
  plan.shifted.assign(n, false);
  plan.history.assign(n, {});
  plan.cells.assign(n, {});
  plan.segments.assign(n, {});
  plan.content.assign(n, {});
  plan.content_stream.assign(n, {});
  plan.content_chunks.assign(n, {});
}

void PlanBuilder::open(size_t s, int call) {
  plan.segments[s].push_back({call, {}, {}, {}});
}

void PlanBuilder::open_history(size_t s, int call) {
  plan.segments[s].push_back({call, plan.content[s], {}, plan.history[s]});
}

void PlanBuilder::reopen(size_t s, int call) {
  if (plan.shifted[s]) {
    open_history(s, call);
  } else {
    open(s, call);
  }
}

void PlanBuilder::close(size_t s) {
  if (!plan.segments[s].empty()) plan.segments[s].back().tokens = plan.content[s];
}

void PlanBuilder::mark_shifted(size_t s) {
  plan.plain[s] = false;
  plan.shifted[s] = true;
  close(s);
}

int PlanBuilder::feeds(size_t s) const {
  const std::vector<oracle::Event>& history = plan.history[s];
  return int(std::count_if(history.begin(), history.end(), [](const oracle::Event& e) {
    return e.kind == oracle::Event::Kind::kFeed;
  }));
}

SchedulePlan PlanBuilder::finish() {
  for (size_t s = 0; s < running.size(); ++s) {
    if (running[s]) close(s);
  }
  return std::move(plan);
}

SchedulePlan plan_schedule(const Scenario& scenario) {
  PlanBuilder builder(scenario);
  for (size_t c = 0; c < scenario.calls.size(); ++c) {
    const Call& call = scenario.calls[c];
    operation(call.kind).plan(builder, call, static_cast<int>(c));
  }
  return builder.finish();
}

int SchedulePlan::segment_at(int sequence, int call) const {
  const std::vector<Segment>& list = segments[size_t(sequence)];
  int found = -1;
  for (size_t i = 0; i < list.size() && list[i].begin_call <= call; ++i) found = int(i);
  return found;
}

}  // namespace kvcheck

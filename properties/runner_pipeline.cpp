// ScenarioRunner's side of the one seam for transports (Engine::pipeline,
// engine/pipeline.h): which steps go out without waiting, when the runner
// must read them back, and how a refusal among them is judged. Apart from
// runner.cpp so that the runner itself reads as "execute each call; on a
// refusal, compare states".
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "model/status.h"
#include "properties/runner.h"

namespace kvcheck {

bool ScenarioRunner::posts(const Call& call) const {
  return pipeline_ != nullptr && call.kind == Call::Kind::kStep && (defer_ || may_run_dry_);
}

bool ScenarioRunner::waits_for_posted(const Call& call) const {
  // A start, finish or reset must be accepted whether a step before it was
  // refused or not (the refusal changed nothing), so it goes out unread.
  const Call::Kind k = call.kind;
  return may_run_dry_ && !posted_.empty() && k != Call::Kind::kStep && k != Call::Kind::kStart &&
         k != Call::Kind::kFinish && k != Call::Kind::kReset;
}

void ScenarioRunner::collect_posted(RunResult& result) {
  for (const PostedStep& step : posted_) {
    // A step after the failure or the refusal: its logits are not read, and
    // the engine is not asked for them (a child that died answers nothing).
    if (result.refused || (result.engine_failed && step.call > result.failed_call)) break;
    if (!collect(step, result)) break;
  }
  posted_.clear();
}

bool ScenarioRunner::collect(const PostedStep& step, RunResult& result) {
  std::optional<StepStates> states;  // set once the step's own reply is read
  try {
    pipeline_->collect_step(step_logits_, states);
    file_step(scenario_.calls[size_t(step.call)], step.fed_at);
    return true;
  } catch (const EngineError& e) {
    if (states && !step.watched.empty() && e.kind() == EngineError::Kind::kCapacity) {
      const std::string after = states->after ? digest(*states->after, step.watched)
                                              : "(unreadable: " + states->unreadable + ")";
      // A later call failed after this refusal, which kvcheck had not seen
      // yet: the run ends here instead.
      if (result.engine_failed) clear_failure(result);
      settle_refusal(result, step.call, e, digest(states->before, step.watched), after);
    } else {
      record_failure(result, step.call, &e, e.what());
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    record_failure(result, step.call, nullptr, e.what());
  }
  return false;
}

void ScenarioRunner::run_meanwhile() {
  if (meanwhile_ == nullptr) return;
  // The engine computes the posted steps while the meanwhile work runs; a
  // failure to send is the child's, and collecting reports it at its step.
  if (!posted_.empty()) {
    try {
      pipeline_->send_posted();
    } catch (const std::exception&) {
    }
  }
  (*std::exchange(meanwhile_, nullptr))();
}

void ScenarioRunner::finish_run(RunResult& result) {
  // A run already failed or refused (a call that waited) needs no meanwhile
  // work: a refused one is checked again as the calls before the refusal.
  if (!result.engine_failed && !result.refused) run_meanwhile();
  collect_posted(result);
  meanwhile_ = nullptr;
  if (pipeline_ == nullptr || ended(result)) return;
  // A refusal of a call sent ahead that no later call raised: charged to
  // the last call, its message naming the request.
  const int last = static_cast<int>(scenario_.calls.size()) - 1;
  try {
    pipeline_->settle_sent();
  } catch (const EngineError& e) {
    record_failure(result, last, &e, e.what());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    record_failure(result, last, nullptr, e.what());
  }
}

}  // namespace kvcheck

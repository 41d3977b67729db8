#include "tools/case_history.h"

#include <utility>

#include "backends/exec/exec.h"

namespace kvcheck::cli {

CaseHistory::CaseHistory(EngineUnderTest subject)
    : subject_(std::move(subject)), generation_(exec_child_generation(subject_.factory)) {}

void CaseHistory::record(Property property, const Scenario& scenario, const Verdict& verdict) {
  if (!generation_) return;
  // Read after the check: the child that ran it (one started during the
  // check, when the last died, counts as the one that ran it).
  const std::optional<int> now = exec_child_generation(subject_.factory);
  if (now != generation_) recent_.clear(), generation_ = now;
  if (!verdict.passed)
    last_failure_ = Failure{{property, scenario}, {recent_.begin(), recent_.end()}};
  recent_.push_back({property, scenario});
  if (recent_.size() > kMaxCases) recent_.pop_front();
}

std::vector<PreludeCase> CaseHistory::before_failure(Property property,
                                                     const Scenario& scenario) const {
  if (!last_failure_ || last_failure_->failed != PreludeCase{property, scenario}) return {};
  return last_failure_->before;
}

}  // namespace kvcheck::cli

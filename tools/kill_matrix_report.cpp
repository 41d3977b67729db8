#include "tools/kill_matrix_report.h"

#include <chrono>
#include <cstdio>

#include "model/rng.h"
#include "properties/rc/hunt.h"

namespace kvcheck::cli {

KillMatrix run_kill_matrix(const Backend& backend, uint64_t seed, int cases_per_fault,
                           double seconds, const std::function<void(const std::string&)>& progress) {
  KillMatrix m;
  const auto start = std::chrono::steady_clock::now();
  char line[256];
  std::snprintf(line, sizeof(line), "kill matrix on %s (every applicable property per case, up to %d cases per fault)\n%-26s %7s %-16s %6s\n",
                backend.name.c_str(), cases_per_fault, "fault", "cases", "killed by", "size");
  m.text = line;
  SplitMix64 seeds(seed ^ 0x6b696c6c6d617472ull);
  for (int i = 0; i < kFaultCount; ++i) {
    const Fault fault = static_cast<Fault>(i);
    const EngineFactory factory = backend.make_factory(FaultSet(fault));
    rcgen::HuntOptions h;
    h.seed = seeds.next();
    h.max_cases = cases_per_fault;
    int cases = 0;
    const auto check = [&](const Scenario& s) {
      ++cases;
      progress("kill matrix: " + std::string(fault_name(fault)) + ", case " + std::to_string(cases));
      return rcgen::check_any(s, factory);
    };
    const double left = seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rcgen::HuntResult r;
    if (left > 0) r = rcgen::hunt(check, rcgen::Emphasis::kAny, h);
    const std::string killer =
        r.failed ? std::string(property_label(r.verdict.property)) + " " +
                       std::string(property_name(r.verdict.property))
                 : (left > 0 ? "SURVIVED" : "NOT RUN (time)");
    const int size = r.counterexample ? r.counterexample->size() : 0;
    std::snprintf(line, sizeof(line), "%-26s %7d %-16s %6s\n", std::string(fault_name(fault)).c_str(),
                  r.cases_run, killer.c_str(), r.failed ? std::to_string(size).c_str() : "-");
    m.text += line;
    m.all_killed = m.all_killed && r.failed;
    m.json.push_back({{"fault", fault_name(fault)},
                      {"killed", r.failed},
                      {"cases_to_kill", r.cases_run},
                      {"killed_by", r.failed ? std::string(property_name(r.verdict.property)) : ""},
                      {"shrunk_size", size},
                      {"shrunk_scenario", r.counterexample ? r.counterexample->to_text() : ""}});
  }
  return m;
}

}  // namespace kvcheck::cli

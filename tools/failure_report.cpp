#include "tools/failure_report.h"

#include <cstdio>

namespace kvcheck::cli {

void report_failure(const rcgen::HuntResult& result, Property property, const std::string& backend,
                    FaultSet faults, uint64_t seed, const std::string& failures_dir) {
  (void)failures_dir;  // case files are written once the case format exists
  std::printf("\nFAILED %s %s on %s (faults: %s) after %d cases, hunt seed %llu\n",
              std::string(property_label(property)).c_str(),
              std::string(property_name(property)).c_str(), backend.c_str(),
              faults.to_string().c_str(), result.cases_run, (unsigned long long)seed);
  if (result.counterexample) {
    std::printf("minimized scenario (size %d):\n%s\n", result.counterexample->size(),
                result.counterexample->to_text().c_str());
  }
  std::printf("%s\n%s\n", result.verdict.summary.c_str(), result.verdict.detail.c_str());
  std::fflush(stdout);
}

}  // namespace kvcheck::cli

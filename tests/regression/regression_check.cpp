// Replays regression case files the way the `regression` ctest label needs:
// each case's property must hold on the correct engine (both CPU kernel
// paths), and a case that records a fault must still fail with that fault on,
// so a regression can never decay into a test that cannot fail.
//   regression_check FILE...
// Exit 0 when every file behaves, 1 when one does not, 2 on a bad file.
#include <cstdio>
#include <string>

#include "backends/in_tree.h"
#include "properties/property.h"
#include "properties/repro/case_file.h"
#include "properties/runner.h"

namespace {

using kvcheck::CaseFile;
using kvcheck::Verdict;

// 0 good, 1 misbehaves.
int check_case(const std::string& path, const CaseFile& c) {
  int status = 0;
  const std::string property = std::string(kvcheck::property_label(c.property)) + " " +
                               std::string(kvcheck::property_name(c.property));
  for (const kvcheck::KernelPath kernels :
       {kvcheck::KernelPath::kOptimized, kvcheck::KernelPath::kReference}) {
    const char* path_name = kernels == kvcheck::KernelPath::kOptimized ? "cpu" : "cpu-reference";
    const Verdict v = kvcheck::check_property(
        c.property, c.scenario,
        kvcheck::EngineUnderTest(kvcheck::cpu_engine_factory({}, kernels),
                                 kvcheck::cpu_engine_traits_with_operations(kernels)));
    if (!v.passed) {
      std::printf("FAIL %s: %s fails on the correct engine (%s):\n%s\n%s\n", path.c_str(),
                  property.c_str(), path_name, v.summary.c_str(), v.detail.c_str());
      status = 1;
    } else {
      std::printf("ok   %s: %s holds on the correct engine (%s): %s\n", path.c_str(),
                  property.c_str(), path_name, v.summary.c_str());
    }
    if (!v.applicable) {
      std::printf("FAIL %s: %s is not applicable to the case, so it checks nothing\n", path.c_str(),
                  property.c_str());
      status = 1;
    }
  }
  if (c.faults.any()) {
    const Verdict v = kvcheck::check_property(
        c.property, c.scenario,
        kvcheck::EngineUnderTest(kvcheck::cpu_engine_factory(c.faults),
                                 kvcheck::cpu_engine_traits_with_operations()));
    if (v.passed) {
      std::printf(
          "FAIL %s: %s no longer fails with %s on: the case cannot catch that fault any "
          "more\n%s\n",
          path.c_str(), property.c_str(), c.faults.to_string().c_str(), v.summary.c_str());
      status = 1;
    } else {
      std::printf("ok   %s: fails with %s on, as recorded: %s\n", path.c_str(),
                  c.faults.to_string().c_str(), v.summary.c_str());
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: regression_check FILE...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    const kvcheck::Result<CaseFile> c = kvcheck::read_case_file(argv[i]);
    if (!c) {
      std::printf("BAD  %s\n", c.error().c_str());
      return 2;
    }
    status |= check_case(argv[i], c.value());
  }
  return status;
}

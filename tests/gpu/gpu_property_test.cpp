// The conformance suite on the CUDA engine (label gpu): P1..P10, P10 against
// the in-tree CPU engine. Every test skips without a CUDA device.
// KVCHECK_GPU_CASES sets the cases per property (default 100) to fit the
// device script's budget.
#include <cstdlib>
#include <string>

#include "backends/in_tree.h"
#include "conformance/suite.h"

int main(int argc, char** argv) {
  const char* cases = std::getenv("KVCHECK_GPU_CASES");
  std::string skip = "no CUDA device";
  for (const std::string& name : kvcheck::default_backend_names()) {
    if (name == "cuda") skip.clear();
  }
  return kvcheck::conformance::run(argc, argv,
                                   {{"cuda", cases ? std::atoi(cases) : 100, "cpu", skip}});
}

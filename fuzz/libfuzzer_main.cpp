// libFuzzer's entry points for any target that implements fuzz_target.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  kvcheck::fuzz::initialize();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvcheck::fuzz::kTarget;
  using kvcheck::fuzz::Outcome;
  const Outcome outcome = kvcheck::fuzz::run_one({data, size});
  return outcome == Outcome::kRejected && !kTarget.keep_rejected_in_corpus ? -1 : 0;
}

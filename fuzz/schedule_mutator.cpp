// schedule_fuzz's custom mutator (libFuzzer builds only): half of the
// mutations edit the decoded schedule (insert or remove a call, split or
// merge a chunk, move a reset or a finish, change a batch, redraw a header
// field), the other half are libFuzzer's own byte mutations. Either way the
// result is re-encoded canonically, so every input libFuzzer keeps is one the
// target accepts and a byte-level edit is never wasted on framing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/schedule_program.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  using namespace kvcheck::fuzz;
  if (seed % 2 == 0) {
    size = LLVMFuzzerMutate(data, size, max_size);
  }
  ScheduleProgram program = decode({data, size});
  if (seed % 2 == 1) {
    // Several edits now and then, so that a mutation can cross a valley no
    // single edit crosses (a split whose two halves must also move apart).
    const int edits = 1 + int((seed >> 1) % 4 == 0) * int((seed >> 3) % 3 + 1);
    for (int i = 0; i < edits; ++i) {
      mutate_program(program, (uint64_t(seed) << 8) + uint64_t(i));
    }
  }
  std::vector<uint8_t> bytes = encode(program);
  // Drop trailing calls until the input fits.
  while (bytes.size() > max_size && !program.calls.empty()) {
    program.calls.pop_back();
    bytes = encode(program);
  }
  if (bytes.size() > max_size) return size;
  std::memcpy(data, bytes.data(), bytes.size());
  return bytes.size();
}

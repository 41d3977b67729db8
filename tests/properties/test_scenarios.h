// Hand-made scenarios for the property unit tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv_dtype.h"
#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck::test {

// One layer of notation: S(i) start, P({{s, n}, ...}) step, F(i) finish, R() reset.
// (Fk and T below: the operations.)
inline Call S(int s) {
  return Call::start(s);
}
inline Call P(std::vector<ChunkSpec> chunks) {
  return Call::step(std::move(chunks));
}
inline Call F(int s) {
  return Call::finish(s);
}
inline Call R() {
  return Call::reset();
}
// Fk(child, parent, n) fork, T(s, n) truncate (docs/OPERATIONS.md).
inline Call Fk(int child, int parent, int n) {
  return Call::fork(child, parent, n);
}
inline Call T(int s, int n) {
  return Call::truncate(s, n);
}
// Fl() flushes the prefix cache.
inline Call Fl() {
  return Call::flush();
}

// A small model of the family; heads over kv_heads, head_dim 8.
Config small_config(Family family, int n_layers, int n_heads, int n_kv_heads);

// `lengths[i]` tokens for sequence i, drawn from a SplitMix64 seeded by `seed`.
std::vector<std::vector<int32_t>> token_table(uint64_t seed, const std::vector<int>& lengths,
                                              int vocab);

// Every kind of call: batched prefill, decodes, a finish under a running
// sequence (compaction), a row reuse, a reset and a fresh start after it,
// chunk ends at capacity.
Scenario rich_scenario(Family family, int n_heads, int n_kv_heads, KvDtype dtype);

// Forks mid-block and at the end, truncations across blocks and to 0,
// refeeds, a finish of a parent under its fork and a reset (MHA, 2 layers).
Scenario operations_scenario(Family family, int block_size, KvDtype dtype);

// A prefix cache (docs/OPERATIONS.md): s1 starts with s0's first 5 tokens
// after s0 was fed and finished (a hit on cached blocks), s2 with s1's first
// 4 while s1 runs (a hit on used blocks), a flush, and s3 after it (no hit).
// pool_blocks 0 keeps the default pool.
Scenario prefix_scenario(Family family, int block_size, int pool_blocks);

// rich_scenario with a sliding window of W on every layer (pattern 0) or
// on alternate ones (pattern 2, layer 0 windowed): its sequences run past
// W, so the windowed layers' rings wrap and their snapshots list positions.
Scenario window_scenario(Family family, int window, int pattern, KvDtype dtype);

// Context shifts (docs/OPERATIONS.md, "Erase and shift"; llama): s0 is fed
// 5, loses positions 1..2 and its later cells move down by 2, then decodes;
// s1 is fed 3, its last position is erased and a token refed there, and
// its cells are shifted up by 4 before one more decode.
Scenario context_shift_scenario();

// Div (docs/OPERATIONS.md, "Div"; llama): s0's 6 cells divided by 2 (0 0 1
// 1 2 2), then fed 2; s1 fed 4, erased at 1, fed 1, divided by 3 (0 0 1 1,
// slots no longer in feed order), all shifted by 2 together, fed 1.
Scenario div_scenario();

// Save and restore (docs/OPERATIONS.md, "Save and restore"; llama): s0 is
// saved at 4 tokens, fed, truncated and fed again, restored and decoded;
// s1 is saved empty, then again after a context shift, fed and restored;
// s2 forks s0 and is fed while s0 is restored under it.
Scenario save_restore_scenario();

// The smallest scenario of docs/FAULTS.md for a fault.
Scenario minimal_fault_scenario(Fault fault);

// gtest-friendly text of a verdict.
std::string describe(const Verdict& verdict);

}  // namespace kvcheck::test

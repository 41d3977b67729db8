// The byte framing of schedule_fuzz: how raw fuzzer bytes become a bounded,
// valid Scenario, and back.
//
// Bytes are read with FuzzedDataProvider, only through ConsumeIntegralInRange,
// so every value comes from the end of the input and an exhausted input reads
// as the smallest value. The input is a fixed header (the model and the
// scenario's knobs) followed by operations, one per call: step, start, finish,
// reset, fork, truncate (docs/OPERATIONS.md). Each operation is interpreted against the schedule's
// state so that any bytes decode to a Scenario that validates: a step picks among the running
// sequences that still have room, a finish among the running ones, and an operation that cannot
// apply decodes to nothing.
//
// A ScheduleProgram is that decoded form: a Scenario without its token values
// (they come from a seed). encode() is the inverse of decode() on what decode
// returns, and maps any edited program onto a valid one (clamping lengths,
// dropping calls that cannot apply), so the custom mutator edits programs and
// writes canonical bytes. An input is canonical when encode(decode(bytes)) ==
// bytes; every program has exactly one canonical input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "properties/scenario.h"

namespace kvcheck::fuzz {

// Default bounds: small enough that one input runs all nine properties in
// under a millisecond (docs/FUZZING.md, "Measured"), large enough for
// every cache shape the fault catalogue needs (GQA with 4 heads over 2, three
// layers, ragged batches of 3, a row reused after a finish, resets and
// finishes between steps, chunks that end at capacity). Kernel-level
// reductions over wide vectors are the kernel tests' job, not this target's.
inline constexpr int kMaxLayers = 3;
inline constexpr int kMaxKvHeads = 4;
inline constexpr int kMaxGroup = 4;  // query heads per KV head
inline constexpr int kMaxHeads = 8;  // the group is clamped so that heads stay within this
inline constexpr int kMaxHalfHeadDim = 4;
inline constexpr int kMinWidth = 4, kMaxDModel = 16, kMaxDff = 16;
inline constexpr int kMinVocab = 8, kMaxVocab = 16;
inline constexpr int kMaxSlack = 3;      // capacity and max_pos beyond what the schedule needs
inline constexpr int kMaxSpareRows = 2;  // rows beyond the most sequences running at once
inline constexpr int kMaxSequences = 3;
inline constexpr int kMaxRunning = 3;
inline constexpr int kMaxTokens = 12;  // fed to one sequence
inline constexpr int kMaxChunk = 6;
inline constexpr int kMaxCalls = 12;       // steps, starts, finishes, resets, forks, truncations
inline constexpr int kMaxBlockSize = 8;    // 0: contiguous storage
inline constexpr int kMaxPoolBlocks = 12;  // paged: 0 the engine's default pool

// The header: every knob of the model and the scenario that is not a call.
// Values are stored as read, before clamping, so that they encode back to the
// same bytes; to_scenario() applies the bounds. All are ints so that one
// table of (field, range) serves decoding, encoding and mutation.
struct ProgramHeader {
  int family = 0;  // 0 gpt2, 1 llama
  int n_layers = 1;
  int n_kv_heads = 1;
  int group = 1;
  int half_head_dim = 1;
  int d_model = kMinWidth;
  int d_ff = kMinWidth;
  int vocab = kMinVocab;
  int qkv_bias = 0;     // 0 or 1; gpt2 only
  int weight_seed = 0;  // 16 bits
  int token_seed = 0;   // 16 bits
  int capacity_slack = 0;
  int max_pos_slack = 0;
  int spare_rows = 0;
  int kv_dtype = 0;       // F32, BF16, F16, Q8_0
  int block_size = 0;     // 0 contiguous, else paged blocks of this many slots
  int prefix_cache = 0;   // 1: a prefix cache (paged only); flush calls apply only then
  int pool_blocks = 0;    // paged: blocks in the pool, small enough to run dry; 0 the default
  int shared_prefix = 0;  // every sequence's first tokens are sequence 0's (prefix-cache hits)
  // Config::sliding_window W (docs/OPERATIONS.md, "Sliding windows"); 0 none.
  // Applied only to programs without paged storage, fork, truncate or flush,
  // which no engine combines with a window (the scenario would not apply).
  int sliding_window = 0;
  // Config::sliding_window_pattern N (0 or 1: every layer windowed; N >= 2:
  // layer l global when (l + 1) % N == 0), with the window only.
  int window_pattern = 0;

  bool operator==(const ProgramHeader&) const = default;
};

// Calls use Scenario's Call; sequence i is the one started by the i-th start
// (so a start's own `sequence` field is ignored by encode()).
struct ScheduleProgram {
  ProgramHeader header;
  std::vector<Call> calls;

  bool operator==(const ScheduleProgram&) const = default;
};

ScheduleProgram decode(std::span<const uint8_t> bytes);

// Canonical bytes of the program after making it valid: chunk lengths are
// clamped to what the sequence has left, and calls that cannot apply (a step
// of a sequence that is not running, a start beyond the bounds, a finish of
// nothing) are dropped, as are calls past kMaxCalls.
std::vector<uint8_t> encode(const ScheduleProgram& program);

// The Scenario the program describes; it always validates. Token t of
// sequence s is drawn from (token_seed, s, t) by splitmix64, so the same
// program always gives the same tokens.
Scenario to_scenario(const ScheduleProgram& program);

// Edits the program at the level of the schedule: inserts or removes a call,
// splits or merges a chunk, moves a reset or a finish, adds a sequence to a
// step (ragged batch), or redraws one header field. `random` is any 64-bit
// state; the edit is a pure function of it. The result may be invalid;
// encode() makes it valid.
void mutate_program(ScheduleProgram& program, uint64_t random);

}  // namespace kvcheck::fuzz

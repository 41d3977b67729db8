// A campaign spread over many machines (docs/DISTRIBUTED.md): which shard of
// the campaign this process is, from its flags or from the variables the
// schedulers people already run set (GoogleTest, a Kubernetes Indexed Job,
// a Slurm array), which turns of the one campaign seed's stream a shard
// runs, and the digest whose shard sums add up to the unsharded run's.
//
// Shard i of N runs turns i, i + N, i + 2N, ... of every (property, backend)
// pair. A turn's cases depend only on the campaign seed, the pair and the
// turn's number, so the union of the shards is the unsharded run, case for
// case.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "properties/property.h"

namespace kvcheck::cli {

// --shard-index and --shard-count as given (absent: from the environment).
struct ShardOptions {
  std::optional<int> index, count;
};

struct Shard {
  int index = 0, count = 1;
  // Where index and count came from, for the console and the report:
  // "--shard-index and --shard-count", "GTEST_SHARD_INDEX and
  // GTEST_TOTAL_SHARDS", ...; empty: not sharded (no flag, no variable).
  std::string source;
};

// getenv, or a stand-in for tests: the value of a variable, or null.
using Environment = std::function<const char*(const char* name)>;
const char* process_environment(const char* name);

// The flags win; without them the first convention whose index variable is
// set decides: GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS, JOB_COMPLETION_INDEX
// with --shard-count or KVCHECK_SHARD_COUNT, SLURM_ARRAY_TASK_ID minus
// SLURM_ARRAY_TASK_MIN / SLURM_ARRAY_TASK_COUNT. Throws InputError naming
// the flag or variable and its value: a count without an index, an index
// past the count, a Slurm array that is not one contiguous range.
Shard resolve_shard(const ShardOptions& flags, const Environment& environment);

// "shard 2 of 4 (from JOB_COMPLETION_INDEX and --shard-count)".
std::string shard_text(const Shard& shard);

// The campaign-wide number of this shard's `done`-th turn of a pair.
inline int64_t shard_turn(const Shard& shard, int64_t done) {
  return shard.index + shard.count * done;
}
// The first case of turn `turn` in its pair's stream, and how many cases the
// turn holds: `turn_cases`, less at the end of a --cases budget (`cases`,
// 0: none), 0 past it.
inline int64_t turn_first_case(int64_t turn, int turn_cases) {
  return turn * turn_cases;
}
int turn_case_count(int64_t turn, int turn_cases, int cases);
// What this shard's turns of one pair hold under a --cases budget (0 without one).
int64_t shard_case_budget(const Shard& shard, int turn_cases, int cases);

// One case's share of a digest: a hash of its pair (the property and the
// backend's place among --backend), its number in the pair's stream and its
// own digest (scenario and verdict). Digests are sums of shares, so the
// shards' digests add up to the unsharded run's whatever order they ran in.
uint64_t case_digest_share(Property property, size_t backend_index, int64_t case_number,
                           uint64_t case_digest);
std::string digest_hex(uint64_t digest);  // 16 hex digits
std::optional<uint64_t> parse_digest_hex(const std::string& text);

}  // namespace kvcheck::cli

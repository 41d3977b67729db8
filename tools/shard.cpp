// Which shard a campaign is, and its turns and digest (tools/shard.h). The
// conventions are read as their schedulers define them: GoogleTest's pair
// of variables, a Kubernetes Indexed Job's JOB_COMPLETION_INDEX (the count is
// not in the pod's environment, so the user names it), and a Slurm job
// array's task id, counted from SLURM_ARRAY_TASK_MIN so that --array=1-8
// shards like --array=0-7.
#include "tools/shard.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "model/rng.h"
#include "model/status.h"

namespace kvcheck::cli {

namespace {

constexpr int64_t kMaxShards = 1000000;

// The variable's value as an integer; nullopt when unset. Throws InputError
// naming it when it is set to anything else.
std::optional<int64_t> integer_variable(const Environment& env, const char* name) {
  const char* text = env(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    throw InputError(std::string(name) + "=\"" + text + "\": expected an integer");
  }
  return value;
}

struct Convention {
  const char* index_variable;
  std::optional<int64_t> index, count;
  std::string count_source;  // where the count came from, "" when it is missing
};

// The Slurm array task's place in a contiguous array: id - min of count.
Convention slurm(const Environment& env) {
  Convention c{"SLURM_ARRAY_TASK_ID", integer_variable(env, "SLURM_ARRAY_TASK_ID"),
               integer_variable(env, "SLURM_ARRAY_TASK_COUNT"), "SLURM_ARRAY_TASK_COUNT"};
  if (!c.index) return c;
  const int64_t min = integer_variable(env, "SLURM_ARRAY_TASK_MIN").value_or(0);
  const std::optional<int64_t> max = integer_variable(env, "SLURM_ARRAY_TASK_MAX");
  const std::optional<int64_t> step = integer_variable(env, "SLURM_ARRAY_TASK_STEP");
  if ((step && *step != 1) || (max && c.count && *max - min + 1 != *c.count)) {
    throw InputError(
        "SLURM_ARRAY_TASK_MIN..MAX is " + std::to_string(min) + ".." +
        (max ? std::to_string(*max) : "?") + " with step " + std::to_string(step.value_or(1)) +
        " and SLURM_ARRAY_TASK_COUNT " + (c.count ? std::to_string(*c.count) : "unset") +
        ": a campaign's shards need one contiguous array, one task a shard (--array=0-7 or "
        "--array=1-8)");
  }
  *c.index -= min;
  return c;
}

Convention environment_convention(const Environment& env) {
  Convention gtest{"GTEST_SHARD_INDEX", integer_variable(env, "GTEST_SHARD_INDEX"),
                   integer_variable(env, "GTEST_TOTAL_SHARDS"), "GTEST_TOTAL_SHARDS"};
  if (gtest.index) return gtest;
  Convention kubernetes{"JOB_COMPLETION_INDEX", integer_variable(env, "JOB_COMPLETION_INDEX"),
                        integer_variable(env, "KVCHECK_SHARD_COUNT"), "KVCHECK_SHARD_COUNT"};
  if (kubernetes.index) return kubernetes;
  return slurm(env);
}

void check_range(const Shard& s) {
  if (s.count < 1 || s.count > kMaxShards) {
    throw InputError("shard count " + std::to_string(s.count) + " (from " + s.source +
                     "): expected 1 to " + std::to_string(kMaxShards));
  }
  if (s.index < 0 || s.index >= s.count) {
    throw InputError("shard index " + std::to_string(s.index) + " (from " + s.source +
                     "): expected 0 to " + std::to_string(s.count - 1) + ", below the count " +
                     std::to_string(s.count));
  }
}

}  // namespace

const char* process_environment(const char* name) {
  return std::getenv(name);
}

Shard resolve_shard(const ShardOptions& flags, const Environment& env) {
  if (flags.index && !flags.count) {
    throw InputError("--shard-index " + std::to_string(*flags.index) +
                     ": needs --shard-count, the number of shards");
  }
  Shard s;
  if (flags.index) {
    s.index = *flags.index, s.count = *flags.count;
    s.source = "--shard-index and --shard-count";
    check_range(s);
    return s;
  }
  const Convention c = environment_convention(env);
  if (!c.index) {
    if (flags.count) {
      throw InputError("--shard-count " + std::to_string(*flags.count) +
                       ": no --shard-index, and none of GTEST_SHARD_INDEX, "
                       "JOB_COMPLETION_INDEX, SLURM_ARRAY_TASK_ID is set");
    }
    return s;  // not sharded
  }
  if (!flags.count && !c.count) {
    throw InputError(std::string(c.index_variable) + " is set, but not the number of shards: " +
                     "pass --shard-count N or set " + c.count_source);
  }
  s.index = int(std::clamp<int64_t>(*c.index, -1, kMaxShards));
  s.count = flags.count ? *flags.count : int(std::clamp<int64_t>(*c.count, 0, kMaxShards + 1));
  s.source = std::string(c.index_variable) + " and " +
             (flags.count ? std::string("--shard-count") : c.count_source);
  check_range(s);
  return s;
}

std::string shard_text(const Shard& shard) {
  if (shard.source.empty()) return "not sharded";
  return "shard " + std::to_string(shard.index) + " of " + std::to_string(shard.count) + " (from " +
         shard.source + ")";
}

int turn_case_count(int64_t turn, int turn_cases, int cases) {
  if (cases == 0) return turn_cases;
  const int64_t left = int64_t(cases) - turn_first_case(turn, turn_cases);
  return int(std::clamp<int64_t>(left, 0, turn_cases));
}

int64_t shard_case_budget(const Shard& shard, int turn_cases, int cases) {
  if (cases == 0) return 0;  // no budget: the time decides
  int64_t total = 0;
  for (int64_t done = 0;; ++done) {
    const int n = turn_case_count(shard_turn(shard, done), turn_cases, cases);
    if (n == 0) return total;
    total += n;
  }
}

uint64_t case_digest_share(Property property, size_t backend_index, int64_t case_number,
                           uint64_t case_digest) {
  const std::string pair =
      std::string(property_name(property)) + "|" + std::to_string(backend_index);
  SplitMix64 mix(fnv1a64(pair) ^ (uint64_t(case_number) * 0x9e3779b97f4a7c15ull));
  SplitMix64 share(mix.next() ^ case_digest);
  return share.next();
}

std::string digest_hex(uint64_t digest) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)digest);
  return text;
}

std::optional<uint64_t> parse_digest_hex(const std::string& text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (text.size() != 16 || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

}  // namespace kvcheck::cli

// Which shard a campaign is (tools/shard.h): the flags, then GoogleTest's,
// Kubernetes' and Slurm's variables, and every refusal naming its variable;
// and the turns: the shards of a --cases budget hold each turn once, so
// their union is the unsharded run. The environment is a stand-in map, so
// whatever shards this test's own run cannot change what it sees.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "model/status.h"
#include "tools/shard.h"

namespace kvcheck::cli {
namespace {

struct FakeEnvironment {
  std::map<std::string, std::string> values;
  Environment get() const {
    return [this](const char* name) -> const char* {
      const auto it = values.find(name);
      return it == values.end() ? nullptr : it->second.c_str();
    };
  }
};

Shard resolve(const FakeEnvironment& env, std::optional<int> index = {},
              std::optional<int> count = {}) {
  return resolve_shard(ShardOptions{index, count}, env.get());
}

std::string refusal(const FakeEnvironment& env, std::optional<int> index = {},
                    std::optional<int> count = {}) {
  try {
    resolve(env, index, count);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Shard, NoFlagNoVariableIsNotSharded) {
  const Shard s = resolve({});
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.source, "");
  EXPECT_EQ(shard_text(s), "not sharded");
}

TEST(Shard, FlagsWinOverEveryVariable) {
  const FakeEnvironment env{{{"GTEST_SHARD_INDEX", "1"},
                             {"GTEST_TOTAL_SHARDS", "3"},
                             {"SLURM_ARRAY_TASK_ID", "0"},
                             {"SLURM_ARRAY_TASK_COUNT", "2"}}};
  const Shard s = resolve(env, 2, 4);
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(shard_text(s), "shard 2 of 4 (from --shard-index and --shard-count)");
  EXPECT_NE(refusal({}, 2).find("--shard-index 2: needs --shard-count"), std::string::npos);
  EXPECT_NE(refusal({}, 4, 4).find("shard index 4"), std::string::npos);
  EXPECT_NE(refusal({}, {}, 4).find("--shard-count 4: no --shard-index"), std::string::npos);
}

TEST(Shard, GoogleTestVariables) {
  const Shard s = resolve({{{"GTEST_SHARD_INDEX", "0"}, {"GTEST_TOTAL_SHARDS", "2"}}});
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.source, "GTEST_SHARD_INDEX and GTEST_TOTAL_SHARDS");
  // GoogleTest's variables come before a Slurm array's.
  const Shard both = resolve({{{"GTEST_SHARD_INDEX", "1"},
                               {"GTEST_TOTAL_SHARDS", "2"},
                               {"SLURM_ARRAY_TASK_ID", "3"},
                               {"SLURM_ARRAY_TASK_COUNT", "4"}}});
  EXPECT_EQ(both.index, 1);
  EXPECT_NE(refusal({{{"GTEST_SHARD_INDEX", "1"}}})
                .find("pass --shard-count N or set "
                      "GTEST_TOTAL_SHARDS"),
            std::string::npos);
  EXPECT_NE(refusal({{{"GTEST_SHARD_INDEX", "x1"}, {"GTEST_TOTAL_SHARDS", "2"}}})
                .find("GTEST_SHARD_INDEX=\"x1\": expected an integer"),
            std::string::npos);
  EXPECT_NE(refusal({{{"GTEST_SHARD_INDEX", "2"}, {"GTEST_TOTAL_SHARDS", "2"}}})
                .find("shard index 2 (from GTEST_SHARD_INDEX and GTEST_TOTAL_SHARDS)"),
            std::string::npos);
}

TEST(Shard, KubernetesIndexWithTheCountTheUserNames) {
  const FakeEnvironment index{{{"JOB_COMPLETION_INDEX", "3"}}};
  EXPECT_NE(refusal(index).find("JOB_COMPLETION_INDEX is set, but not the number of shards: "
                                "pass --shard-count N or set KVCHECK_SHARD_COUNT"),
            std::string::npos);
  const Shard flag = resolve(index, {}, 8);
  EXPECT_EQ(flag.index, 3);
  EXPECT_EQ(flag.count, 8);
  EXPECT_EQ(flag.source, "JOB_COMPLETION_INDEX and --shard-count");
  const Shard variable = resolve({{{"JOB_COMPLETION_INDEX", "3"}, {"KVCHECK_SHARD_COUNT", "4"}}});
  EXPECT_EQ(variable.count, 4);
  EXPECT_EQ(variable.source, "JOB_COMPLETION_INDEX and KVCHECK_SHARD_COUNT");
}

TEST(Shard, SlurmArraysCountFromTheirFirstTask) {
  const Shard from_one = resolve({{{"SLURM_ARRAY_TASK_ID", "5"},
                                   {"SLURM_ARRAY_TASK_MIN", "1"},
                                   {"SLURM_ARRAY_TASK_MAX", "8"},
                                   {"SLURM_ARRAY_TASK_COUNT", "8"}}});
  EXPECT_EQ(from_one.index, 4);
  EXPECT_EQ(from_one.count, 8);
  EXPECT_EQ(from_one.source, "SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT");
  const Shard from_zero =
      resolve({{{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_COUNT", "2"}}});
  EXPECT_EQ(from_zero.index, 0);
  // --array=0-14:2 and --array=1,3,9 are not one shard a task.
  EXPECT_NE(refusal({{{"SLURM_ARRAY_TASK_ID", "2"},
                      {"SLURM_ARRAY_TASK_MIN", "0"},
                      {"SLURM_ARRAY_TASK_MAX", "14"},
                      {"SLURM_ARRAY_TASK_STEP", "2"},
                      {"SLURM_ARRAY_TASK_COUNT", "8"}}})
                .find("one contiguous array"),
            std::string::npos);
  EXPECT_NE(refusal({{{"SLURM_ARRAY_TASK_ID", "3"},
                      {"SLURM_ARRAY_TASK_MIN", "1"},
                      {"SLURM_ARRAY_TASK_MAX", "9"},
                      {"SLURM_ARRAY_TASK_COUNT", "3"}}})
                .find("SLURM_ARRAY_TASK_MIN..MAX is 1..9"),
            std::string::npos);
}

// Every turn of a --cases budget belongs to exactly one shard, and the
// shards' cases add up to the budget: their union is the unsharded run.
TEST(Shard, ShardsHoldEveryTurnOnce) {
  constexpr int kTurnCases = 25;
  for (int cases : {1, 24, 25, 26, 100, 101, 1234}) {
    const int turns = (cases + kTurnCases - 1) / kTurnCases;
    for (int count : {1, 2, 3, 4, 7, 50}) {
      std::multiset<int64_t> seen;
      int64_t total = 0;
      for (int index = 0; index < count; ++index) {
        const Shard shard{index, count, "test"};
        for (int64_t done = 0;; ++done) {
          const int64_t turn = shard_turn(shard, done);
          const int n = turn_case_count(turn, kTurnCases, cases);
          if (n == 0) break;
          seen.insert(turn);
          total += n;
        }
        EXPECT_EQ(
            shard_case_budget(shard, kTurnCases, cases), total - [&] {
              int64_t before = 0;
              for (int i = 0; i < index; ++i) {
                before += shard_case_budget({i, count, "test"}, kTurnCases, cases);
              }
              return before;
            }());
      }
      ASSERT_EQ(seen.size(), size_t(turns)) << cases << " cases, " << count << " shards";
      for (int t = 0; t < turns; ++t) EXPECT_EQ(seen.count(t), 1u) << "turn " << t;
      EXPECT_EQ(total, cases);
    }
  }
  EXPECT_EQ(turn_case_count(7, kTurnCases, 0), kTurnCases);  // no budget: the time decides
}

TEST(Shard, DigestSharesDependOnTheCaseAndItsPlace) {
  const uint64_t a = case_digest_share(Property::kOracle, 0, 7, 42);
  EXPECT_EQ(a, case_digest_share(Property::kOracle, 0, 7, 42));
  EXPECT_NE(a, case_digest_share(Property::kOracle, 0, 8, 42));
  EXPECT_NE(a, case_digest_share(Property::kOracle, 1, 7, 42));
  EXPECT_NE(a, case_digest_share(Property::kOracle, 0, 7, 43));
  EXPECT_EQ(parse_digest_hex(digest_hex(a)), a);
  EXPECT_EQ(parse_digest_hex("12"), std::nullopt);
  EXPECT_EQ(parse_digest_hex("00000000000000zz"), std::nullopt);
}

}  // namespace
}  // namespace kvcheck::cli

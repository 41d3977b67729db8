// The kvcheck binary as a person runs it: `memory` and `replay --trace`,
// their output and their exit codes (0 success, 2 bad input).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"

namespace {

const std::string kSource = KVCHECK_SOURCE_DIR;

using kvcheck::test::CliRun;

CliRun kvcheck(const std::string& arguments) {
  return kvcheck::test::run_kvcheck(arguments);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines between "cache trace" and the next blank line.
std::vector<std::string> trace_of(const std::string& output) {
  std::vector<std::string> trace;
  bool in_trace = false;
  for (const std::string& line : lines_of(output)) {
    if (in_trace && line.empty()) break;
    if (in_trace) trace.push_back(line);
    if (line.rfind("cache trace ", 0) == 0) in_trace = true;
  }
  return trace;
}

TEST(MemoryCli, LessonExampleAsJson) {
  // Llama-3-8B's shape is the lesson's with 8 KV heads.
  const CliRun run = kvcheck("memory llama-3-8b --context 32768 --dtype bf16 --json -");
  ASSERT_EQ(run.code, 0) << run.output;
  const nlohmann::json j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["dtypes"][0]["dtype"], "bf16");
  EXPECT_EQ(j["dtypes"][0]["total_bytes"], 4294967296ull);
  EXPECT_EQ(j["head_schemes"]["rows"][0]["scheme"], "MHA");
  EXPECT_EQ(j["head_schemes"]["rows"][0]["total_bytes"], 17179869184ull);
  EXPECT_EQ(j["head_schemes"]["rows"][1]["savings_vs_mha"], 4);
}

TEST(MemoryCli, TextShowsFormulaUnitsAndWindow) {
  const CliRun run = kvcheck("memory mistral-7b --context 32768 --batch 2");
  ASSERT_EQ(run.code, 0) << run.output;
  for (const char* want :
       {"bytes = 2 (K and V) x layers x kv_heads x vector_bytes x context x batch",
        "      = 2 x 32 x 8 x vector_bytes x 32768 x 2", "GB = 1e9 bytes, GiB = 2^30 bytes",
        "bf16            256      131,072      8,589,934,592       8.59       8.00",
        "int8            144       73,728      4,831,838,208       4.83       4.50",
        "MHA          32      524,288     34,359,738,368      34.36      32.00  1x",
        "4x smaller (32/8)  <- this model",
        "sliding window 4096: a sequence keeps min(32768, 4096) = 4096 tokens"}) {
    EXPECT_NE(run.output.find(want), std::string::npos) << want << "\n" << run.output;
  }
}

TEST(MemoryCli, ConfigFileAndWindowOverride) {
  const CliRun run =
      kvcheck("memory --config " + kSource + "/tests/tools/configs/qwen2.5-7b.json --window 0 " +
              "--context 1000 --dtype f16 --json -");
  ASSERT_EQ(run.code, 0) << run.output;
  const nlohmann::json j = nlohmann::json::parse(run.output);
  EXPECT_EQ(j["model"]["n_kv_heads"], 4);
  EXPECT_EQ(j["dtypes"][0]["total_bytes"], 2ull * 28 * 4 * 128 * 2 * 1000);
  const CliRun windowed = kvcheck("memory gpt2 --window 100 --context 1000 --dtype f32 --json -");
  ASSERT_EQ(windowed.code, 0) << windowed.output;
  EXPECT_EQ(nlohmann::json::parse(windowed.output)["dtypes"][0]["windowed_total_bytes"],
            2ull * 12 * 12 * 64 * 4 * 100);
}

TEST(MemoryCli, BadInputExitsTwoWithAMessage) {
  struct Bad {
    std::string arguments, message;
  };
  for (const Bad& b : {
           Bad{"memory", "model: give a preset"},
           Bad{"memory gpt-5", "model: unknown preset \"gpt-5\""},
           Bad{"memory gpt2 --config x.json", "not both"},
           Bad{"memory --config /nonexistent.json", "--config: cannot read"},
           Bad{"memory --config " + kSource + "/README.md", "not valid JSON"},
           Bad{"memory gpt2 --dtype int4", "--dtype: unknown \"int4\""},
           Bad{"memory gpt2 --context 0", "--context"},
           Bad{"memory gpt2 --batch -1", "--batch"},
           Bad{"memory gpt2 --window -5", "--window"},
           Bad{"memory gpt2 --context 99999999999999 --batch 999999999", "64 bits"},
       }) {
    const CliRun run = kvcheck(b.arguments);
    EXPECT_EQ(run.code, 2) << b.arguments << "\n" << run.output;
    EXPECT_NE(run.output.find(b.message), std::string::npos) << b.arguments << "\n" << run.output;
  }
  EXPECT_EQ(kvcheck("memory --help").code, 0);
  EXPECT_EQ(kvcheck("memory --list").code, 0);
}

TEST(TraceCli, PrefillThenDecode) {
  const CliRun run = kvcheck("replay --trace " + kSource + "/tests/tools/prefill_then_decode.case");
  ASSERT_EQ(run.code, 0) << run.output;
  const std::vector<std::string> want = {"after call 0 (start s0):",
                                         "  s0 layer 0: [1, 4, 0, 8] wrote nothing",
                                         "  s0 layer 1: [1, 4, 0, 8] wrote nothing",
                                         "after call 1 (step s0:4):",
                                         "  s0 layer 0: [1, 4, 4, 8] wrote positions 0..3",
                                         "  s0 layer 1: [1, 4, 4, 8] wrote positions 0..3",
                                         "after call 2 (step s0:1):",
                                         "  s0 layer 0: [1, 4, 5, 8] wrote position 4",
                                         "  s0 layer 1: [1, 4, 5, 8] wrote position 4"};
  EXPECT_EQ(trace_of(run.output), want) << run.output;
}

TEST(TraceCli, RaggedBatchFinishAndReset) {
  // Two sequences of different lengths in one step, then a finish; then a reset.
  CliRun run = kvcheck("replay --trace " + kSource +
                       "/corpus/regressions/compaction_table_only.cache_state.case --fault none");
  ASSERT_EQ(run.code, 0) << run.output;
  std::vector<std::string> want = {"after call 0 (start s0):",
                                   "  s0 layer 0: [1, 1, 0, 1] wrote nothing",
                                   "after call 1 (start s1):",
                                   "  s0 layer 0: [1, 1, 0, 1] wrote nothing",
                                   "  s1 layer 0: [1, 1, 0, 1] wrote nothing",
                                   "after call 2 (step s1:1):",
                                   "  s0 layer 0: [1, 1, 0, 1] wrote nothing",
                                   "  s1 layer 0: [1, 1, 1, 1] wrote position 0",
                                   "after call 3 (finish s0):",
                                   "  s0: finished, its cache freed",
                                   "  s1 layer 0: [1, 1, 1, 1] wrote nothing"};
  EXPECT_EQ(trace_of(run.output), want) << run.output;

  run = kvcheck("replay --trace " + kSource +
                "/corpus/regressions/reset_keeps_position.cache_state.case --fault none");
  ASSERT_EQ(run.code, 0) << run.output;
  want = {"after call 0 (start s0):",  "  s0 layer 0: [1, 1, 0, 2] wrote nothing",
          "after call 1 (step s0:1):", "  s0 layer 0: [1, 1, 1, 2] wrote position 0",
          "after call 2 (reset):",     "  reset: every sequence dropped",
          "after call 3 (start s1):",  "  s1 layer 0: [1, 1, 0, 2] wrote nothing",
          "after call 4 (step s1:1):", "  s1 layer 0: [1, 1, 1, 2] wrote position 0"};
  EXPECT_EQ(trace_of(run.output), want) << run.output;
}

}  // namespace

// What a campaign prints to a person (issue 31, "Console and HTML"): the
// not-applicable reasons merged into ranges, counts in the right number, and
// with 2>&1 the progress lines after the text printed before them.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli_run.h"
#include "tools/reason_ranges.h"

namespace kvcheck {
namespace {

using cli::group_reasons;
using cli::ReasonGroup;
using test::CliRun;
using test::run_kvcheck;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ReasonRanges, ReasonsThatDifferInANumberAreOneLineWithItsRange) {
  const std::vector<ReasonGroup> groups = group_reasons({
      {"the scenario's pool (pool_blocks 12) may run dry before the capacity is reached", 3},
      {"the scenario's pool (pool_blocks 1) may run dry before the capacity is reached", 5},
      {"the scenario's pool (pool_blocks 50) may run dry before the capacity is reached", 2},
      {"the engine lacks fork", 4},
      {"head_dim 3 is not a multiple of 32", 1},
  });
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].text,
            "the scenario's pool (pool_blocks 1\u201350) may run dry before the capacity is "
            "reached");
  EXPECT_EQ(groups[0].cases, 10);
  EXPECT_EQ(groups[1].text, "the engine lacks fork");
  // One value: the text as it came, its number kept.
  EXPECT_EQ(groups[2].text, "head_dim 3 is not a multiple of 32");
  // Numbers that agree stay single; each place has its own range.
  const std::vector<ReasonGroup> two =
      group_reasons({{"q8_0 needs 2 of 4", 1}, {"q8_0 needs 3 of 4", 1}});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].text, "q8_0 needs 2\u20133 of 4");
}

TEST(Console, TheNotApplicableListMergesPoolSizes) {
  const CliRun run = run_kvcheck(
      "campaign --seed 5 --time 60 --cases 300 --no-kill-matrix --property capacity --backend "
      "cpu");
  ASSERT_EQ(run.code, 0) << run.output;
  int pool_lines = 0;
  for (const std::string& line : lines_of(run.output)) {
    if (line.find("P9  on cpu:") == std::string::npos) continue;
    if (line.find("may run dry") != std::string::npos) {
      ++pool_lines;
      EXPECT_NE(line.find("(pool_blocks 1\u2013"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(pool_lines, 1) << run.output;
}

TEST(Console, OneCaseIsOneCase) {
  const CliRun run = run_kvcheck(
      "campaign --seed 5 --time 60 --cases 1 --no-kill-matrix --property oracle --backend cpu");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("at most 1 case each"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(share of its 1 case)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(": 1 property case, "), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(" 1 cases"), std::string::npos) << run.output;
}

// stdout is a pipe (block-buffered) and stderr goes to it too: the second
// backend's kill-matrix progress line must come after the first backend's
// table, which stdout held when the line was written.
TEST(Console, ProgressLinesComeAfterWhatWasPrintedBefore) {
  const CliRun run = run_kvcheck(
      "campaign --seed 5 --time 120 --cases 1 --kill-cases 2 --shrink-steps 5 --property oracle");
  const std::vector<std::string> lines = lines_of(run.output);
  size_t table = lines.size(), progress = lines.size(), second = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (table == lines.size() && lines[i].rfind("kill matrix on cpu (seed", 0) == 0) table = i;
    if (lines[i].find("] kill matrix on cpu-reference") != std::string::npos) progress = i;
    if (lines[i].rfind("kill matrix on cpu-reference (seed", 0) == 0) second = i;
  }
  ASSERT_LT(second, lines.size()) << run.output;
  EXPECT_LT(table, progress) << run.output;
  EXPECT_LT(progress, second) << run.output;
  // Every line of the first backend's block (its table, its problems) came first.
  for (size_t i = progress; i < second; ++i)
    EXPECT_EQ(lines[i].find("problem:"), std::string::npos) << i << ": " << lines[i];
  for (const std::string& line : lines) {
    const size_t at = line.find("s] ");
    if (at != std::string::npos && line.find("cases/s") != std::string::npos) {
      EXPECT_EQ(line[0], '[') << "a progress line inside other text: " << line;
    }
  }
}

}  // namespace
}  // namespace kvcheck

// What kvcheck says to bad input at its boundary (issue 31, "Messages"):
// each message names the option or key and the value, says in words what is
// allowed, and the exit code is 2, before any run starts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/tools/cli_run.h"

namespace kvcheck {
namespace {

using test::CliRun;
using test::run_kvcheck;

struct Bad {
  std::string arguments, message;
};

void expect_refused(const Bad& b) {
  const CliRun run = run_kvcheck(b.arguments);
  EXPECT_EQ(run.code, 2) << b.arguments << "\n" << run.output;
  EXPECT_NE(run.output.find(b.message), std::string::npos) << b.arguments << "\n" << run.output;
  // Refused while parsing: no campaign header, no run.
  EXPECT_EQ(run.output.find("kvcheck campaign: seed"), std::string::npos) << run.output;
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);)
    EXPECT_LT(line.size(), 200u) << b.arguments << ": a line too long to read:\n" << line;
}

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvcheck_messages_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(Messages, NumbersSayWhatIsAllowedInWords) {
  for (const Bad& b : {
           Bad{"memory gpt2 --context 0",
               "--context: expected a whole number of at least 1, got \"0\""},
           Bad{"memory gpt2 --batch 0",
               "--batch: expected a whole number of at least 1, got \"0\""},
           Bad{"memory gpt2 --window -1",
               "--window: expected a whole number from 0 to 2147483647, got \"-1\""},
           Bad{"memory gpt2 --context abc",
               "--context: expected a whole number of at least 1, got \"abc\""},
           Bad{"campaign --cases -1", "--cases: expected a whole number from 0 to 2147483647"},
       })
    expect_refused(b);
}

TEST(Messages, ANegativeSeedIsRefusedNotWrapped) {
  for (const Bad& b : {
           Bad{"campaign --seed -1",
               "--seed: expected a whole number from 0 to 18446744073709551615, got \"-1\""},
           Bad{"campaign --kill-seed -3", "--kill-seed: expected a whole number from 0 to"},
           Bad{"kill-matrix --kill-seed x", "--kill-seed: expected a whole number from 0 to"},
           Bad{"demo --seed -1", "--seed: expected a whole number from 0 to"},
       })
    expect_refused(b);
  // 2^64 - 1 itself is a seed.
  const CliRun run = run_kvcheck(
      "campaign --seed 18446744073709551615 --time 5 --cases 1 --no-kill-matrix --property "
      "oracle --backend cpu");
  EXPECT_EQ(run.code, 0) << run.output;
}

TEST(Messages, AnUnknownCommandIsNamedAndTheCommandsListed) {
  const CliRun run = run_kvcheck("frobnicate");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("unknown command \"frobnicate\"; the commands are campaign, demo, "
                            "replay, shrink, backends, memory, check-adapter, kill-matrix"),
            std::string::npos)
      << run.output;
  const CliRun none = run_kvcheck("");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.output.find("a command is required: one of campaign,"), std::string::npos)
      << none.output;
}

TEST(Messages, VersionNamesTheCommit) {
  const CliRun run = run_kvcheck("--version");
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(run.output.rfind("kvcheck 0.", 0), 0u) << run.output;
  EXPECT_NE(run.output.find(" (commit "), std::string::npos) << run.output;
}

TEST(Messages, ReportPathsAreCheckedBeforeTheRunWithTheSystemsReason) {
  const std::string missing = "/nonexistent-kvcheck/dir";
  for (const Bad& b : {
           Bad{"campaign --html " + missing + "/r.html", "--html: cannot write \"" + missing +
                                                             "/r.html\": folder \"" + missing +
                                                             "\": No such file or directory"},
           Bad{"campaign --junit " + missing + "/j.xml", "--junit: cannot write"},
           Bad{"campaign --json " + missing + "/r.json", "--json: cannot write"},
           Bad{"replay x.case --json " + missing + "/r.json", "No such file or directory"},
           Bad{"replay x.case --html /tmp", "--html: cannot write \"/tmp\": it is a folder"},
           Bad{"shrink x.case --json " + missing + "/r.json", "No such file or directory"},
           Bad{"memory gpt2 --json " + missing + "/m.json", "No such file or directory"},
           Bad{"merge x.json --junit " + missing + "/j.xml", "--junit: cannot write"},
           Bad{"merge x.json --html /tmp", "--html: cannot write \"/tmp\": it is a folder"},
       })
    expect_refused(b);
}

TEST(Messages, ModelProblemsSayWhereOnce) {
  const std::string dir = scratch("bad_json");
  std::ofstream(dir + "/config.json") << "{\n  \"model_type\": \"gpt2\",,\n}\n";
  const CliRun bad = run_kvcheck("campaign --time 5 --model " + dir);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("config.json: not valid JSON at line 2, column 24"), std::string::npos)
      << bad.output;
  const CliRun none = run_kvcheck("campaign --time 5 --model /nonexistent-kvcheck");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("kvcheck: --model: /nonexistent-kvcheck: not a folder"),
            std::string::npos)
      << none.output;
  EXPECT_EQ(none.output.find("--model: --model"), std::string::npos) << none.output;
}

TEST(Messages, ExecBackendOptionsAndChildren) {
  expect_refused({"campaign --time 5 --backend 'exec:cat?timeout=abc'",
                  "--backend exec:cat: option timeout=abc: expected seconds in (0, 86400]"});
  // A command that cannot start is bad input, as the docs say, not a violation.
  expect_refused({"check-adapter --backend exec:/nonexistent-kvcheck/binary",
                  "check-adapter: the command could not start"});
  // A child that prints to stdout: the length prefix reads as text. It stays
  // alive after printing (a child that exits races kvcheck's write of the
  // request, which then sees the exit before the text).
  const CliRun printed =
      run_kvcheck("check-adapter --backend \"exec:sh -c 'echo Hello world; exec cat'\"");
  EXPECT_EQ(printed.code, 1) << printed.output;
  EXPECT_NE(printed.output.find("a control frame of 1819043144 bytes (the bound is 1048576); "
                                "those bytes read as text (\"Hello world...\"), so the child "
                                "probably printed to stdout"),
            std::string::npos)
      << printed.output;
}

}  // namespace
}  // namespace kvcheck

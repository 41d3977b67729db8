// Failures become files: atomic, never overwriting, named after the failure,
// and read back by the parser as the very case that failed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/in_tree.h"
#include "properties/repro/failure_file.h"
#include "properties/runner.h"

namespace kvcheck::test {
namespace {

namespace fs = std::filesystem;

class FailureFileTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvcheck-failure-file-test-" + std::to_string(::getpid()) + "-" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<std::string> listing(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

Scenario kv_swapped_scenario() {
  Scenario s;
  s.config.n_layers = 1;
  s.config.n_heads = s.config.n_kv_heads = 1;
  s.config.d_model = 4;
  s.config.head_dim = 2;
  s.config.d_ff = 4;
  s.config.vocab = 4;
  s.config.max_pos = 4;
  s.capacity = 4;
  s.max_rows = 1;
  s.sequences = {{1}};
  s.calls = {Call::start(0), Call::step({{0, 1}})};
  return s;
}

TEST_F(FailureFileTest, WritesACaseThatReplaysTheFailure) {
  const Scenario s = kv_swapped_scenario();
  const FaultSet faults(Fault::kKvSwapped);
  const Verdict v = check_property(Property::kCacheState, s, cpu_engine_factory(faults));
  ASSERT_FALSE(v.passed);
  FailureContext context;
  context.failures_dir = dir_.string();
  context.backend = "cpu";
  context.found_by = "failure_file_test";
  context.reproduce = "RC_PARAMS=\"seed=1\"";
  const WrittenCase written = write_failure_case(s, v, faults, context);
  ASSERT_TRUE(written.ok) << written.error;
  EXPECT_EQ(fs::path(written.path).parent_path(), dir_);
  EXPECT_EQ(fs::path(written.path).filename().string(),
            case_file_stem(Property::kCacheState, faults, s) + ".case");
  EXPECT_NE(written.report.find("case file: " + written.path), std::string::npos);
  EXPECT_NE(written.report.find("kvcheck replay " + written.path), std::string::npos);
  EXPECT_NE(written.report.find("reproduce: RC_PARAMS=\"seed=1\""), std::string::npos);

  const Result<CaseFile> c = read_case_file(written.path);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value(), failure_case(s, v, faults, context));
  EXPECT_EQ(c.value().scenario, s);
  EXPECT_EQ(c.value().faults, faults);
  EXPECT_EQ(c.value().property, Property::kCacheState);
  const Verdict again =
      check_property(c.value().property, c.value().scenario, cpu_engine_factory(c.value().faults));
  EXPECT_EQ(record_verdict(again), c.value().verdict);
  // Nothing but the case itself is left: no temporary files.
  EXPECT_EQ(listing(dir_).size(), 1u);
}

TEST_F(FailureFileTest, NeverOverwrites) {
  const Scenario s = kv_swapped_scenario();
  Verdict v;
  v.property = Property::kOracle;
  v.passed = false;
  v.summary = "first";
  FailureContext context;
  context.failures_dir = dir_.string();
  const WrittenCase first = write_failure_case(s, v, FaultSet(), context);
  ASSERT_TRUE(first.ok) << first.error;
  // The same failure again: recognized, nothing new written.
  const WrittenCase same = write_failure_case(s, v, FaultSet(), context);
  ASSERT_TRUE(same.ok);
  EXPECT_TRUE(same.already_recorded);
  EXPECT_EQ(same.path, first.path);
  // Another verdict under the same name: a new file beside it.
  v.summary = "second";
  const WrittenCase second = write_failure_case(s, v, FaultSet(), context);
  ASSERT_TRUE(second.ok);
  EXPECT_FALSE(second.already_recorded);
  EXPECT_NE(second.path, first.path);
  EXPECT_EQ(read_case_file(first.path).value().verdict.summary, "first");
  EXPECT_EQ(read_case_file(second.path).value().verdict.summary, "second");
  const std::string stem = case_file_stem(Property::kOracle, FaultSet(), s);
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{stem + "-2.case", stem + ".case"}));
}

TEST_F(FailureFileTest, ReportsAnUnwritableFolder) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "x";
  FailureContext context;
  context.failures_dir = (dir_ / "file" / "sub").string();
  Verdict v;
  v.passed = false;
  const WrittenCase written = write_failure_case(kv_swapped_scenario(), v, FaultSet(), context);
  EXPECT_FALSE(written.ok);
  EXPECT_NE(written.error.find(context.failures_dir), std::string::npos) << written.error;
  EXPECT_NE(written.report.find("could not write the case file"), std::string::npos);
}

TEST(FailureFile, DefaultFolderFollowsTheEnvironment) {
  ::unsetenv("KVCHECK_FAILURES");
  EXPECT_EQ(default_failures_dir(), "kvcheck-failures");
  ::setenv("KVCHECK_FAILURES", "/tmp/elsewhere", 1);
  EXPECT_EQ(default_failures_dir(), "/tmp/elsewhere");
  ::unsetenv("KVCHECK_FAILURES");
}

}  // namespace
}  // namespace kvcheck::test

#include "properties/repro/shrink.h"
#include "tests/properties/repro/rc_record.h"

namespace kvcheck::test {
namespace {

// The ctest driver: a RapidCheck run that fails (here on purpose, with a
// fault on) leaves exactly one case file, of the shrunk counterexample, and
// that file replays the failure.
TEST_F(FailureFileTest, RapidCheckFailureBecomesOneReplayableFile) {
  FailureContext context;
  context.failures_dir = dir_.string();
  context.backend = "cpu";
  context.found_by = "ctest FailureFileTest.RapidCheckFailureBecomesOneReplayableFile";
  const RecordedRun run =
      check_and_record(Property::kCacheState, FaultSet(Fault::kSharedRows), 200, 7, context);
  ASSERT_TRUE(run.failed) << run.rapidcheck_message;
  ASSERT_TRUE(run.written.ok) << run.written.error;
  EXPECT_EQ(listing(dir_).size(), 1u);
  std::printf("%s", run.written.report.c_str());
  const Result<CaseFile> c = read_case_file(run.written.path);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value().scenario, *run.counterexample);
  EXPECT_EQ(c.value().faults, FaultSet(Fault::kSharedRows));
  const Verdict again = check_property(Property::kCacheState, c.value().scenario,
                                       cpu_engine_factory(c.value().faults));
  EXPECT_FALSE(again.passed);
  EXPECT_EQ(record_verdict(again), c.value().verdict);
  // And the correct engine passes it.
  EXPECT_TRUE(
      check_property(Property::kCacheState, c.value().scenario, cpu_engine_factory()).passed);
}

}  // namespace
}  // namespace kvcheck::test

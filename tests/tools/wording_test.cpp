// What a campaign says about a failure of an engine under test that is not
// the in-tree one (issue 31, "Wrong wording"): the last line blames the
// engine under test, the case file's header and the HTML report give the
// whole replay command (an exec: case is refused without --backend), and
// `campaign --help` lists the exec: form.
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

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Wording, AFailureOfAnExecEngineNamesItAndTheWholeReplayCommand) {
  const auto dir = std::filesystem::temp_directory_path() / "kvcheck_wording";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // kvcheck-serve with a fault on: an engine under test that is wrong, with
  // no --fault given to kvcheck.
  const std::string backend = std::string("exec:") + KVCHECK_SERVE + " --fault shared_rows";
  const CliRun run = run_kvcheck(
      "campaign --seed 3 --time 60 --cases 40 --no-kill-matrix --property cache_state --backend '" +
      backend + "' --failures " + (dir / "failures").string() + " --html " +
      (dir / "r.html").string());
  ASSERT_EQ(run.code, 1) << run.output;
  EXPECT_NE(run.output.find("a property failed on the engine under test"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("correct engine"), std::string::npos) << run.output;

  std::string case_text;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "failures"))
    case_text = read_all(entry.path());
  const std::string header = "Replay: kvcheck replay --backend '" + backend + "' FILE\n";
  EXPECT_NE(case_text.find(header), std::string::npos) << case_text;

  const std::string html = read_all(dir / "r.html");
  EXPECT_NE(html.find("<code>kvcheck replay --backend &#39;exec:"), std::string::npos);
}

TEST(Wording, CampaignHelpListsEveryBackendForm) {
  const CliRun run = run_kvcheck("campaign --help");
  EXPECT_EQ(run.code, 0);
  for (const char* form : {"cpu-reference", "plugin:PATH.so", "exec:'CMD ARGS'"})
    EXPECT_NE(run.output.find(form), std::string::npos) << form << "\n" << run.output;
}

}  // namespace
}  // namespace kvcheck

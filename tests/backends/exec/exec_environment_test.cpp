// The environment an exec child starts with: KVCHECK_EXPORT names the
// kvcheck-export beside kvcheck's own executable, so that the llama.cpp
// adapter converts with the exporter of kvcheck's build. Before, the adapter
// took the newest build/*/tools/kvcheck-export, and a rebuild of another
// build folder during a run gave a false P8 failure (issue 33).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/exec/exec_child.h"

namespace kvcheck {
namespace {

std::vector<std::string> with(const std::vector<std::string>& entries, const std::string& self) {
  std::vector<char*> base;
  for (const std::string& e : entries) base.push_back(const_cast<char*>(e.c_str()));
  base.push_back(nullptr);
  return child_environment(base.data(), self);
}

TEST(ExecEnvironment, NamesTheExporterBesideKvcheckInPlaceOfAnyOther) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvcheck-env-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "kvcheck-export") << "#!/bin/sh\n";
  const std::string self = (dir / "kvcheck").string();
  const std::vector<std::string> env =
      with({"PATH=/bin", "KVCHECK_EXPORT=/elsewhere/build-old/tools/kvcheck-export", "A=1"}, self);
  const std::string expected = "KVCHECK_EXPORT=" + (dir / "kvcheck-export").string();
  EXPECT_EQ(std::count(env.begin(), env.end(), expected), 1);
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.starts_with("KVCHECK_EXPORT="); }),
            1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "PATH=/bin"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "A=1"), 1);
  std::filesystem::remove_all(dir);
}

TEST(ExecEnvironment, LeavesTheEnvironmentAloneWithoutAnExporterBesideKvcheck) {
  const std::vector<std::string> base = {"PATH=/bin", "KVCHECK_EXPORT=/given/kvcheck-export"};
  EXPECT_EQ(with(base, "/nonexistent-kvcheck-dir/kvcheck"), base);
  EXPECT_EQ(with(base, ""), base);
}

}  // namespace
}  // namespace kvcheck

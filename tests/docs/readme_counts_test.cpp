// README.md's counts against the build: the number of properties, of named
// fault switches and of backends it states must be the build's own
// (kPropertyCount, kFaultCount, the backend registry). Counts in prose went
// stale before ("fourteen properties" with 15 built, "Fifteen named fault
// switches" with 35); README writes them as digits so that this test can read
// them.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "engine/faults.h"
#include "properties/property.h"

namespace kvcheck {
namespace {

std::string readme() {
  const std::string path = std::string(KVCHECK_SOURCE_DIR) + "/README.md";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::ostringstream text;
  text << in.rdbuf();
  // One paragraph may wrap a phrase over lines: read it as one line.
  std::string out = text.str();
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  return out;
}

// Every number README states before `phrase` ("15 properties"), so that a
// second, stale mention fails too.
std::vector<int> stated(const std::string& text, const std::string& phrase) {
  std::vector<int> out;
  const std::regex re("\\b([0-9]+) +" + phrase);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back(std::stoi((*it)[1].str()));
  }
  return out;
}

void expect_stated(const std::string& phrase, int built) {
  const std::vector<int> numbers = stated(readme(), phrase);
  ASSERT_FALSE(numbers.empty()) << "README.md states no \"N " << phrase << "\"; the build has "
                                << built;
  for (int n : numbers) {
    EXPECT_EQ(n, built) << "README.md says \"" << n << " " << phrase << "\"; the build has "
                        << built;
  }
}

TEST(Readme, CountsThePropertiesTheBuildHas) {
  expect_stated("properties", kPropertyCount);
}

TEST(Readme, CountsTheFaultSwitchesTheBuildHas) {
  expect_stated("named fault switches", kFaultCount);
}

// Registered engines ("cpu", ...) and prefixes ("plugin:", "exec:"), each
// named in README. A build without CUDA registers no "cuda"; README counts
// it all the same, as the engine a CUDA build has.
TEST(Readme, CountsAndNamesTheRegisteredBackends) {
  const std::string text = readme();
  int engines = 0;
  int prefixes = 0;
  bool has_cuda = false;
  for (const BackendRegistry::Entry& e : backend_registry().entries()) {
    (e.is_prefix ? prefixes : engines) += 1;
    has_cuda = has_cuda || e.name == "cuda";
    EXPECT_NE(text.find("`" + e.name), std::string::npos)
        << "README.md does not name the registered backend `" << e.name << "`";
  }
  if (!has_cuda) {
    EXPECT_NE(text.find("`cuda`"), std::string::npos);
    engines += 1;
  }
  expect_stated("registered engines", engines);
  expect_stated("backend prefixes", prefixes);
}

}  // namespace
}  // namespace kvcheck

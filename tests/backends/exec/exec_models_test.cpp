// The exec backend's model folders: where they go, what they hold, and that
// a slot reused for another model holds that model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "backends/exec/exec_models.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tests/backends/saved_environment.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

namespace fs = std::filesystem;
using test::small_config;

// The temporary-folder variables, put back after the test.
struct TemporaryFolderVariables : test::SavedEnvironment {
  TemporaryFolderVariables() : SavedEnvironment({"TMPDIR", "TMP", "TEMP", "TEMPDIR"}) {}
};

bool starts_with(const std::string& path, const fs::path& parent) {
  return path.rfind(parent.string() + "/kvcheck-exec-", 0) == 0;
}

ModelFile read_back(const ModelFolder& folder) {
  return load_safetensors_file(folder.path + "/model.safetensors").value();
}

TEST(ExecModels, FoldersGoUnderTmpdirWhereSetAndAreRemovedWithTheirOwner) {
  TemporaryFolderVariables variables;
  const fs::path chosen = fs::temp_directory_path() / ("exec-models-" + std::to_string(::getpid()));
  fs::create_directories(chosen);
  ::setenv("TMPDIR", chosen.c_str(), 1);
  const Config config = small_config(Family::kGpt2, 1, 2, 1);
  const Weights weights = init_weights(config, 5);
  std::string root;
  {
    ModelFolders folders;
    const ModelFolder folder = folders.folder(config, weights);
    EXPECT_TRUE(starts_with(folder.path, chosen)) << folder.path;
    const ModelFile back = read_back(folder);
    EXPECT_EQ(back.config, config);
    EXPECT_EQ(back.weights, weights);
    root = fs::path(folder.path).parent_path().string();
  }
  EXPECT_FALSE(fs::exists(root)) << root;
  fs::remove_all(chosen);
}

// Without a named temporary folder: /dev/shm where it is writable, else the
// system's temporary folder (the machine decides which branch this checks).
TEST(ExecModels, FoldersGoUnderDevShmWhereNoTemporaryFolderIsNamed) {
  TemporaryFolderVariables variables;
  variables.clear();
  const bool shm = fs::is_directory("/dev/shm") && ::access("/dev/shm", W_OK | X_OK) == 0;
  const Config config = small_config(Family::kLlama, 1, 2, 1);
  ModelFolders folders;
  const ModelFolder folder = folders.folder(config, init_weights(config, 6));
  EXPECT_TRUE(starts_with(folder.path, shm ? fs::path("/dev/shm") : fs::temp_directory_path()))
      << folder.path;
}

TEST(ExecModels, ASlotRewrittenForAnotherModelHoldsThatModel) {
  // Past kMaxFolders models the least recently used slot is overwritten in
  // place and cut to size: a smaller model must not keep the larger one's
  // tail, and the first model, asked for again, is written again.
  const Config large = small_config(Family::kGpt2, 2, 2, 2);
  const Config small = small_config(Family::kGpt2, 1, 1, 1);
  ModelFolders folders;
  const Weights first = init_weights(large, 1);
  const ModelFolder first_folder = folders.folder(large, first);
  EXPECT_EQ(folders.folder(large, first).key, first_folder.key);
  std::optional<ModelFolder> reused;
  for (uint64_t seed = 2; seed < 2 + ModelFolders::kMaxFolders; ++seed) {
    const Weights weights = init_weights(small, seed);
    const ModelFolder folder = folders.folder(small, weights);
    EXPECT_NE(folder.key, first_folder.key);
    const ModelFile back = read_back(folder);
    EXPECT_EQ(back.config, small);
    EXPECT_EQ(back.weights, weights) << "seed " << seed;
    if (folder.path == first_folder.path) reused = folder;
  }
  ASSERT_TRUE(reused.has_value()) << "no slot was reused after " << ModelFolders::kMaxFolders;
  const ModelFolder again = folders.folder(large, first);
  EXPECT_EQ(again.key, first_folder.key);
  EXPECT_EQ(read_back(again).weights, first);
}

}  // namespace
}  // namespace kvcheck

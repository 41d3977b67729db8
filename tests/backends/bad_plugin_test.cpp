// Every way of getting the plugin ABI wrong is refused at load with an
// InputError naming the problem (the CLI turns it into exit code 2; the
// backends.cli_bad_plugin_* ctests check that).
#include <gtest/gtest.h>

#include "backends/registry.h"
#include "model/status.h"
#include "tests/backends/resolve_error.h"

namespace kvcheck {
namespace {

std::string bad_plugin(const std::string& kind) {
  return std::string("plugin:") + KVCHECK_BAD_PLUGIN_DIR + "/libkvcheck_bad_plugin_" + kind + ".so";
}

using test::resolve_error;

struct BadPlugin {
  const char* kind;
  const char* message;  // what the error must say
};

class BadPlugins : public testing::TestWithParam<BadPlugin> {};

TEST_P(BadPlugins, AreRefusedWithAMessageNamingTheProblem) {
  const std::string backend = bad_plugin(GetParam().kind);
  const std::string error = resolve_error(backend);
  EXPECT_NE(error.find(GetParam().message), std::string::npos) << error;
  EXPECT_EQ(error.rfind("--backend " + backend, 0), 0u) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Loader, BadPlugins,
    testing::Values(
        BadPlugin{"abi_version", ": ABI version 4, this kvcheck speaks versions 1 to 3"},
        BadPlugin{"struct_size", ": struct_size 56 is smaller than version 1's 80"},
        BadPlugin{"null_step", ": required function step is NULL"},
        BadPlugin{"missing_symbol", ": missing symbol kvcheck_plugin_entry_v1"},
        BadPlugin{"traits_invalid", ": traits: not valid JSON: {\"identity\""},
        BadPlugin{"traits_contradict", ": traits.limits.head_dim: minimum 64 is above maximum 32"},
        BadPlugin{"declared_null", ": traits.operations.finish is true but its function is NULL"},
        BadPlugin{"declared_fork_null",
                  ": traits.operations.fork is true but its function is NULL"},
        BadPlugin{"window_no_positions",
                  ": traits.operations.sliding_window is true but its function cache_positions "
                  "is NULL"},
        BadPlugin{"short_table_fork",
                  ": traits.operations.fork is true but its function is NULL (or past the "
                  "table's struct_size 80)"},
        BadPlugin{"v2_save_restore",
                  ": traits.operations.save_restore is true but its function save or restore "
                  "is NULL (or past the table's struct_size 176)"}),
    [](const testing::TestParamInfo<BadPlugin>& info) { return std::string(info.param.kind); });

// A table of the first header's size (no fork, no truncate) still loads;
// what lies past its struct_size is never read.
TEST(BadPlugins, AnOldTableLoadsWithoutTheAppendedOperations) {
  const Backend b = backend_registry().resolve(std::string("plugin:") + KVCHECK_OLD_TABLE_PLUGIN);
  EXPECT_FALSE(b.traits.operations.fork);
  EXPECT_FALSE(b.traits.operations.truncate);
}

// A table of the version-2 header (before save and restore) still loads,
// without them, although save and restore functions lie past its end.
TEST(BadPlugins, AVersion2TableLoadsWithoutSaveAndRestore) {
  const Backend b = backend_registry().resolve(std::string("plugin:") + KVCHECK_V2_TABLE_PLUGIN);
  EXPECT_FALSE(b.traits.operations.save_restore);
  EXPECT_EQ(b.traits.identity.name, "bad");
}

TEST(BadPlugins, AMissingFileSaysItCannotLoad) {
  const std::string error = resolve_error("plugin:/nonexistent/libnothing.so");
  EXPECT_NE(error.find("plugin:/nonexistent/libnothing.so: cannot load: "), std::string::npos)
      << error;
  EXPECT_NE(resolve_error("plugin:").find("needs a path"), std::string::npos);
}

}  // namespace
}  // namespace kvcheck

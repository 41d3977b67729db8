// Subcommands of the kvcheck CLI. Each registers itself on the app and runs
// when chosen; exit codes: 0 all held, 1 a property failed, 2 bad input.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace kvcheck::cli {

// Returns the action to run if the subcommand was chosen.
using Action = std::function<int()>;

Action add_demo(CLI::App& app);
Action add_campaign(CLI::App& app);
Action add_replay(CLI::App& app);
Action add_shrink(CLI::App& app);
Action add_backends(CLI::App& app);
Action add_memory(CLI::App& app);
Action add_check_adapter(CLI::App& app);

}  // namespace kvcheck::cli

// Subcommands of the kvcheck CLI. Each registers itself on the app and runs
// when chosen; exit codes: 0 all held, 1 a property failed, 2 bad input
// (a campaign adds 4 incomplete and 130/143 interrupted: tools/campaign.h;
// a merge 4 for a shard that did not finish: tools/merge.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kvcheck::cli {

// Returns the action to run if the subcommand was chosen.
using Action = std::function<int()>;

// The command line as given (main sets it), for reports that record it.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

Action add_demo(CLI::App& app);
Action add_campaign(CLI::App& app);
Action add_replay(CLI::App& app);
Action add_shrink(CLI::App& app);
Action add_backends(CLI::App& app);
Action add_memory(CLI::App& app);
Action add_check_adapter(CLI::App& app);
Action add_kill_matrix(CLI::App& app);
Action add_merge(CLI::App& app);

}  // namespace kvcheck::cli

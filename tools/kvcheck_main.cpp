// kvcheck: verification and fuzzing harness for transformer KV caches.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "model/status.h"
#include "tools/build_info.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"

namespace kvcheck::cli {

namespace {
std::vector<std::string> g_command_line;
}  // namespace

void set_command_line(int argc, char** argv) {
  g_command_line.assign(argv, argv + argc);
}
const std::vector<std::string>& command_line() {
  return g_command_line;
}

}  // namespace kvcheck::cli

int main(int argc, char** argv) {
  kvcheck::cli::set_command_line(argc, argv);
  CLI::App app{
      "kvcheck: proves a transformer KV cache correct, or finds the smallest input "
      "that shows it is not"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("kvcheck ") + kvcheck::cli::build_version() +
                                        " (commit " + kvcheck::cli::build_commit() + ")");
  const std::vector<kvcheck::cli::Action> actions = {
      kvcheck::cli::add_campaign(app),      kvcheck::cli::add_demo(app),
      kvcheck::cli::add_replay(app),        kvcheck::cli::add_shrink(app),
      kvcheck::cli::add_backends(app),      kvcheck::cli::add_memory(app),
      kvcheck::cli::add_check_adapter(app), kvcheck::cli::add_kill_matrix(app),
      kvcheck::cli::add_merge(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 says only "A subcommand is required", even for a misspelt one.
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::RequiredError*>(&e)) {
      std::vector<std::string> names;
      const CLI::App& all = app;
      for (const CLI::App* sub : all.get_subcommands([](const CLI::App*) { return true; }))
        names.push_back(sub->get_name());
      std::fprintf(stderr, "kvcheck: %s\n",
                   kvcheck::cli::missing_subcommand_message(app.remaining(), names).c_str());
      return 2;
    }
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const auto& action : actions) {
      if (const int code = action(); code >= 0) return code;
    }
    return 2;
  } catch (const kvcheck::InputError& e) {
    std::fprintf(stderr, "kvcheck: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvcheck: internal error: %s\n", e.what());
    return 3;
  }
}

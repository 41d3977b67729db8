// kvcheck: verification and fuzzing harness for transformer KV caches.
#include <cstdio>
#include <exception>
#include <vector>

#include "model/status.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvcheck: proves a transformer KV cache correct, or finds the smallest input "
      "that shows it is not"};
  app.require_subcommand(1);
  const std::vector<kvcheck::cli::Action> actions = {
      kvcheck::cli::add_campaign(app),     kvcheck::cli::add_demo(app),
      kvcheck::cli::add_replay(app),       kvcheck::cli::add_shrink(app),
      kvcheck::cli::add_backends(app),     kvcheck::cli::add_memory(app),
      kvcheck::cli::add_check_adapter(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
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

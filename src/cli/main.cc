/// autoshard's command line: subcommands graph, cost, plan, iopddl.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/common.h"
#include "cli/state_commands.h"
#include "ir/file_util.h"

int main(int argc, char** argv) {
  CLI::App app{"autoshard: automatic sharding planner for deep-learning training graphs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "autoshard 0.1.0");
  autoshard::cli::register_graph(app);
  autoshard::cli::register_cost(app);
  autoshard::cli::register_strategies(app);
  autoshard::cli::register_plan(app);
  autoshard::cli::register_iopddl(app);
  autoshard::cli::register_search(app);
  autoshard::cli::register_state_commands(app);  // show, explain, pin, diff, export
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::fprintf(stderr,
                   "autoshard: error: unknown subcommand '%s' (expected graph, cost, plan, iopddl, "
                   "search, show, explain, pin, diff or export; "
                   "see --help)\n",
                   autoshard::one_line(argv[1]).c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print their text and exit 0; usage errors get the same one-line
    // form as every other error (CLI11 would add a second "Run with --help" line).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "autoshard: error: %s (see --help)\n", autoshard::one_line(e.what()).c_str());
    return e.get_exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", autoshard::one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}

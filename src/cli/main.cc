/// autoshard's command line: subcommands graph, cost, plan, iopddl.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/common.h"
#include "ir/file_util.h"

int main(int argc, char** argv) {
  CLI::App app{"autoshard: automatic sharding planner for deep-learning training graphs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "autoshard 0.1.0");
  autoshard::cli::register_graph(app);
  autoshard::cli::register_cost(app);
  autoshard::cli::register_plan(app);
  autoshard::cli::register_iopddl(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", autoshard::one_line(e.what()).c_str());
    return 1;
  }
  return 0;
}

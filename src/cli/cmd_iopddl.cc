/// `autoshard iopddl PROBLEM [TIMEOUT_S]`: the ASPLOS 2025 IOPDDL contest interface.
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "solver/anytime.h"

namespace autoshard::cli {

namespace {
struct IopddlArgs {
  std::string problem;
  double timeout = 60;
  int threads = 0;
};
}  // namespace

void register_iopddl(CLI::App& app) {
  auto a = std::make_shared<IopddlArgs>();
  CLI::App* sub = app.add_subcommand(
      "iopddl", "solve an IOPDDL contest problem; the last line printed is the solution");
  sub->add_option("problem", a->problem, "problem JSON (plain or .gz)")->required();
  sub->add_option("timeout", a->timeout, "timeout in seconds")->capture_default_str();
  sub->add_option("--threads", a->threads, "worker threads (default: the cores available)");
  sub->callback([a] {
    int rc = run_iopddl(a->problem, a->timeout, a->threads, std::cout);
    if (rc != 0) throw std::runtime_error("iopddl: no solution");
  });
}

}  // namespace autoshard::cli

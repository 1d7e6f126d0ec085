/// Plan-time benchmark: builds and solves the built-in models on the meshes of
/// docs/benchmarks.md and prints a table of the time per phase.  One core (threads = 1).
/// Usage: plan_bench [--quick]   (--quick: only llama3-8b on 2x8)
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "models/models.h"
#include "planner/sharding_optimizer.h"

using namespace autoshard;

namespace {

struct Case {
  std::string model;
  std::vector<int64_t> mesh;
  std::vector<std::string> dims;
};

double phase(const Plan& p, std::string_view prefix) {
  double s = 0;
  for (const auto& [name, t] : p.phase_seconds)
    if (name.rfind(prefix, 0) == 0) s += t;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<Case> cases = {{"llama3-8b", {2, 8}, {"dp", "tp"}},
                             {"llama3-8b", {8, 8}, {"dp", "tp"}},
                             {"llama3-70b", {8, 8, 8}, {"pp", "dp", "tp"}}};
  if (quick) cases.resize(1);
  fmt::print("| model | mesh | graph nodes | problem nodes | clustered | reduced | graph build s | "
             "problem build s | cluster s | solve s | total s | status | objective ms | gap |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    Graph g = build_model(c.model);
    double t_graph = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Mesh mesh(c.mesh, c.dims, *hardware_preset("h100"));
    PlannerOptions opt;
    opt.threads = 1;
    opt.time_limit_s = 60;
    ShardingOptimizer so(std::move(g), mesh, opt);
    Plan p = so.get_solution();
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("| {} | {} | {} | {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} | {:.3f} | {:.2e} |\n",
               c.model, fmt::join(c.mesh, "x"), p.graph_nodes, p.problem_nodes, p.clustered_nodes,
               p.reduced_nodes, t_graph, phase(p, "build"), phase(p, "cluster"), phase(p, "solve."),
               total, solve_status_name(p.status), p.objective_us / 1e3, p.gap);
  }
  return 0;
}

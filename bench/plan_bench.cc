/// Plan-time benchmark: builds and solves the built-in models on the meshes of
/// docs/benchmarks.md, then the traced graphs checked in as replays (tests/fixtures/*.replay:
/// graph, mesh, options and constraints as the Python API traced them), and prints a table of
/// the time per phase.  One core (threads = 1).
/// Usage: plan_bench [--quick] [FIXTURES_DIR]   (run from the repository root; --quick: only
/// llama3-8b on 2x8 and no replay)
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/state.h"
#include "models/models.h"
#include "planner/sharding_optimizer.h"

using namespace autoshard;

namespace {

struct Case {
  std::string model;  ///< a built-in model, or a replay file
  std::vector<int64_t> mesh;
  std::vector<std::string> dims;
  bool replay = false;
};

/// Traced graphs (tests/fixtures/README.md says how each was made): the built-in model of the
/// same architecture and mesh is a case above, for comparison.
const char* const kReplays[] = {"ap_llama3_8b_8x8.replay"};

double phase(const Plan& p, std::string_view prefix) {
  double s = 0;
  for (const auto& [name, t] : p.phase_seconds)
    if (name.rfind(prefix, 0) == 0) s += t;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string fixtures = "tests/fixtures";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else fixtures = argv[i];
  }
  std::vector<Case> cases = {{"llama3-8b", {2, 8}, {"dp", "tp"}},
                             {"llama3-8b", {8, 8}, {"dp", "tp"}},
                             {"llama3-70b", {8, 8, 8}, {"pp", "dp", "tp"}}};
  if (quick) cases.resize(1);
  for (const char* r : kReplays) {
    const std::string path = fixtures + "/" + r;
    if (quick) break;
    if (std::filesystem::exists(path)) cases.push_back({path, {}, {}, true});
    else fmt::print(stderr, "plan_bench: {} not found (pass the fixtures directory)\n", path);
  }
  fmt::print("| model | mesh | graph nodes | problem nodes | clustered | reduced | graph build s | "
             "problem build s | cluster s | solve s | total s | status | objective ms | gap |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    std::optional<ShardingOptimizer> so;
    if (c.replay) {
      so.emplace(load_replay(c.model));
    } else {
      Graph g = build_model(c.model);
      Mesh mesh(c.mesh, c.dims, *hardware_preset("h100"));
      so.emplace(std::move(g), mesh, PlannerOptions{});
    }
    double t_graph = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    so->mutable_options().threads = 1;
    so->mutable_options().time_limit_s = 60;
    Plan p = so->get_solution();
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string name = c.replay ? std::filesystem::path(c.model).filename().string() : c.model;
    fmt::print("| {} | {} | {} | {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} | {:.3f} | {:.2e} |\n",
               name, fmt::join(so->mesh().shape(), "x"), p.graph_nodes, p.problem_nodes,
               p.clustered_nodes, p.reduced_nodes, t_graph, phase(p, "build"), phase(p, "cluster"),
               phase(p, "solve."), total, solve_status_name(p.status), p.objective_us / 1e3, p.gap);
  }
  return 0;
}

/// State-file benchmark: llama3-8b on 8x8 (dp, tp) H100, planned once, then the size of its
/// state (.ap) and replay files and the time to save, load, and load + re-solve (CPU seconds,
/// median of 5; one thread).
/// Usage: state_bench [--model M] [--mesh 8x8]   (prints a table for docs/benchmarks.md)
/// A load + re-solve reuses the stored problem: no strategy or cost generation.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "io/state.h"
#include "models/models.h"

using namespace autoshard;

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// CPU seconds of this process and its finished children (the MIP runs CBC in a child).
double cpu_seconds() {
  double t = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    t += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  return t;
}

/// Median of `reps` timings of f(): CPU seconds (one thread; what a shared machine cannot
/// inflate) -- wall seconds are printed on stderr.
template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t, w;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_seconds();
    f();
    t.push_back(cpu_seconds() - c0);
    w.push_back(seconds(t0));
  }
  std::sort(t.begin(), t.end());
  std::sort(w.begin(), w.end());
  fmt::print(stderr, "  cpu {:.3f} s, wall {:.3f} s\n", t[t.size() / 2], w[w.size() / 2]);
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "llama3-8b", mesh_s = "8x8";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) model = argv[i + 1];
    else if (std::strcmp(argv[i], "--mesh") == 0) mesh_s = argv[i + 1];
    else {
      fmt::print(stderr, "usage: {} [--model M] [--mesh AxB]\n", argv[0]);
      return 2;
    }
  }
  std::vector<int64_t> shape = Mesh::parse_shape(mesh_s);
  std::vector<std::string> dims = shape.size() == 2 ? std::vector<std::string>{"dp", "tp"}
                                                    : std::vector<std::string>{};
  Mesh mesh(shape, dims, *hardware_preset("h100"));
  // The first plan, for scale (CPU seconds like the rest).
  const double c0 = cpu_seconds();
  ShardingOptimizer so(build_model(model), mesh);
  Plan plan = so.get_solution();
  const double plan_s = cpu_seconds() - c0;

  std::string state, replay;
  const int reps = 5;
  double save_s = median_seconds(reps, [&] { state = state_bytes(so); });
  double load_s = median_seconds(reps, [&] { ShardingOptimizer x = state_from_bytes(state, "bench.ap"); });
  double objective = 0;
  // Re-solve as the what-if loop does: warm-started from the stored solution.
  double resolve_s = median_seconds(reps, [&] {
    ShardingOptimizer x = state_from_bytes(state, "bench.ap");
    x.set_warm_start(x.solution_choice());
    objective = x.get_solution().objective_us;
  });
  double cold_s = median_seconds(reps, [&] {
    ShardingOptimizer x = state_from_bytes(state, "bench.ap");
    objective = x.get_solution().objective_us;
  });
  double replay_save_s = median_seconds(reps, [&] { replay = replay_bytes(so); });
  double replay_load_s = median_seconds(reps, [&] { ShardingOptimizer x = replay_from_bytes(replay, "bench.replay"); });
  if (objective != plan.objective_us) {
    fmt::print(stderr, "re-solve after load gave {} us, the plan {} us\n", objective, plan.objective_us);
    return 1;
  }
  const BuiltProblem& bp = *so.built_problem();
  size_t matrices = 0;
  state_bytes(so, &matrices);
  fmt::print("| model | mesh | problem nodes | edges | distinct matrices | plan s | state MB | save s | "
             "load s | load + re-solve s | (cold) | replay KB | replay save s | replay load s |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  fmt::print("| {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.0f} | {:.3f} | {:.3f} |\n",
             model, mesh_s, bp.problem.num_nodes(), bp.edges.size(), matrices, plan_s,
             static_cast<double>(state.size()) / 1e6, save_s, load_s, resolve_s, cold_s,
             static_cast<double>(replay.size()) / 1e3, replay_save_s, replay_load_s);
  return 0;
}

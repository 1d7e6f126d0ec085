/// IOPDDL contest benchmark: runs the anytime solver on every contest problem with (a fraction
/// of) its contest timeout and prints cost, best submitted cost, score = best / ours, lower
/// bound and time to first feasible.  Reading the file counts against the timeout, as in the
/// contest.  Own main(): no Google Benchmark macros.
///   iopddl_bench [--dir DIR] [--scale F] [--threads N] [--only A,G,...] [--bound SECONDS]
/// --bound adds a memory-aware Lagrangian lower bound (lower_bound.h) computed for SECONDS
/// after each timed run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "problem/iopddl.h"
#include "solver/anytime.h"
#include "solver/reduce.h"
#include "solver/lower_bound.h"

using namespace autoshard;

namespace {
struct Case {
  const char* name;
  double timeout_s;
  double best;
};
const Case kCases[] = {{"A", 60, 6548641531.0}, {"G", 120, 217039.0}, {"M", 180, 49928460991.0}, {"S", 240, 1534613444.0}};
}  // namespace

int main(int argc, char** argv) {
  std::string dir = "../shared/iopddl";
  double scale = 0.1;
  int threads = 0;
  std::string only;
  double bound_s = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--dir") dir = val();
    else if (a == "--scale") scale = std::atof(val().c_str());
    else if (a == "--threads") threads = std::atoi(val().c_str());
    else if (a == "--only") only = val();
    else if (a == "--bound") bound_s = std::atof(val().c_str());
    else { std::fprintf(stderr, "usage: %s [--dir DIR] [--scale F] [--threads N] [--only A,G] [--bound SECONDS]\n", argv[0]); return 2; }
  }
  std::printf("| problem | timeout s | cost | best submitted | score | lower bound | memory-aware bound | first feasible s | reduced |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (const Case& c : kCases) {
    if (!only.empty() && only.find(c.name) == std::string::npos) continue;
    std::string path = dir + "/asplos-2025-iopddl-" + c.name + ".json.gz";
    double timeout = c.timeout_s * scale;
    auto t0 = std::chrono::steady_clock::now();
    IopddlInstance inst = read_iopddl(path);
    double read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    AnytimeOptions opt;
    opt.time_limit_s = std::max(0.05, timeout - read_s - std::max(0.3, 0.04 * timeout));
    opt.threads = threads;
    AnytimeResult r = solve_anytime(inst.problem, opt);
    IopddlEvaluation ev = evaluate(inst, r.choice);
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double ours = ev.feasible ? static_cast<double>(ev.cost_ld) : 0;
    // Optional Lagrangian bound, computed after the timed run (it does not count against it).
    std::string mem_bound = "-";
    if (bound_s > 0) {
      GroupReduction red(inst.problem);
      double ub = ev.feasible ? std::min(ours, c.best) : c.best;
      mem_bound = std::to_string(static_cast<long long>(
          std::floor(std::max<double>(r.lower_bound, lagrangian_memory_bound(red.model(), ub, bound_s)))));
    }
    std::printf("| %s | %.1f (used %.1f) | %s | %.0f | %.4f | %.0f | %s | %.2f | %s |\n", c.name, timeout, total,
                ev.feasible ? ev.cost_str.c_str() : "infeasible", c.best, ev.feasible ? c.best / ours : 0.0,
                r.lower_bound, mem_bound.c_str(), r.time_to_first_feasible_s + read_s, r.reduction_summary.c_str());
    std::fflush(stdout);
  }
  return 0;
}

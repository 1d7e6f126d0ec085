#include "planner/fit_advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "planner/cp_memory.h"
#include "planner/parameter_share.h"
#include "planner/problem_builder.h"
#include "planner/recompute.h"

namespace autoshard {

std::string bytes_ceil(int64_t bytes) {
  int shift = 30;
  const char* unit = "GiB";
  if (bytes < (int64_t{1} << 20)) shift = 10, unit = "KiB";
  else if (bytes < (int64_t{1} << 30)) shift = 20, unit = "MiB";
  const double v = std::ceil(static_cast<double>(bytes) / static_cast<double>(int64_t{1} << shift) * 100) / 100;
  return fmt::format("{:.2f} {}", v, unit);
}

namespace {

/// The memory floor of `g` on `mesh` under `o`: every node at its least usage; `valid` says
/// whether that layout is itself a plan (no forbidden pair), so that its peak is reached.
struct Floor {
  int64_t peak = 0;
  bool valid = false;
};

Floor floor_of(const Graph& g, const Mesh& mesh, const PlannerOptions& o, const std::vector<Constraint>& cs) {
  const BuiltProblem bp = build_problem(g, mesh, o, cs);
  const std::vector<StrategyIdx> least = least_usage_layout(bp);
  return {peak_usage(bp.problem, least), evaluate_cost(bp, least) < kInfCost};
}

std::string budget_line(const Plan& plan, const Hardware& hw) {
  const int64_t lo = plan.min_peak_lower_bound_bytes, hi = plan.min_peak_memory_bytes;
  if (lo < 0 && hi < 0) return {};
  const int64_t need = hi >= 0 ? hi : lo;
  std::string why = hi >= 0 && hi == lo ? "a layout peaks at exactly that, and none lower"
                    : hi >= 0           ? fmt::format("the best layout found peaks there{}",
                                                      lo >= 0 ? fmt::format("; none below {}", bytes_ceil(lo)) : "")
                                        : "no layout peaks lower (proven); a plan may need more";
  std::string flag = bytes_ceil(need);
  flag.erase(std::remove(flag.begin(), flag.end(), ' '), flag.end());
  if (need > hw.memory_bytes)
    return fmt::format("memory: a device with at least {} (the {} has {}; --memory-limit {}): {}", bytes_ceil(need),
                       hw.name, bytes_ceil(hw.memory_bytes), flag, why);
  return fmt::format("memory: --memory-limit {}: {}", flag, why);
}

}  // namespace

std::vector<std::string> fit_suggestions(ShardingOptimizer& opt, const Plan& plan) {
  std::vector<std::string> out;
  if (plan.has_solution || plan.status != SolveStatus::kInfeasible) return out;
  // A parameter-memory bound out of reach: the one remedy is the bound itself (checked before
  // the solve, so no memory floor was computed).
  const auto shares = unreachable_shares(opt.graph(), opt.mesh(), opt.problem(), opt.constraints());
  for (const UnreachableShare& u : shares) out.push_back(u.remedy());
  if (!shares.empty() || plan.memory_limit_bytes <= 0) return out;
  const Graph& g = opt.graph();
  const Mesh& mesh = opt.mesh();
  const int64_t limit = plan.memory_limit_bytes;
  if (std::string b = budget_line(plan, mesh.hardware()); !b.empty()) out.push_back(b);

  // Recomputation, when this solve had no way to recompute everything.
  PlannerOptions o = opt.options();
  o.recompute = opt.built_policy();
  const bool tried = o.recompute == RecomputePolicy::kFull || o.recompute == RecomputePolicy::kAuto;
  if (!tried) {
    PlannerOptions full = o;
    full.recompute = RecomputePolicy::kFull;
    const Floor f = floor_of(g, mesh, full, opt.constraints());
    if (f.peak <= limit)
      out.push_back(fmt::format("recompute: --recompute auto (or full): fully recomputed layers need at least {} "
                                "per device, under the {} budget",
                                bytes_ceil(f.peak), bytes_ceil(limit)));
    else
      out.push_back(fmt::format("recompute: not enough alone: fully recomputed layers still need at least {} "
                                "per device",
                                bytes_ceil(f.peak)));
  }

  // A larger mesh: the first dim grown until the floor fits.
  std::vector<int64_t> shape = mesh.shape();
  for (int64_t k : {2, 4, 8}) {
    std::vector<int64_t> s = shape;
    s[0] *= k;
    const Mesh bigger(s, mesh.names(), mesh.hardware(), mesh.backend());
    Floor f;
    try {
      f = floor_of(g, bigger, o, opt.constraints());
    } catch (const std::exception&) {
      break;  // e.g. too large a problem: no claim
    }
    if (f.peak > limit) continue;
    out.push_back(fmt::format("mesh: {}, {} devices: {} {} per device{}", bigger.describe(), bigger.num_devices(),
                              f.valid ? "a plan there peaks at" : "its memory floor is",
                              bytes_ceil(f.peak),
                              f.valid ? ", within the budget" : " (a lower bound: the plan may need more)"));
    break;
  }
  return out;
}

}  // namespace autoshard

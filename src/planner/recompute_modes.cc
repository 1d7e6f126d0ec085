#include "planner/recompute_modes.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include "planner/exact_tied.h"

namespace autoshard {

int64_t ModeClasses::cases() const {
  constexpr int64_t kCap = std::numeric_limits<int64_t>::max() / 4;
  int64_t n = 1;
  for (StrategyIdx c : counts) n = n > kCap / std::max<StrategyIdx>(c, 1) ? kCap : n * std::max<StrategyIdx>(c, 1);
  return n;
}

std::vector<StrategyIdx> ModeClasses::modes_of(int64_t k) const {
  std::vector<StrategyIdx> m(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    m[i] = static_cast<StrategyIdx>(k % counts[i]);
    k /= counts[i];
  }
  return m;
}

ModeClasses decision_classes(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of) {
  std::map<PNodeIdx, StrategyIdx> seen;
  for (const auto& r : bp.recompute_regions)
    if (r.modes.size() > 1)
      seen[class_of.at(static_cast<size_t>(r.decision))] = static_cast<StrategyIdx>(r.modes.size());
  ModeClasses mc;
  for (const auto& [c, k] : seen) {
    mc.classes.push_back(c);
    mc.counts.push_back(k);
  }
  return mc;
}

std::vector<StrategyIdx> region_modes(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                                      const ModeClasses& mc, const std::vector<StrategyIdx>& modes) {
  std::vector<StrategyIdx> out;
  out.reserve(bp.recompute_regions.size());
  for (const auto& r : bp.recompute_regions) {
    const PNodeIdx c = class_of.at(static_cast<size_t>(r.decision));
    auto it = std::lower_bound(mc.classes.begin(), mc.classes.end(), c);
    out.push_back(it != mc.classes.end() && *it == c ? modes.at(static_cast<size_t>(it - mc.classes.begin())) : -1);
  }
  return out;
}

namespace {

/// Whether strategy s of problem node v is allowed under the regions' modes (per bp node: the
/// fixed mode, -1 when free).
std::vector<StrategyIdx> fixed_mode_per_node(const BuiltProblem& bp, const std::vector<StrategyIdx>& region_mode) {
  std::vector<StrategyIdx> m(static_cast<size_t>(bp.problem.num_nodes()), -1);
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r)
    m[static_cast<size_t>(bp.recompute_regions[r].decision)] = region_mode.at(r);
  for (const auto& a : bp.recompute_aux) m[static_cast<size_t>(a.node)] = region_mode.at(static_cast<size_t>(a.region));
  return m;
}

/// The mode of strategy s of node v (decisions: s; aux nodes: s / |S_owner|).
StrategyIdx mode_of_strategy(const BuiltProblem& bp, const std::vector<PNodeIdx>& owner, PNodeIdx v, StrategyIdx s) {
  const PNodeIdx o = owner[static_cast<size_t>(v)];
  return o < 0 ? s : s / bp.problem.nodes[static_cast<size_t>(o)].num_strategies();
}

std::vector<PNodeIdx> aux_owners(const BuiltProblem& bp) {
  std::vector<PNodeIdx> owner(static_cast<size_t>(bp.problem.num_nodes()), -1);
  for (const auto& a : bp.recompute_aux) owner[static_cast<size_t>(a.node)] = a.owner;
  return owner;
}

}  // namespace

void fix_region_modes(const BuiltProblem& bp, const std::vector<StrategyIdx>& region_mode,
                      const std::vector<PNodeIdx>& node_of, Problem& p) {
  const std::vector<StrategyIdx> fixed = fixed_mode_per_node(bp, region_mode);
  const std::vector<PNodeIdx> owner = aux_owners(bp);
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const StrategyIdx m = fixed[static_cast<size_t>(v)];
    if (m < 0) continue;
    ProblemNode& n = p.nodes.at(static_cast<size_t>(node_of.empty() ? v : node_of[static_cast<size_t>(v)]));
    for (StrategyIdx s = 0; s < n.num_strategies(); ++s)
      if (mode_of_strategy(bp, owner, v, s) != m) n.costs[static_cast<size_t>(s)] = kInfCost;
  }
}

int64_t memory_floor_with_modes(const BuiltProblem& bp, const std::vector<StrategyIdx>& region_mode) {
  const std::vector<StrategyIdx> fixed = fixed_mode_per_node(bp, region_mode);
  const std::vector<PNodeIdx> owner = aux_owners(bp);
  std::vector<int64_t> usage(static_cast<size_t>(bp.problem.num_nodes()));
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const ProblemNode& n = bp.problem.nodes[static_cast<size_t>(v)];
    const StrategyIdx m = fixed[static_cast<size_t>(v)];
    int64_t best = std::numeric_limits<int64_t>::max();
    for (StrategyIdx s = 0; s < n.num_strategies(); ++s)
      if (n.costs[static_cast<size_t>(s)] < kInfCost && (m < 0 || mode_of_strategy(bp, owner, v, s) == m))
        best = std::min(best, n.usages[static_cast<size_t>(s)]);
    usage[static_cast<size_t>(v)] = best == std::numeric_limits<int64_t>::max() ? 0 : best;
  }
  return peak_of_usages(bp.problem, usage);
}

namespace {

/// One combination of decision-class modes and what is known about it.
struct Case {
  std::vector<StrategyIdx> modes;        ///< per decision class
  std::vector<StrategyIdx> region_mode;  ///< per region of bp
  int64_t floor = 0;
  SolveResult relaxed;                   ///< memory-free, in cp's terms
  bool fits = false;                     ///< the memory-free optimum fits the limit
  Cost bound = -kInfCost;                ///< proven lower bound of the case's optimum
};

std::string case_name(const BuiltProblem& bp, const ModeClasses& mc, const ClusteredProblem& cp, const Case& c) {
  std::string s;
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r) {
    const auto& reg = bp.recompute_regions[r];
    if (c.region_mode[r] < 0) continue;
    const PNodeIdx cls = cp.class_of[static_cast<size_t>(reg.decision)];
    const size_t i = static_cast<size_t>(std::lower_bound(mc.classes.begin(), mc.classes.end(), cls) - mc.classes.begin());
    const std::string part = fmt::format("{}{}", reg.region, i);
    if (s.find(part + "=") != std::string::npos) continue;
    const RecomputePolicy m = reg.modes[static_cast<size_t>(c.region_mode[r])];
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", part,
                     m == RecomputePolicy::kNone ? "keep" : m == RecomputePolicy::kFull ? "full" : "selective");
  }
  return s;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::optional<SolveResult> solve_recompute_cases(const BuiltProblem& bp, const ClusteredProblem& cp,
                                                 const SolverOptions& so,
                                                 const std::function<double()>& remaining,
                                                 int64_t max_cases) {
  const ModeClasses mc = decision_classes(bp, cp.class_of);
  const int64_t n = mc.cases();
  if (mc.classes.empty() || n > max_cases) return std::nullopt;
  auto say = [&](const std::string& m) {
    if (so.progress) so.progress(m);
  };
  const int64_t limit = bp.problem.usage_limit;
  say(fmt::format("recompute auto: {} decision classes, {} cases", mc.classes.size(), n));
  const auto t0 = std::chrono::steady_clock::now();
  SolveResult best;
  best.status = SolveStatus::kInfeasible;
  std::vector<Case> cases;
  int64_t min_floor = std::numeric_limits<int64_t>::max();
  // 1. Floors and memory-free optima.
  for (int64_t k = 0; k < n; ++k) {
    Case c;
    c.modes = mc.modes_of(k);
    c.region_mode = region_modes(bp, cp.class_of, mc, c.modes);
    c.floor = memory_floor_with_modes(bp, c.region_mode);
    min_floor = std::min(min_floor, c.floor);
    if (c.floor > limit) {
      c.bound = kInfCost;  // proven: no plan of this case fits
      cases.push_back(std::move(c));
      continue;
    }
    Problem relaxed = cp.problem;
    relaxed.usage_limit = -1;
    fix_region_modes(bp, c.region_mode, cp.class_of, relaxed);
    SolverOptions ro = so;
    ro.progress = nullptr;
    ro.warm_start.clear();
    ro.time_limit_s = remaining() / static_cast<double>(2 * (n - k));
    c.relaxed = solve(relaxed, ro);
    c.bound = c.relaxed.lower_bound;
    if (!c.relaxed.choice.empty()) {
      c.fits = peak_usage(bp.problem, cp.expand(c.relaxed.choice)) <= limit;
      if (c.fits && c.relaxed.objective < best.objective) {
        best = c.relaxed;
        best.status = SolveStatus::kFeasible;
      }
    }
    cases.push_back(std::move(c));
  }
  const double t_relaxed = since(t0);
  // 2. Cases that could still beat the best plan: solved with the limit, cheapest bound first,
  // each cut off at the best plan found so far.
  std::vector<size_t> open;
  for (size_t i = 0; i < cases.size(); ++i)
    if (!cases[i].fits && cases[i].bound < best.objective) open.push_back(i);
  std::stable_sort(open.begin(), open.end(), [&](size_t a, size_t b) { return cases[a].bound < cases[b].bound; });
  for (size_t i = 0; i < cases.size(); ++i)
    say(fmt::format("  case {}: floor {:.2f} GiB, memory-free {}{}", case_name(bp, mc, cp, cases[i]),
                    static_cast<double>(cases[i].floor) / (1 << 30),
                    cases[i].relaxed.choice.empty() ? std::string("-") : fmt::format("{:.1f} us", cases[i].relaxed.objective),
                    cases[i].floor > limit ? " (infeasible)" : cases[i].fits ? " (fits)" : ""));
  const auto t1 = std::chrono::steady_clock::now();
  std::optional<ExactTiedProblem> et;
  bool et_tried = false;
  for (size_t j = 0; j < open.size(); ++j) {
    Case& c = cases[open[j]];
    if (!(c.bound < best.objective)) continue;
    SolverOptions mo = so;
    mo.warm_start.clear();
    mo.cutoff = std::min(so.cutoff, best.objective);
    mo.time_limit_s = remaining() / static_cast<double>(open.size() - j);
    SolveResult r;
    bool exact = cp.memory_exact;
    if (exact) {
      Problem p = cp.problem;
      fix_region_modes(bp, c.region_mode, cp.class_of, p);
      r = solve(p, mo);
    } else {
      if (!et_tried) {
        et_tried = true;
        try {
          et = exact_memory_tied_problem(bp.problem, cp);
        } catch (const std::invalid_argument& e) {
          say(std::string("no exact tied memory model: ") + e.what());
        }
      }
      if (et) {
        ExactTiedProblem e = *et;
        fix_region_modes(bp, c.region_mode, cp.class_of, e.problem);
        r = solve_exact_tied(e, mo);
        exact = true;
      } else {
        Problem p = cp.problem;
        fix_region_modes(bp, c.region_mode, cp.class_of, p);
        r = solve(p, mo);  // over-estimated memory: its plans fit, its bound holds only for them
      }
    }
    if (exact) c.bound = std::max(c.bound, r.status == SolveStatus::kInfeasible ? kInfCost : r.lower_bound);
    say(fmt::format("  case {}: {} {}, bound {:.1f} us", case_name(bp, mc, cp, c), solve_status_name(r.status),
                    r.choice.empty() ? std::string("no plan") : fmt::format("{:.1f} us", r.objective), c.bound));
    if (!r.choice.empty() && r.objective < best.objective) {
      best = r;
      best.status = SolveStatus::kFeasible;
    }
  }
  // The proven bound: the least over the cases (a case never solved with the limit keeps its
  // memory-free bound, which is at or above the best plan when it was skipped).
  Cost bound = kInfCost;
  // (A case whose memory-free plan fits is bounded by that solve's bound, not its plan: the
  // plan is proven optimal only when the two meet.)
  for (const Case& c : cases) bound = std::min(bound, c.bound);
  SolveResult out = best;
  out.method = "recompute cases";
  out.phase_seconds = {{"cases relaxed", t_relaxed}, {"cases memory", since(t1)}};
  if (out.choice.empty()) {
    const bool all_infeasible = bound >= kInfCost;
    out.status = all_infeasible ? SolveStatus::kInfeasible : SolveStatus::kTimedOut;
    out.lower_bound = bound;
    out.min_peak_usage = all_infeasible ? min_floor : -1;
    out.min_peak_proven = false;
    return out;
  }
  out.lower_bound = std::min(bound, out.objective);
  out.gap = (out.objective - out.lower_bound) / std::max(std::abs(out.objective), 1e-9);
  out.status = out.gap <= std::max(so.mip_gap, kProofTolerance) ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  out.peak_usage = peak_usage(bp.problem, cp.expand(out.choice));
  return out;
}

}  // namespace autoshard

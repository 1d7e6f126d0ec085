#include "planner/tied_solve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <functional>
#include <stdexcept>
#include <string>

#include "planner/clock.h"
#include "planner/cp_memory.h"
#include "planner/exact_tied.h"
#include "planner/recompute.h"
#include "planner/recompute_modes.h"

namespace autoshard {
namespace {

/// Time for the minimal-peak search once the memory floor has proven a budget infeasible: it
/// only improves the upper bound stated beside the proven lower bound.
constexpr double kMinPeakSeconds = 4.0;
/// Share of the memory-limited solve's time for the exact tied model's search (exact_tied.h).
constexpr double kExactTiedShare = 0.8;
/// With --recompute auto under a binding limit: share of the exact tied model's time for the
/// recompute-none solve that warm-starts the auto one.
constexpr double kKeepFirstShare = 0.25;


/// Largest usage any assignment could reach at any time point: if it fits, the memory limit
/// cannot bind and the solver may drop it (an exact simplification).
int64_t peak_upper_bound(const Problem& p) {
  std::vector<int64_t> usage;
  usage.reserve(p.nodes.size());
  for (const ProblemNode& n : p.nodes) usage.push_back(*std::max_element(n.usages.begin(), n.usages.end()));
  return peak_of_usages(p, usage);
}

/// The device-memory relaxation of a problem with parameter-memory constraints: every node but
/// their shadows (problem_builder.cc: copies of the parameter nodes at private time points,
/// tied by kMemoryTieSlot edges from a parameter) uses nothing, so the only memory rows left are the
/// parameter-memory ones, which are the user's constraints and never relaxed.  A relaxed
/// optimum that fits the device limit is optimal.  Before, a parameter-memory constraint kept
/// every device-memory row in the first solve (with the tied layers' over-estimated usages):
/// AutoParallel's LLaMA-3 8B on 8x8 took 60 s in the MIP although its optimum uses 18 of 75
/// GiB (docs/benchmarks.md, "Traced graphs").
void relax_device_memory(const Graph& g, const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                         Problem& p) {
  std::vector<char> shadow(p.nodes.size(), 0);
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const BuiltProblem::EdgeOrigin& o = bp.edge_origin[k];
    if (o.slot == kMemoryTieSlot && g.node(o.consumer).kind == NodeKind::kParameter)
      shadow[static_cast<size_t>(class_of[static_cast<size_t>(bp.edges[k].v)])] = 1;
  }
  for (size_t v = 0; v < p.nodes.size(); ++v)
    if (!shadow[v]) std::fill(p.nodes[v].usages.begin(), p.nodes[v].usages.end(), 0);
}

/// The memory-limited solve on the exact tied model (exact_tied.h), with kExactTiedShare of the
/// seconds `remaining()` leaves.  keep_first (--recompute auto): a recompute-none solve of the
/// same model (forbid_recomputation) first takes kKeepFirstShare of them; its plan is a plan of
/// the auto model and starts that search, so auto never ends above none (llama3-70b 4x8: the
/// auto search alone ended at 1065.3 ms, keeping everything gives 1052.9 ms;
/// docs/benchmarks.md, "Round 6").  Throws std::invalid_argument when there is no exact model.
SolveResult solve_exact_tied_model(const BuiltProblem& bp, const ClusteredProblem& cp, bool keep_first,
                                   SolverOptions eo, const std::function<double()>& remaining,
                                   const std::function<void(const std::string&)>& say) {
  const ExactTiedProblem et = exact_memory_tied_problem(bp.problem, cp);
  // Most of the time: what is left serves the over-estimating model's solve, which proves
  // infeasibility (or finds nothing either) when this finds no plan.
  eo.time_limit_s = remaining() * kExactTiedShare;
  SolveResult kept;
  if (keep_first) {
    ExactTiedProblem keep = et;
    if (forbid_recomputation(bp, cp.class_of, keep.problem)) {
      SolverOptions ko = eo;
      ko.time_limit_s = eo.time_limit_s * kKeepFirstShare;
      kept = solve_exact_tied(keep, ko);
      if (!kept.choice.empty()) {
        say(fmt::format("recompute auto: keeping every activation gives {:.1f} us", kept.objective));
        eo.warm_start = et.extend(kept.choice);
      }
      eo.time_limit_s = remaining() * kExactTiedShare;
    }
  }
  SolveResult r = solve_exact_tied(et, eo);
  if (!kept.choice.empty() && (r.choice.empty() || kept.objective < r.objective)) {
    // The warm start did not survive the auto model's reductions: keep's plan stands, under
    // the auto model's bound.
    r.choice = kept.choice;
    r.objective = kept.objective;
    r.peak_usage = kept.peak_usage;
    r.lower_bound = std::min(r.lower_bound, r.objective);
    r.status = SolveStatus::kFeasible;
  }
  return r;
}

/// The memory-limited solve of the joint model: on the exact tied model where the tie
/// over-estimates, else (or when it finds nothing) on cp.problem, untied to prove infeasibility
/// (cp is replaced then); the relaxed bound joins the result's.
SolveResult solve_memory_limited(const BuiltProblem& bp, ClusteredProblem& cp, const PlannerOptions& options_,
                                 SolverOptions so, const std::function<double()>& remaining,
                                 const std::function<void(const std::string&)>& say, Cost relaxed_bound,
                                 double& t_cluster) {
  SolveResult r;
  // Where the tied memory model over-estimates, the memory-limited solve works on its exact
  // model instead (exact_tied.h): plans that the over-estimate would reject stay open
  // (llama3-8b 2x8 at 20 GiB: 2 % faster) and the solve's bounds hold for every tied plan.
  bool exact = cp.memory_exact, solved = false;
  if (!exact) {
    try {
      r = solve_exact_tied_model(bp, cp, options_.recompute == RecomputePolicy::kAuto, so, remaining, say);
      solved = exact = !r.choice.empty();
    } catch (const std::invalid_argument& e) {
      say(std::string("no exact tied memory model: ") + e.what());
    }
  }
  if (!solved) {
    so.time_limit_s = remaining();
    r = solve(cp.problem, so);
  }
  if (r.status == SolveStatus::kInfeasible && !cp.memory_exact) {
    // The tied memory model over-estimates: only the untied problem can prove infeasibility.
    auto t2 = std::chrono::steady_clock::now();
    cp = identity_cluster(bp);
    t_cluster += seconds_since(t2);
    so.time_limit_s = remaining();
    so.warm_start.clear();
    r = solve(cp.problem, so);
  }
  if (!r.choice.empty()) {
    if (!exact && r.status == SolveStatus::kOptimal)
      r.status = SolveStatus::kFeasible;  // optimal only for the over-estimated memory
    if (relaxed_bound > r.lower_bound || !exact) r.lower_bound = relaxed_bound;
    r.gap = (r.objective - r.lower_bound) / std::max(std::abs(r.objective), 1e-9);
    if (r.gap <= std::max(options_.mip_gap, kProofTolerance)) r.status = SolveStatus::kOptimal;
  }
  return r;
}

}  // namespace

TiedSolve solve_tied(const TiedSolveInput& in) {
  const BuiltProblem& bp = in.bp;
  const PlannerOptions& options_ = in.options;
  const bool has_shadows = in.has_shadows;
  auto t1 = std::chrono::steady_clock::now();
  bool memory_may_bind = bp.problem.usage_limit >= 0 &&
                         (has_shadows || peak_upper_bound(bp.problem) > bp.problem.usage_limit);
  const auto deadline = in.deadline;
  auto remaining = [&] {
    return std::max(0.5, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
  };
  SolverOptions so;
  so.progress = options_.progress;
  auto say = [&](const std::string& m) {
    if (options_.progress) options_.progress(m);
  };
  so.mip_gap = options_.mip_gap;
  so.threads = options_.threads;
  so.cutoff = options_.cutoff_us;
  so.bound_only = in.relaxed_only;  // a dual solve wants its bound, not the long search
  so.work_limited = options_.work_limited;
  if (in.message_passing_iterations > 0) so.message_passing_iterations = in.message_passing_iterations;

  // Memory is handled by relaxation first: solve without the device's usage limit (every
  // reduction applies); if the optimum fits, it is also optimal for the limited problem.
  // Otherwise solve again with memory, keeping the relaxed optimum as a lower bound.
  // Parameter-memory constraints live in the usage limit (their shadows' rows), so they are
  // never relaxed: relax_device_memory keeps them alone.
  TiedSolve out;
  ClusteredProblem& cp = out.cp;
  cp = !options_.cluster ? identity_cluster(bp)
       : in.ties      ? cluster_problem(bp, *in.ties)
                      : cluster_problem(in.graph, bp);
  double& t_cluster = out.cluster_seconds;
  t_cluster = seconds_since(t1);
  // The memory floor: every node at its least usage.  When even that exceeds the limit, no plan
  // fits and the floor is a proven lower bound on the smallest peak, found without a solve.
  // Parameter-memory shadows scale usages, so the floor means nothing with them.
  int64_t& peak_floor = out.peak_floor;
  std::vector<StrategyIdx> least;
  if (bp.problem.usage_limit >= 0 && !has_shadows) {
    if (in.known_peak_floor >= -1 && in.known_peak_floor <= bp.problem.usage_limit) {
      peak_floor = in.known_peak_floor;  // fits: `least` is not needed
    } else {
      least = least_usage_layout(bp);
      peak_floor = peak_usage(bp.problem, least);
    }
  }
  SolveResult& r = out.r;
  if (peak_floor > bp.problem.usage_limit) {
    say(fmt::format("no plan fits: every node at its least memory still peaks at {} bytes",
                    peak_floor));
    r.status = SolveStatus::kInfeasible;
    r.method = "memory floor";
    r.objective = kInfCost;
    r.lower_bound = kInfCost;
    r.gap = 0;
    if (in.relaxed_only) {
      out.fits = false;  // the caller asks whether anything fits: nothing does
      return out;
    }
    if (evaluate_cost(bp, least) < kInfCost) {
      r.min_peak_usage = peak_floor;  // the floor is reached: proven minimum
      r.min_peak_proven = true;
    } else {
      // Edges forbid the least-usage layout: the tied problem's minimal-peak search gives an
      // upper bound (its memory model never under-estimates), within a few seconds.
      SolverOptions mo = so;
      mo.time_limit_s = std::min(remaining(), kMinPeakSeconds);
      mo.warm_start.clear();
      const SolveResult m = solve(cp.problem, mo);
      r.min_peak_usage = m.min_peak_usage;
      r.min_peak_proven = m.min_peak_proven && cp.memory_exact;
      r.phase_seconds = m.phase_seconds;
    }
  } else {
    Problem relaxed_problem = cp.problem;
    if (has_shadows) relax_device_memory(in.graph, bp, cp.class_of, relaxed_problem);
    else relaxed_problem.usage_limit = -1;
    // Exact without device memory, unless memory is priced (recomputation then buys bytes).
    const bool keep_all = options_.boundary_memory_price <= 0;
    if (keep_all) keep_all_activations(bp, cp.class_of, relaxed_problem);
    // When memory may bind, the relaxed solve gets half of the time: the second solve needs room.
    so.time_limit_s = memory_may_bind ? remaining() / 2 : remaining();
    if (!in.warm_start.empty() && static_cast<PNodeIdx>(in.warm_start.size()) == bp.problem.num_nodes())
      so.warm_start = cp.restrict(in.warm_start);
    say(fmt::format("built {} nodes, {} edges; tied into {} nodes", bp.problem.num_nodes(),
                    bp.edges.size(), cp.problem.num_nodes()));
    SolverOptions relaxed_so = so;
    relaxed_so.messages = in.messages;  // the memory-free solve only: its problem is the same shape each time
    relaxed_so.bound_only = relaxed_so.bound_only || in.quick_relaxed;
    if (keep_all) lower_kept_choice(bp, cp.class_of, relaxed_so.warm_start);
    if (in.quick_relaxed && options_.work_limited) relaxed_so.message_passing_iterations = kQuickRelaxedIterations;
    r = solve(relaxed_problem, relaxed_so);
    out.clock_stopped = r.clock_stopped;
    if (keep_all) lift_kept_choice(bp, cp.class_of, cp.problem, r.choice);
    bool relaxed = memory_may_bind;
    if (relaxed && !r.choice.empty() &&
        peak_usage(bp.problem, cp.expand(r.choice)) <= bp.problem.usage_limit)
      relaxed = false;  // the relaxed optimum fits: done
    if (relaxed && in.relaxed_only) {
      // The caller wants the memory-free optimum and its bound only (a valid lower bound
      // under the limit too); its plan does not fit.
      out.fits = false;
      relaxed = false;
    }
    if (relaxed && r.lower_bound >= options_.cutoff_us) {
      // Even without memory nothing beats the cutoff: stop.  The memory-free choice does not
      // fit, so there is no plan, only the bound.
      relaxed = false;
      r.choice.clear();
      r.objective = kInfCost;
      r.status = SolveStatus::kTimedOut;
    }
    if (relaxed) {
      say(fmt::format("the memory-free optimum ({}) does not fit: solving with the memory limit",
                      r.choice.empty() ? std::string("none") : fmt::format("{:.1f} us", r.objective)));
      Cost relaxed_bound = r.choice.empty() ? -kInfCost : r.lower_bound;
      so.time_limit_s = remaining();
      auto phases = r.phase_seconds;
      // Recompute auto: case by case over the decision classes' modes (recompute_modes.h).
      std::optional<SolveResult> by_cases;
      if (options_.recompute == RecomputePolicy::kAuto) by_cases = solve_recompute_cases(bp, cp, so, remaining);
      if (by_cases) {
        r = std::move(*by_cases);
        if (r.status == SolveStatus::kInfeasible) {
          // Every case's floor exceeds the limit: the least of them bounds the peak from below.
          peak_floor = std::max(peak_floor, r.min_peak_usage);
          r.min_peak_usage = -1;
          r.objective = kInfCost;
          r.gap = 0;
        }
      } else {
        r = solve_memory_limited(bp, cp, options_, so, remaining, say, relaxed_bound, t_cluster);
      }
      for (auto it = phases.rbegin(); it != phases.rend(); ++it)
        r.phase_seconds.insert(r.phase_seconds.begin(), {"relaxed " + it->first, it->second});
    }
  }
  out.clock_stopped = out.clock_stopped || r.clock_stopped || std::chrono::steady_clock::now() >= deadline;
  return out;
}

}  // namespace autoshard

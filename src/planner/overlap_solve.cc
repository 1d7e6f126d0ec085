#include "planner/overlap_solve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "solver/cutting_plane.h"

namespace autoshard {
namespace {

/// The plane plan `x` gives: L(mu) <= a + b . mu with a = A - sum_k W_k and b_k = W_k - H_k.
PlaneCut plane_of(double additive, const OverlapTerms& t) {
  PlaneCut c;
  c.a = additive;
  for (size_t k = 0; k < t.window_us.size(); ++k) {
    c.a -= t.window_us[k];
    c.b.push_back(t.window_us[k] - t.hidden_us[k]);
  }
  return c;
}

void add_phases(std::vector<std::pair<std::string, double>>& into,
                const std::vector<std::pair<std::string, double>>& from) {
  for (const auto& phase : from) {
    auto it = std::find_if(into.begin(), into.end(), [&](const auto& p) { return p.first == phase.first; });
    if (it == into.end()) into.push_back(phase);
    else it->second += phase.second;
  }
}

/// The loop's state: planes met so far, the best plan, the best bound and where it was found.
struct DualState {
  const OverlapModel& m;
  const BuiltProblem& bp;
  std::vector<PlaneCut> cuts;
  OverlapSolve& out;

  /// Evaluates a plan's true step time, keeps it if best (and it fits), adds its plane (a plan
  /// over the memory limit still bounds the memory-free dual function, which is what the
  /// relaxed dual solves maximise); returns its terms.
  OverlapTerms consider(const std::vector<StrategyIdx>& full, bool fits = true) {
    const double additive = evaluate_cost(bp, full);
    OverlapTerms t = overlap_terms(m, bp, full);
    const double step = additive - t.overlapped_total_us;
    if (fits && step < out.objective_us) {
      out.objective_us = step;
      out.choice = full;
    }
    cuts.push_back(plane_of(additive, t));
    return t;
  }
};

}  // namespace

OverlapSolve solve_overlap(const TiedSolveInput& in, const OverlapModel& m) {
  const BuiltProblem& bp = in.bp;
  const size_t keys = m.keys.size();
  auto say = [&](const std::string& msg) {
    if (in.options.progress) in.options.progress(msg);
  };
  std::vector<std::pair<NodeIdx, NodeIdx>> ties;
  if (in.options.cluster) ties = find_layer_ties(in.graph, bp);
  const auto* tie_ptr = in.options.cluster ? &ties : nullptr;
  OverlapSolve out;
  DualState st{m, bp, {}, out};

  // The additive optimum first: a plan (its T is an upper bound), a plane, and the multipliers
  // it prefers (1 where its window hides all its communication, else 0).
  // A cutoff proves nothing about T through the additive solve (A >= T): it runs without one.
  PlannerOptions additive_options = in.options;
  additive_options.cutoff_us = kInfCost;
  // Its bound is of no use (A >= T bounds nothing of T), so a plan message passing leaves
  // unproven is taken as it is rather than proven by the MIP (quick_relaxed): on llama3-405b's
  // pipeline stages that proof took 5-9 s of a 10 s limit.
  if (in.first_solve && in.first_solve->fits) {
    out.last = *in.first_solve;  // the recompute probe made this very solve
  } else {
    TiedSolveInput first{in.graph, bp, additive_options, in.has_shadows, tie_ptr, in.warm_start, in.deadline};
    first.quick_relaxed = true;
    out.last = solve_tied(first);
  }
  out.clock_stopped = out.last.clock_stopped;
  out.solves = 1;
  add_phases(out.phase_seconds, out.last.r.phase_seconds);
  if (out.last.r.choice.empty()) {
    out.status = out.last.r.status;  // infeasible (memory does not depend on the objective)
    return out;
  }
  const int64_t floor = out.last.peak_floor;  // usages do not depend on the multipliers
  std::vector<StrategyIdx> warm = out.last.cp.expand(out.last.r.choice);
  const OverlapTerms ta = st.consider(warm);
  // A given start (the best recipe under --compare, a preloaded plan) is a candidate too: the
  // answer is never slower than it.
  const std::vector<StrategyIdx>& ws = in.warm_start;
  if (static_cast<PNodeIdx>(ws.size()) == bp.problem.num_nodes() &&
      std::all_of(ws.begin(), ws.end(), [](StrategyIdx q) { return q >= 0; }) &&
      evaluate_cost(bp, ws) < kInfCost &&
      (bp.problem.usage_limit < 0 || peak_usage(bp.problem, ws) <= bp.problem.usage_limit))
    st.consider(ws);
  std::vector<double> center(keys);
  for (size_t k = 0; k < keys; ++k) center[k] = ta.hidden_us[k] <= ta.window_us[k] ? 1.0 : 0.0;
  std::vector<double> mu = center;
  for (double& x : mu) x = 0.25 + 0.5 * x;  // inside the box: the extremes make hidden edges (nearly) free, a degenerate problem message passing rarely proves
  double radius = 0.5;
  BuiltProblem scaled = bp;
  // Each dual solve's message passing starts where the previous one ended: the problems differ
  // in costs only, and the messages stay a valid (and near) start.  (Starting the first dual
  // solve from the additive solve's messages did not help: 400 iterations either way on
  // llama3-70b 8x8x8.)
  MessageMemory messages;
  const double tol = std::max(in.options.mip_gap, kProofTolerance);
  int stalled = 0;  // dual solves in a row that did not raise the bound
  // The first dual solve runs even past the deadline (its message passing is bounded by
  // iterations, at least half a second of solver time): without it the plan has no bound at
  // all, and every plan states one.  Under work_limited the solves' count alone ends the loop
  // (the deadline, a safety net, then stops the solves themselves).
  auto in_time = [&] {
    if (out.solves == 1 || std::chrono::steady_clock::now() < in.deadline) return true;
    out.clock_stopped = true;
    return false;
  };
  const int most = in.options.overlap_solves > 0 ? in.options.overlap_solves : kMaxOverlapSolves;
  while (out.solves < most && (in.options.work_limited || in_time())) {
    scale_overlap_costs(m, bp, mu, scaled);
    TiedSolveInput dual{in.graph, scaled, in.options, in.has_shadows, tie_ptr, warm, in.deadline,
                        /*relaxed_only=*/true};
    dual.message_passing_iterations = out.solves == 1 ? kFirstDualIterations : kDualIterations;
    dual.messages = &messages;
    dual.known_peak_floor = floor;
    out.last = solve_tied(dual);
    out.clock_stopped = out.clock_stopped || out.last.clock_stopped;
    ++out.solves;
    add_phases(out.phase_seconds, out.last.r.phase_seconds);
    const SolveResult& r = out.last.r;
    if (r.lower_bound > out.lower_bound_us) {
      out.lower_bound_us = r.lower_bound;
      out.mu = mu;
      center = mu;
      stalled = 0;
    } else {
      radius /= 2;  // no progress: trust the planes only nearer the best multipliers
      ++stalled;
    }
    if (!r.choice.empty()) {
      std::vector<StrategyIdx> x = out.last.cp.expand(r.choice);
      st.consider(x, out.last.fits);
      if (out.last.fits) warm = std::move(x);
    }
    const double scale = std::max(std::abs(out.objective_us), 1e-9);
    const CutMaximum global = maximize_cut_model(st.cuts, keys);
    say(fmt::format("overlap objective, solve {}: step {:.1f} us, bound {:.1f} us, planes allow {:.1f} us",
                    out.solves, out.objective_us, out.lower_bound_us, global.value));
    if (out.objective_us - out.lower_bound_us <= tol * scale) break;  // proven optimal
    if (out.lower_bound_us >= in.options.cutoff_us) break;            // nothing beats the cutoff
    if (global.value - out.lower_bound_us <= 1e-6 * scale) break;      // the dual is solved
    // Twice no better bound: the priced problems' own bounds (message passing's, unproven
    // within its iterations) hold the dual there, and nearer multipliers rarely move it (405B
    // stages: six solves at one bound).
    if (stalled >= kMaxStalledSolves) break;
    std::vector<double> lo(keys), hi(keys);
    for (size_t k = 0; k < keys; ++k) {
      lo[k] = center[k] - radius;
      hi[k] = center[k] + radius;
    }
    mu = maximize_cut_model(st.cuts, keys, lo, hi).mu;
  }
  if (!out.choice.empty()) {
    const OverlapTerms tb = overlap_terms(m, bp, out.choice);
    for (size_t k = 0; k < keys; ++k)
      say(fmt::format("overlap key {}: hideable {:.1f} us, window {:.1f} us, hidden {:.1f} us, multiplier {:.3f}",
                      m.keys[k], tb.hidden_us[k], tb.window_us[k], tb.overlapped_us[k], out.mu.empty() ? -1.0 : out.mu[k]));
  }
  out.lower_bound_us = std::min(out.lower_bound_us, out.objective_us);
  const double gap = (out.objective_us - out.lower_bound_us) / std::max(std::abs(out.objective_us), 1e-9);
  out.status = gap <= tol ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  return out;
}

}  // namespace autoshard

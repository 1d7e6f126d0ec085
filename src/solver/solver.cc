#include "solver/solver.h"

#include <optional>

#include "solver/anytime.h"
#include "solver/elimination.h"
#include "solver/lagrangian.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "solver/greedy.h"
#include "solver/mip.h"
#include "solver/reduce.h"
#include "solver/trws.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

/// Beyond this many Alpa variables CBC cannot finish even its root LP in useful time (measured:
/// 222k variables took minutes), and building the model alone costs seconds and gigabytes.
/// Beyond this many variables CBC rarely proves anything within planner time limits (measured:
/// 57k variables solve in ~0.5 s, 960k do not finish in 100 s); the anytime search is used.
constexpr int64_t kMaxMipVariables = 400'000;
/// Memory-limited problems with more Alpa variables than this get the anytime search first.
constexpr int64_t kAnytimeBeforeMip = 20'000;
/// Share of the anytime search's time spent on its memory-aware bound (LP branch and bound or
/// Lagrangian, anytime.h) when memory rows bind (otherwise the bound reported is the
/// memory-free optimum's).
constexpr double kMemoryBoundShare = 0.4;
/// Exact elimination costing at most this many table operations (~0.05 s) runs before message
/// passing; a dearer one only where message passing does not prove the optimum.  Measured on
/// llama3-70b pipelined on 8x8x8: the first stage's 58-node core eliminates in 1.2e9
/// operations (~1 s) where message passing proves the same optimum in ~0.1 s, once per
/// first-stage size (8 sizes: ~8 of the plan's 16 s).
constexpr double kCheapEliminationWork = 5e7;
/// The dear elimination's work under SolverOptions::work_limited: what a 10 s solve gets
/// otherwise (about 4 s of table operations), fixed so that the answer does not depend on
/// the clock.
constexpr double kWorkLimitedElimination = 4e8;

class PhaseTimer {
 public:
  explicit PhaseTimer(SolveResult& r) : r_(r), t_(Clock::now()) {}
  void end(const char* name) {
    auto now = Clock::now();
    r_.phase_seconds.emplace_back(name, std::chrono::duration<double>(now - t_).count());
    t_ = now;
  }

 private:
  SolveResult& r_;
  Clock::time_point t_;
};

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

/// Sum of per-node and per-edge minima: a valid (weak) lower bound.
Cost trivial_lower_bound(const Problem& p) {
  Cost lb = 0;
  for (const auto& n : p.nodes) lb += *std::min_element(n.costs.begin(), n.costs.end());
  for (const auto& e : p.edges) lb += *std::min_element(e.costs.begin(), e.costs.end());
  return lb;
}

/// Fills min_peak_usage for a problem with no assignment within the usage limit: minimizes
/// the peak over assignments that avoid forbidden choices and pairs (costs ignored).
void solve_min_peak(const Problem& p, const SolverOptions& opt, Clock::time_point deadline,
                    SolveResult& res) {
  Problem q = p;
  for (auto& n : q.nodes)
    for (Cost& c : n.costs) c = c < kInfCost ? 0 : kInfCost;
  for (auto& e : q.edges)
    for (Cost& c : e.costs) c = c < kInfCost ? 0 : kInfCost;
  // Limit 0: every node whose usage can be non-zero is memory-relevant, so reductions only
  // eliminate nodes whose usage is constant (exact for the peak).
  q.usage_limit = 0;
  ReduceOptions ro;
  ro.overflow = false;  // with limit 0 every strategy would overflow
  ro.deadline = Clock::now() + (deadline - Clock::now()) / 3;
  ReducedProblem rq = reduce(q, ro);
  if (rq.infeasible) return;  // forbidden choices alone make it infeasible
  std::vector<MemoryRow> rows = memory_rows(rq.problem, rq.base, false);
  const int64_t lower = min_possible_peak(rq.problem, rows);
  std::vector<StrategyIdx> best;
  if (rq.problem.num_nodes() == 0) {
    best = rq.map_back({});
    res.min_peak_proven = true;
  } else {
    // Greedy start: minimize usage node by node (ignoring costs, as the reduced costs are 0).
    Problem g = rq.problem;
    for (auto& n : g.nodes)
      for (size_t s = 0; s < n.costs.size(); ++s) n.costs[s] = static_cast<Cost>(n.usages[s]);
    g.usage_limit = -1;
    std::vector<StrategyIdx> warm =
        greedy_solve(g, {}, {}, Clock::now() + (deadline - Clock::now()) / 4).choice;
    if (!(evaluate_cost(rq.problem, warm) < kInfCost)) warm.clear();
    MipOptions mo;
    mo.time_limit_s = std::max(0.05, seconds_left(deadline) - 0.05);
    mo.threads = opt.threads;
    mo.progress = opt.progress;
    MipResult m;
    if (alpa_variable_count(rq.problem) <= kMaxMipVariables) m = solve_peak_mip(rq.problem, rows, warm, mo);
    if (!m.choice.empty()) {
      best = m.choice;
    } else if (!warm.empty()) {
      best = warm;
    }
    if (m.status == MipStatus::kOptimal) res.min_peak_proven = true;
    if (m.status == MipStatus::kInfeasible) return;
    if (!best.empty() && rows_peak(rq.problem, rows, best) <= lower) res.min_peak_proven = true;
  }
  if (best.empty()) return;
  res.min_peak_usage = peak_usage(p, rq.map_back(best));
}

}  // namespace

std::string_view solve_status_name(SolveStatus s) {
  switch (s) {
    case SolveStatus::kOptimal: return "optimal";
    case SolveStatus::kFeasible: return "feasible";
    case SolveStatus::kInfeasible: return "infeasible";
    case SolveStatus::kTimedOut: return "timed-out";
  }
  return "?";
}

SolveResult solve(const Problem& p, const SolverOptions& opt) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(std::max(0.0, opt.time_limit_s)));
  if (std::string err = p.validate(); !err.empty()) throw std::invalid_argument("solve: " + err);
  auto say = [&](const std::string& s) {
    if (opt.progress) opt.progress(s);
  };
  SolveResult res;
  PhaseTimer timer(res);
  // The end of a phase's share of the time left (1 / n of it), or under work_limited the
  // deadline itself: a phase then stops on its own limits.
  auto share = [&](int n) { return opt.work_limited ? deadline : Clock::now() + (deadline - Clock::now()) / n; };

  // 1. Reductions.
  ReduceOptions ro;
  ro.deadline = share(3);  // the search needs the rest
  ReducedProblem rp = opt.skip_reductions ? identity_reduction(p) : reduce(p, ro);
  const Problem& r = rp.problem;
  res.reduced_nodes = r.num_nodes();
  res.reduced_edges = r.num_edges();
  timer.end("reduce");
  say("reduced to " + std::to_string(r.num_nodes()) + " nodes, " + std::to_string(r.num_edges()) +
      " edges");
  auto infeasible = [&](const char* why) {
    res.status = SolveStatus::kInfeasible;
    res.method = why;
    res.choice.clear();
    res.objective = kInfCost;
    res.lower_bound = kInfCost;
    res.gap = 0;
    res.peak_usage = 0;
    auto t = Clock::now();
    solve_min_peak(p, opt, deadline, res);
    res.phase_seconds.emplace_back("min peak", std::chrono::duration<double>(Clock::now() - t).count());
    return res;
  };
  if (rp.infeasible) return infeasible("reductions");
  std::vector<MemoryRow> rows = memory_rows(r, rp.base, true);
  if (r.usage_limit >= 0 && min_possible_peak(r, rows) > r.usage_limit)
    return infeasible("memory bound");

  std::optional<std::vector<StrategyIdx>> by_elimination;
  // No memory row can bind: the pairwise problem alone decides; exact elimination, cheap ones
  // first (the dear ones after message passing, below).  Up to about a third of the time left
  // (~1e8 table operations per second).
  const double elimination_work =
      opt.work_limited ? kWorkLimitedElimination : std::clamp(seconds_left(deadline) * 0.33e8, 4e8, 1e10);
  const bool try_elimination = r.num_nodes() > 0 && rows.empty();
  auto eliminate_within = [&](double work) {
    EliminationOptions eo;
    eo.deadline = deadline;
    eo.max_work = static_cast<int64_t>(work);
    EliminationStats es;
    by_elimination = solve_by_elimination(r, eo, &es);
    if (!by_elimination)
      say("elimination within " + std::to_string(static_cast<int64_t>(work)) + " operations gave up after " +
          std::to_string(es.eliminated) + " nodes at a table of " + std::to_string(static_cast<int64_t>(es.largest_table)) +
          " entries");
    if (by_elimination && evaluate_cost(r, *by_elimination) >= kInfCost) by_elimination.reset();
  };
  if (try_elimination) eliminate_within(std::min(kCheapEliminationWork, elimination_work));
  // 2. Warm start.
  std::vector<StrategyIdx> best;
  Cost best_obj = kInfCost;
  Cost lagrangian_bound = -kInfCost;
  if (r.num_nodes() > 0 && !rows.empty()) {
    // Memory rows bind: price them (Lagrangian relaxation solved by elimination) for a feasible
    // start and a lower bound; half of the remaining time at most.
    LagrangianResult lr = lagrangian_memory(r, rows, share(2));
    if (lr.applicable) {
      if (lr.exact) lagrangian_bound = lr.lower_bound;
      if (!lr.best_feasible.empty()) best = lr.best_feasible, best_obj = lr.best_cost;
      say("lagrangian" + std::string(lr.exact ? "" : " heuristic") + ": " + std::to_string(lr.iterations) +
          " iterations" + (lr.exact ? ", bound " + std::to_string(lr.lower_bound + rp.constant_cost) : std::string()) +
          (best.empty() ? std::string(", nothing feasible") : ", feasible " + std::to_string(best_obj + rp.constant_cost)));
    }
  }
  auto consider = [&](const GreedyResult& g) {
    if (g.memory_ok && g.cost < best_obj) best_obj = g.cost, best = g.choice;
  };
  if (r.num_nodes() > 0 && !by_elimination) {
    // The heuristic gets a quarter of the remaining time, or all of it when no MIP follows.
    const bool mip_follows = alpa_variable_count(r) <= kMaxMipVariables;
    const auto greedy_deadline =
        mip_follows ? share(4) : deadline - std::chrono::milliseconds(20);
    if (opt.warm_start.size() == sz(p.num_nodes())) {
      std::vector<StrategyIdx> fwd = rp.map_forward(opt.warm_start);
      if (!fwd.empty()) consider(greedy_solve(r, rows, fwd, greedy_deadline));
    }
    if (!best.empty()) consider(greedy_solve(r, rows, best, greedy_deadline));  // polish the priced plan
    // A bound-only solve that has a plan already (the overlap dual's, from the previous one's)
    // skips the greedy from scratch: it reduces the problem a second time (reduced_greedy),
    // and on llama3-8b 2x4x8 and llama3-70b 8x8x8 (pp) it changed no plan or bound of the
    // pipeline, for 41 % and 5 % of their planning time (docs/benchmarks.md).
    if (!(opt.bound_only && rows.empty() && best_obj < kInfCost)) consider(greedy_solve(r, rows, {}, greedy_deadline));
  }
  timer.end("warm start");
  if (best_obj < kInfCost) say("warm start: " + std::to_string(best_obj + rp.constant_cost));

  // 3. Exact search.
  Cost lb = std::max(trivial_lower_bound(r), lagrangian_bound);
  bool by_message_passing = false;
  if (r.num_nodes() > 0 && rows.empty() && !by_elimination) {
    // No memory row can bind: message passing proves most such problems optimal at once; its
    // labeling and bound help the MIP where it cannot.  A tenth of the time at most.
    const MessagePassingResult mp =
        solve_by_message_passing(r, share(10), kProofTolerance, opt.message_passing_iterations, /*stall=*/200,
                                 opt.messages, &rp);
    res.clock_stopped = res.clock_stopped || mp.clock_stopped;
    if (mp.cost < best_obj) best_obj = mp.cost, best = mp.choice;
    if (mp.lower_bound > lb && mp.lower_bound < kInfCost) lb = mp.lower_bound;
    by_message_passing = mp.proven;  // best is no dearer than its plan, so proven too
    say("message passing: " + std::to_string(mp.iterations) + " iterations, bound " +
        std::to_string(mp.lower_bound + rp.constant_cost) + ", plan " + std::to_string(mp.cost + rp.constant_cost) +
        (mp.proven ? " (proven)" : ""));
    if (!by_message_passing && elimination_work > kCheapEliminationWork) eliminate_within(elimination_work);
  }
  // The anytime (IOPDDL) search works on a plain Problem: the reductions' constant usage is
  // added back as single-strategy nodes so that its memory checks see it, and its answer is
  // accepted only if the memory rows agree.
  auto run_anytime = [&](double seconds) {
    Problem with_base = r;
    for (const BaseUsage& b : rp.base) {
      if (b.usage == 0 || b.end <= b.start) continue;
      with_base.nodes.push_back({"", {0}, {b.usage}, b.start, b.end});
    }
    AnytimeOptions ao;
    ao.time_limit_s = seconds;
    ao.threads = std::max(1, opt.threads);
    ao.cutoff = opt.cutoff - rp.constant_cost;
    if (!rows.empty()) ao.memory_bound_share = kMemoryBoundShare;
    if (opt.progress) ao.progress = [&](const std::string& m) { opt.progress(m); };
    AnytimeResult ar = solve_anytime(with_base, ao);
    res.clock_stopped = true;  // it searches until its time is up
    if (ar.feasible) {
      std::vector<StrategyIdx> x(ar.choice.begin(), ar.choice.begin() + r.num_nodes());
      const Cost c = evaluate_cost(r, x);
      if ((r.usage_limit < 0 || rows_peak(r, rows, x) <= r.usage_limit) && c < best_obj)
        best_obj = c, best = std::move(x);
    }
    // Its bound (TRW-S dual / edge split, memory-free) is a valid lower bound; checked
    // against exact elimination optima in elimination_test.cc.
    if (ar.lower_bound > lb && ar.lower_bound < kInfCost) lb = ar.lower_bound;
  };
  bool proven = false;
  if (r.num_nodes() == 0) {
    best_obj = 0;
    proven = true;
    res.method = "reductions";
  } else if (by_elimination) {
    best = *by_elimination;
    best_obj = evaluate_cost(r, best);
    proven = true;
    res.method = "elimination";
    say(res.method);
  } else if (by_message_passing) {
    proven = true;
    res.method = "message passing (bound met)";
  } else if (alpa_variable_count(r) > kMaxMipVariables) {
    // Too large for the MIP: the anytime search of the IOPDDL solver (memory-penalised
    // message passing + LNS + repair) improves the warm start until the deadline.
    res.method = "anytime search (too large for the MIP)";
    say(res.method);
    if (seconds_left(deadline) > 0.2 && lb + rp.constant_cost < opt.cutoff && !opt.bound_only)
      run_anytime(seconds_left(deadline) - 0.1);
  } else if (opt.bound_only && rows.empty()) {
    res.method = "message passing (bound only)";
  } else if (seconds_left(deadline) > 0.05) {
    if (!rows.empty() && alpa_variable_count(r) > kAnytimeBeforeMip && seconds_left(deadline) > 1) {
      // Memory rows make large MIPs slow to find incumbents: the anytime search gets a third
      // of the time first and hands its plan to CBC as the warm start.
      run_anytime(seconds_left(deadline) / 3);
      say("anytime search before the MIP: " + std::to_string(best_obj + rp.constant_cost));
    }
    MipOptions mo;
    mo.time_limit_s = seconds_left(deadline) - 0.05;
    mo.mip_gap = opt.mip_gap;
    mo.threads = opt.threads;
    mo.progress = opt.progress;
    // No cutoff here: CBC given one (setCutoff) took 3x longer on planner problems (llama3-8b
    // 32x2: 1.0 s -> 2.7-3.6 s), and the MIP path is the fast one.
    MipResult m = solve_cost_mip(r, rows, best, mo);
    res.mip_variables = m.variables;
    res.method = "mip";
    if (m.status == MipStatus::kInfeasible) {
      timer.end("mip");
      return infeasible("mip");
    }
    if (!m.choice.empty()) {
      Cost c = evaluate_cost(r, m.choice);
      const bool fits = r.usage_limit < 0 || rows_peak(r, rows, m.choice) <= r.usage_limit;
      if (fits && c < best_obj) best_obj = c, best = m.choice;
    }
    if (m.bound > lb) lb = m.bound;
    if (m.status == MipStatus::kOptimal) proven = true;
    if (m.status == MipStatus::kFeasible || m.status == MipStatus::kNoSolution) res.clock_stopped = true;
    if (m.root_integral) res.method = "mip (integral LP relaxation)";
  }
  timer.end("mip");

  // 4. Map back.
  if (best.empty() && r.num_nodes() > 0) {
    res.status = SolveStatus::kTimedOut;
    res.clock_stopped = true;
    res.lower_bound = lb + rp.constant_cost;
    res.method = "none";
    timer.end("map back");
    return res;
  }
  res.choice = rp.map_back(best);
  res.objective = evaluate_cost(p, res.choice);
  res.peak_usage = peak_usage(p, res.choice);
  res.lower_bound = proven && opt.mip_gap <= 0 ? res.objective : std::min(lb + rp.constant_cost, res.objective);
  res.gap = (res.objective - res.lower_bound) / std::max(std::abs(res.objective), 1e-9);
  if (res.gap <= std::max(opt.mip_gap, kProofTolerance)) proven = true;
  res.status = proven ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  if (res.method == "mip" && !proven && !best.empty()) res.method = "mip (stopped)";
  if (Clock::now() >= deadline) res.clock_stopped = true;  // some phase may have been cut
  timer.end("map back");
  return res;
}

}  // namespace autoshard

/// StageBuilder::price_memory: the Lagrangian bound of a stage under a memory budget.
///
/// A plan that fits the budget B with f microbatches in flight has its usage at the
/// forward/backward boundary t* no above B (inflight_memory.h boundary_usage; a byte per kept
/// node of rounding aside).  Keeping that one row and pricing it at lambda >= 0 per byte,
///     min T  >=  min_x [T(x) + lambda U(x)] - lambda B    for every lambda,
/// and the priced problem has no memory limit: a memory-free stage solve
/// (PlannerOptions::boundary_memory_price) whose proven bound gives the right-hand side.  Its
/// recomputation is free to buy priced bytes.  lambda is chosen by Kelley's cutting planes
/// on the dual's one variable: each priced plan x_i is a plane T_i + lambda (U_i - B) above the
/// dual function, the next lambda is where the lowest of them peaks.  The priced plans that
/// fit are plans too (Everett: each is optimal for its own usage at t*), so the dual also
/// searches the primal, without the memory-limited solve's time limit.
///
/// Two memory models.  The problem with recomputation nodes counts a view of an activation
/// apart from its base, the one without aliases it (problem_builder.h view_aliases), and a
/// stage's plan may come from either (if-needed escalates to auto only where memory binds
/// without recomputation).  A bound in one is no bound of the other's plans (llama3-405b's
/// first 4-layer stage: 168.1 ms priced with recomputation, above a 164.7 ms plan of the model
/// without that fits), so each model is priced and the least of their bounds is kept; a model
/// whose least usages at t* exceed the budget has no plan that fits and bounds nothing.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>

#include "pipeline/backward_split.h"
#include "planner/inflight_memory.h"
#include "planner/parallel_for.h"
#include "pipeline/stage_builder.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The relative gap a priced floor's solve stops at: its proven bound is the floor, so a gap
/// costs at most this share of it and saves the proof's last steps.
constexpr double kPricedFloorGap = 0.005;

/// The overlap dual's solves per priced floor (8 otherwise, overlap_solve.h).  A floor is its
/// solves' proven bound, valid after any of them; the later ones raise it a little for much of
/// the planning (llama3-405b 8x8x8 `plan --hardware h100-500w`, in one hour: 3 solves 15 %
/// less CPU than 8, the same plan, the bound 23.781 -> 23.218 s; 4 solves 23.628 s for 10 %;
/// 2 solves 22.106 s).  The bound is reported, not targeted; the plan's time is.
constexpr int kPricedFloorSolves = 3;

/// The overlap dual's solves per priced solve of a Kelley chain (8 otherwise, overlap_solve.h):
/// each priced plan is a plane and its bound one point of the dual, which the chain's next
/// prices refine, so the dual's last solves buy little.  Measured on llama3-405b 8x8x8
/// (`plan --hardware h100-500w`, idle): 140 s -> 101 s wall; step 28.727 s -> 28.598 s, bound
/// 23.791 s -> 23.756 s (2 solves: 93 s, 28.603 s, the same bound).
constexpr int kPricedOverlapSolves = 3;

/// One priced plan as a plane of the dual function: T + lambda (U - B).
struct Plane {
  double t = 0;  ///< its step T(x), us
  double u = 0;  ///< its usage at t*, bytes
  double at(double lambda, double B) const { return t + lambda * (u - B); }
};

/// Where min_i planes_i peaks over lambda >= 0, and that peak; lambda = -1 when the planes
/// leave it unbounded (no plane fits yet: every slope is positive).
std::pair<double, double> peak_of(const std::vector<Plane>& planes, double B) {
  auto model = [&](double l) {
    double m = kInf;
    for (const Plane& p : planes) m = std::min(m, p.at(l, B));
    return m;
  };
  bool down = false;
  for (const Plane& p : planes) down = down || p.u <= B;
  if (!down) return {-1, kInf};
  double best_l = 0, best = model(0);
  for (const Plane& a : planes)
    for (const Plane& b : planes)
      if (a.u > B && b.u <= B) {
        const double l = (b.t - a.t) / (a.u - b.u);  // a.at(l) == b.at(l)
        if (l > 0 && model(l) > best) best = model(l), best_l = l;
      }
  return {best_l, best};
}

/// The least usage the nodes live at t* can have together: above the budget, nothing fits.
double least_usage(const Problem& p, const std::vector<PNodeIdx>& live) {
  double floor = 0;
  for (PNodeIdx v : live) {
    const auto& u = p.nodes[static_cast<size_t>(v)].usages;
    floor += static_cast<double>(*std::min_element(u.begin(), u.end()));
  }
  return floor;
}

/// The first price of a Kelley chain: the one at which the plan at hand (or, without one, a
/// plan a tenth dearer) would cost as much as the memory-free plan (`free_plane`) does `over`
/// the budget; 0 where it is not over.  The caller counts a pinned recipe's stage (no
/// memory-limited solve, no rank refit) over the budget by its need where its usage at t* is
/// within the budget and it still does not fit (its peak lies past t*: llama3-405b's last
/// stage pinned to fsdp+tp under --float8): the priced plans are its only shardings that save
/// memory.  Unpinned stages have other sources for those (the memory-limited solve, the rank
/// refit's patterns) and keep their plans as they were.
double first_price(const Plane& free_plane, const StageSolve* at_hand, double over) {
  if (over <= 0) return 0;
  const double dearer = at_hand ? std::max(at_hand->microbatch_us - free_plane.t, 0.01 * free_plane.t)
                                : 0.1 * free_plane.t;
  return dearer / over;
}

}  // namespace

StageBuilder::PricedBound StageBuilder::price_memory(StageKind kind, int32_t k, StageMemory mem,
                                                   const StageSolve& relaxed, const StageSolve* at_hand) {
  PricedBound out;
  out.bound = relaxed.lower_bound_us;
  if (mem.budget <= 0 || !relaxed.plan.has_solution) return out;
  const auto t0 = std::chrono::steady_clock::now();
  // The stage's plans come from two memory models that count views differently
  // (problem_builder.h view_aliases): with recomputation (auto, full, the escalated if-needed)
  // and without (if-needed, none).  A bound in one does not hold for the other's plans, so
  // each is priced and the least of the two is the bound.
  // The two models on two threads (each is a chain of solves).
  const RecomputePolicy models[2] = {RecomputePolicy::kAuto, RecomputePolicy::kNone};
  PricedBound priced[2];
  std::exception_ptr failed[2];
  parallel_for(2, popt_.stage_threads, [&](size_t i) {
    try {
      priced[i] = price_model(models[i], mem, relaxed, at_hand);
    } catch (...) {
      failed[i] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  double least = kInf;
  for (const PricedBound& m : priced) {
    if (m.bound < least) out.lambda = m.lambda;  // the binding model's price
    least = std::min(least, m.bound);
    out.solves += m.solves;
    if (m.plan && (!out.plan || m.plan->microbatch_us < out.plan->microbatch_us)) out.plan = m.plan;
  }
  out.bound = std::max(out.bound, least);
  if (opt_.progress)
    say(fmt::format("  stage kind {} with {} layers, memory priced at t* ({} solves): bound {:.3f} us{}, in {:.3f}s",
                    static_cast<int>(kind), k, out.solves, out.bound,
                    out.plan ? fmt::format(", a plan of {:.3f} us fits", out.plan->microbatch_us) : std::string(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  return out;
}

StageBuilder::PricedBound StageBuilder::price_plans(StageKind kind, int32_t k, StageMemory mem,
                                                  const StageSolve& relaxed) {
  const bool mixes = opt_.recompute == RecomputePolicy::kAuto || opt_.recompute == RecomputePolicy::kIfNeeded;
  if (mixes && mem.rank_limit) return price_memory(kind, k, mem, relaxed, nullptr);
  PricedBound out;
  out.bound = relaxed.lower_bound_us;
  if (mem.budget <= 0 || !relaxed.plan.has_solution) return out;
  return price_model(mixes ? RecomputePolicy::kAuto : opt_.recompute, mem, relaxed, nullptr);
}

StageBuilder::PricedBound StageBuilder::price_model(RecomputePolicy model, StageMemory mem, const StageSolve& relaxed,
                                                  const StageSolve* at_hand) {
  PricedBound out;
  const StageGraph& sg = relaxed.sg;
  PlannerOptions eo = stage_options(sg, mem.inflight, mem.budget);
  eo.recompute = model;
  // Every optimizer here takes the stage's pins (PipelineOptions::stage_hook): a pinned
  // recipe's priced plans are its plans, and a choice indexes the pinned problem's strategies.
  auto pinned = [&](ShardingOptimizer& so) -> ShardingOptimizer& {
    if (popt_.stage_hook) popt_.stage_hook(so);
    return so;
  };
  ShardingOptimizer ev(sg.graph, sub_, eo);  // unpriced: the plans' own figures
  pinned(ev);
  const BuiltProblem& ebp = ev.problem();
  const std::vector<PNodeIdx> live = live_at_boundary(sg.graph, ebp);
  // Rounding of the scaled usages: at most a byte per node live at t*.
  const double B = static_cast<double>(mem.budget) + static_cast<double>(live.size());
  // Every node at its least usage: above the budget, no plan of this model fits at all.
  if (least_usage(ebp.problem, live) > B) {
    out.bound = kInf;
    return out;
  }
  out.bound = relaxed.lower_bound_us;
  std::vector<Plane> planes;
  double free_need = 0;  // the memory-free priced plan's need (need_bytes)
  auto priced_solve = [&](double lambda) -> bool {
    PlannerOptions po = stage_options(sg, mem.inflight, 0);
    po.recompute = model;
    po.boundary_memory_price = lambda;
    po.overlap_solves = kPricedOverlapSolves;
    // evaluate() prices graph nodes only (recomputation's and CP buffers' nodes from their
    // own models), so the priced objective is the solver's alone: its bound is what is used.
    po.run_checks = false;
    ShardingOptimizer so(sg.graph, sub_, po);
    const Plan priced = pinned(so).get_solution();
    ++out.solves;
    counted_solve(priced);
    if (!priced.has_solution) return false;
    const std::vector<StrategyIdx> x = so.solution_choice();
    if (std::isfinite(priced.lower_bound_us) && priced.lower_bound_us - lambda * B > out.bound) {
      out.bound = priced.lower_bound_us - lambda * B;
      out.lambda = lambda;
    }
    auto e = std::make_shared<ShardingOptimizer>(sg.graph, sub_, eo);
    pinned(*e);
    auto s = evaluated(std::move(e), relaxed, x, mem.inflight, mem.budget);
    if (!s) return false;
    // The priced usage: at t*, and the gradients summed over the step (price_boundary_usage).
    planes.push_back({s->microbatch_us,
                      static_cast<double>(boundary_usage(sg.graph, ebp, x) + s->deferred_grad_bytes)});
    if (planes.size() == 1) free_need = need_bytes(*s, mem);
    if (fits(*s, mem) && (!out.plan || s->microbatch_us < out.plan->microbatch_us)) out.plan = s;
    return true;
  };
  if (!priced_solve(0)) return out;
  const bool pinned_stage = static_cast<bool>(popt_.stage_hook);
  // A pinned stage that fits at t* but not at its peak is over by its need (first_price).
  const double need_over = out.plan || !pinned_stage ? 0.0 : free_need - static_cast<double>(mem.budget);
  double lambda = first_price(planes.front(), at_hand, std::max(planes.front().u - B, need_over));
  const double tol = std::max(popt_.target_gap / 4, 1e-6);
  for (int i = 0; i < kMaxPricedSolves && lambda > 0; ++i) {
    if (!priced_solve(lambda)) break;
    const auto [next, peak] = peak_of(planes, B);
    if (next < 0 || (pinned_stage && next == 0 && !out.plan)) {
      lambda *= 4;  // nothing fits yet (at t*, or at its peak): price memory higher
      continue;
    }
    const double best = out.plan ? std::min(out.plan->microbatch_us, peak) : peak;
    if (best - out.bound <= tol * best) break;  // the dual (or the plan) is as good as the bound
    if (std::abs(next - lambda) <= 1e-9 * lambda) break;
    lambda = next;
  }
  return out;
}

StageBuilder::PricedFloor StageBuilder::priced_floor(const StageSolve& relaxed, double inflight, double deferred,
                                                   double lambda) {
  PricedFloor out;
  out.floor = kInf;
  const StageGraph& sg = relaxed.sg;
  // The hand-over priced as a cost on its tensors' producers (as the sends are, so the overlap
  // objective may count it as compute to hide communication under: a lower floor, still one).
  std::vector<TensorRef> handed;
  if (deferred > 0) handed = handed_to_weight_grads(sg, step_parts(sg));
  for (RecomputePolicy model : {RecomputePolicy::kAuto, RecomputePolicy::kNone}) {
    PlannerOptions po = stage_options(sg, inflight, 0);
    for (const TensorRef& t : handed) po.output_costs.push_back({sg.graph.node(t.node).name, t.output, 0.0, lambda * deferred});
    po.recompute = model;
    po.boundary_memory_price = lambda;
    po.run_checks = false;
    po.mip_gap = kPricedFloorGap;  // its proven bound is what counts
    po.overlap_solves = kPricedFloorSolves;
    ShardingOptimizer so(sg.graph, sub_, po);
    const Plan priced = so.get_solution();
    counted_solve(priced);
    const int64_t live = static_cast<int64_t>(live_at_boundary(sg.graph, *so.built_problem()).size());
    out.live = std::max(out.live, live);
    out.floor = std::min(out.floor, proven_bound(priced, node_floor(so)) - lambda * static_cast<double>(live));
  }
  return out;
}


}  // namespace autoshard

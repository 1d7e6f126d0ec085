/// The fitted search (pipeline/stage_source.h fitted_search): a stage plan under a budget its
/// memory-free plan does not fit.  The plans at hand (evaluations and a small pinned solve)
/// come first, since on large stages the memory-limited solve meets the time limit and may
/// find nothing cheaper; the solve only looks for a plan cheaper than the best of them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/stage_builder.h"
#include "pipeline/stage_source.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

constexpr double kFitInf = std::numeric_limits<double>::infinity();

/// A memory-limited stage plan over the exact in-flight peak is repaired by recomputing more
/// (StageBuilder::least_recompute).  A repair costing at most this share more than the
/// over-budget plan is kept without a second time-limited solve under a lowered limit: such
/// a repair is near what that solve would find, and the solve is the costliest step.
constexpr double kRepairSlack = 0.05;

/// Whether the recompute policy lets each region choose its mode (least_recompute's mixes).
bool mixes_allowed(const PlannerOptions& opt) {
  return opt.recompute == RecomputePolicy::kIfNeeded || opt.recompute == RecomputePolicy::kAuto;
}

class FittedSearch : public StagePlanSource {
 public:
  explicit FittedSearch(StageSources at_hand) : at_hand_(std::move(at_hand)) {}

  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve* relaxed,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    const StageMemory mem = req.mem;
    const PipelineOptions& popt = cx.builder.pipeline_options();
    std::shared_ptr<StageSolve> best = at_hand(cx, req, *relaxed);
    if (!popt.solve_fitted) {  // the plan at hand, no memory-limited solve
      if (!best) return priced_or_none(cx, req, *relaxed);
      best->lower_bound_us = std::min(relaxed->lower_bound_us, best->microbatch_us);
      return best;
    }
    // The memory row at t* priced: a bound above the memory-free one, and often a plan that
    // fits.  Where that plan is within the target gap of the bound, no memory-limited solve
    // is needed.  A share of a rank (v > 1) is no relaxation: its priced bound is no bound of
    // the stage (nor of the pipeline), only the test that skips the memory-limited solve; its
    // priced plans are plans.
    StageBuilder::PricedBound pb;
    pb.bound = relaxed->lower_bound_us;
    double skip_below = pb.bound;
    if (popt.price_memory) {
      pb = cx.builder.price_memory(req.kind, req.k, mem, *relaxed, best.get());
      skip_below = pb.bound;
      if (!mem.rank_limit) pb.bound = relaxed->lower_bound_us;
    }
    if (pb.plan && (!best || pb.plan->microbatch_us < best->microbatch_us)) best = pb.plan;
    if (best && best->microbatch_us - skip_below <= popt.target_gap * best->microbatch_us) {
      best->lower_bound_us = std::min(pb.bound, best->microbatch_us);
      return best;
    }
    return solved(cx, req, *relaxed, std::move(best), pb.bound);
  }

 private:
  /// Where no plan at hand fits and the memory-limited solve is off: the cheapest priced plan
  /// that fits (StageBuilder::price_plans: memory-free solves with the usage at t* priced,
  /// which end on their own, not at a time limit), else no plan (microbatch_us +inf), bounded
  /// as a plan would be.  The memory-limited solve runs to --time-limit on large stages
  /// (llama3-405b's last stage of 2 layers: over 10 s to prove no plan), so the plan would
  /// depend on the machine's speed and load.
  static std::shared_ptr<StageSolve> priced_or_none(const StageSourceContext& cx, const StageRequest& req,
                                                    const StageSolve& relaxed) {
    const StageMemory mem = req.mem;
    StageBuilder::PricedBound pb = cx.builder.price_plans(req.kind, req.k, mem, relaxed);
    if (pb.plan && StageBuilder::fits(*pb.plan, mem)) {
      // The priced bound is a bound of the stage only under a rank's own limit.
      const double bound = mem.rank_limit ? pb.bound : relaxed.lower_bound_us;
      pb.plan->lower_bound_us = std::min(std::max(bound, relaxed.lower_bound_us), pb.plan->microbatch_us);
      return pb.plan;
    }
    auto s = std::make_shared<StageSolve>(relaxed);
    s->plan = Plan{};
    s->microbatch_us = kFitInf;
    // +inf where pricing proves that no plan fits a rank's own limit.
    s->lower_bound_us = mem.rank_limit ? std::max(pb.bound, relaxed.lower_bound_us) : relaxed.lower_bound_us;
    s->inflight = mem.inflight;
    s->memory_budget = mem.budget;
    s->interpolated = s->extended = false;
    return s;
  }

  /// The cheapest plan of the list's sources that fits, or nullptr.
  std::shared_ptr<StageSolve> at_hand(const StageSourceContext& cx, const StageRequest& req,
                                      const StageSolve& relaxed) const {
    std::shared_ptr<StageSolve> best;
    std::vector<std::shared_ptr<StageSolve>> earlier;
    for (const auto& source : at_hand_) {
      std::shared_ptr<StageSolve> c = source->plan(cx, req, &relaxed, earlier);
      earlier.push_back(c);
      if (c && StageBuilder::fits(*c, req.mem) && (!best || c->microbatch_us < best->microbatch_us)) best = std::move(c);
    }
    return best;
  }

  /// The memory-limited solve with `best` (the plan at hand, or nullptr) as its cutoff, its
  /// plan repaired or solved again when over the exact peak; the best plan with its bound
  /// (at least `priced_bound` and the memory-free bound: both relaxations).
  static std::shared_ptr<StageSolve> solved(const StageSourceContext& cx, const StageRequest& req,
                                            const StageSolve& relaxed, std::shared_ptr<StageSolve> best,
                                            double priced_bound) {
    const StageMemory mem = req.mem;
    StageBuilder& b = cx.builder;
    auto s = b.solve(req.kind, req.k, mem, mem.budget, best ? best->microbatch_us : kFitInf);
    const double bound = std::max(s->lower_bound_us, priced_bound);
    auto finish = [&](std::shared_ptr<StageSolve> p) {
      p->lower_bound_us = std::min(std::max(bound, relaxed.lower_bound_us), p->microbatch_us);
      return p;
    };
    auto over = [&] {
      return s->plan.has_solution && !StageBuilder::fits(*s, mem) && !(best && s->microbatch_us >= best->microbatch_us);
    };
    if (over() && mixes_allowed(b.options())) {
      // Over the exact in-flight peak: a few more regions recomputed often make it fit.  Where
      // that costs little the second solve below is skipped; else the repair is its cutoff.
      auto repaired = b.least_recompute(*s, mem, "the memory-limited plan");
      if (repaired && (!best || repaired->microbatch_us < best->microbatch_us)) {
        best = repaired;
        if (repaired->microbatch_us <= (1 + kRepairSlack) * s->microbatch_us) return finish(best);
      }
    }
    if (over()) {
      // Over the exact in-flight peak (with the step's summed gradients): plan again under the
      // limit less the excess.
      const int64_t excess = static_cast<int64_t>(std::ceil(StageBuilder::need_bytes(*s, mem))) - mem.budget;
      if (const int64_t limit = s->plan.peak_memory_bytes - excess; limit > 0) {
        auto t = b.solve(req.kind, req.k, mem, limit, best ? best->microbatch_us : kFitInf);
        if (t->plan.has_solution) s = t;
      }
    }
    if (StageBuilder::fits(*s, mem) && (!best || s->microbatch_us < best->microbatch_us)) best = s;
    if (!best) {
      s->microbatch_us = kFitInf;  // no plan under the budget
      best = s;
    }
    return finish(best);
  }

  StageSources at_hand_;
};

}  // namespace

std::unique_ptr<StagePlanSource> fitted_search(StageSources at_hand) {
  return std::make_unique<FittedSearch>(std::move(at_hand));
}

}  // namespace autoshard

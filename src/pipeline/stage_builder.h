#pragma once
/// One stage plan at a time: the intra-operator plan of a canonical stage (kind, k layers,
/// pipeline/stage_key.h) under a memory, solved or evaluated from strategies at hand.  What
/// the stage-plan sources (pipeline/stage_source.h) are made of; it keeps no plans (the search
/// keeps them in its StageCatalog).
///
/// A stage problem is the stage's graph planned on the stage mesh with the once-per-step work
/// weighted 1 / M and the sends of its boundary tensors priced on the pp link; under a budget
/// its kept activations are counted `inflight` times (PlannerOptions::inflight_microbatches),
/// a relaxation of the in-flight peak whose bound holds and whose plan is checked against the
/// exact peak (need_bytes).  Fitted costs are non-decreasing in k and in inflight and
/// non-increasing in budget (a plan of the larger problem restricted, or under the tighter
/// budget, is one of the other).
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/stage_key.h"
#include "pipeline/stage_pattern.h"

namespace autoshard {

struct BuiltProblem;

/// The sum over a stage optimizer's problem nodes of their cheapest strategy's compute: a lower
/// bound of any plan's objective (edges cost >= 0; the overlap model hides communication only,
/// so a node's in-op communication, op_comm, is left out).  What a solve stopped by the time
/// limit before proving a bound still has.
double node_floor(const ShardingOptimizer& so);
/// A solve's proven bound: at least `floor` (a time-limited solve may prove none), +inf when
/// the problem is proven infeasible.
double proven_bound(const Plan& p, double floor);

/// Priced solves (memory at t* priced, stage_lagrange.cc) per fitted stage at most, after the
/// memory-free one: Kelley's planes on one variable settle within a few.
inline constexpr int kMaxPricedSolves = 6;

class StageBuilder {
 public:
  StageBuilder(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
               const LayerMap& m, int32_t pp);

  /// What `s` needs per device with `inflight` microbatches in flight: its one-microbatch
  /// peak, the gradients summed over the step, and the other microbatches' kept activations.
  static double need_bytes(const StageSolve& s, double inflight, bool grads = true);
  static double need_bytes(const StageSolve& s, StageMemory mem) { return need_bytes(s, mem.inflight, mem.grads); }
  /// The same from its terms: the one-microbatch peak, the summed gradients it counts and one
  /// microbatch's kept activations.
  static double need_bytes(int64_t microbatch_peak, int64_t grads, int64_t kept, double inflight);
  /// `s`'s plan fits `mem` (need_bytes <= budget).
  static bool fits(const StageSolve& s, StageMemory mem);
  /// What a stage with plan `s` adds to its pp rank's peak: need_bytes with the step's summed
  /// gradients, plus the gradients its B hands to W held for `deferred` microbatches (a
  /// zero-bubble rank's W waiting).
  static double rank_need_bytes(const StageSolve& s, double inflight, double deferred);

  /// Solves (kind, k) under `mem` with `limit` bytes per device (0: memory-free, then planned
  /// for one in flight); `cutoff`: the solve only looks for plans cheaper than that.  A plan
  /// with microbatch_us +inf when none is found.
  std::shared_ptr<StageSolve> solve(StageKind kind, int32_t k, StageMemory mem, int64_t limit,
                                    double cutoff = std::numeric_limits<double>::infinity());
  /// The cheapest of `pats` evaluated at (kind, k) (every layer recomputed when
  /// `full_recompute`), marked interpolated, its figures set and no bound yet; nullptr when no
  /// pattern maps.
  std::shared_ptr<StageSolve> at_size(StageKind kind, int32_t k, const std::vector<StagePattern>& pats,
                                      bool full_recompute);
  /// `relaxed`'s plan with every layer region fully recomputed (evaluated, not solved), or
  /// nullptr when its strategies do not map.
  std::shared_ptr<StageSolve> recompute_all(const StageSolve& relaxed, StageMemory mem) const;
  /// torchtitan's layout inside a stage (FSDP + TP, or FSDP without a tp dim; recipes.h) with
  /// full activation checkpointing: a pinned, memory-free solve (small: the pins leave little
  /// to decide); nullptr when the recipe does not apply or the caller pins its own.
  std::shared_ptr<StageSolve> recipe(StageKind kind, int32_t k, StageMemory mem);
  /// `from`'s strategies in the model with recomputation nodes, with the least recomputation
  /// found that fits `mem` (planner/recompute_fit.h: a few exact evaluations, no solve), or
  /// nullptr when none fits or the strategies do not map.  `what` names it in the progress line.
  std::shared_ptr<StageSolve> least_recompute(const StageSolve& from, StageMemory mem, std::string_view what) const;
  /// `from`'s sharding with the least recomputation whose rank_need_bytes(inflight, deferred)
  /// is at most `budget`, its bound the memory-free `relaxed`'s; nullptr when none is found.
  /// A stage plan made for its kind's most in flight and a share of its rank, given its own
  /// rank's in-flight count and part of that rank's limit (pipeline_refit.cc).
  std::shared_ptr<const StageSolve> refit(const StageSolve& from, const StageSolve& relaxed, double inflight,
                                          double deferred, int64_t budget) const;

  /// The Lagrangian bound of (kind, k) under `mem` with the usage at the forward/backward
  /// boundary priced (pipeline/stage_lagrange.cc), at least `relaxed`'s bound, and the
  /// cheapest priced plan that fits (nullptr: none).  `at_hand`: the best plan that fits so far
  /// (its cost sets the first price), or nullptr.
  struct PricedBound {
    double bound = 0;
    std::shared_ptr<StageSolve> plan;
    int32_t solves = 0;
    double lambda = 0;  ///< the price (us per byte at t*) of the best bound; 0: memory-free
  };
  PricedBound price_memory(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed,
                           const StageSolve* at_hand);
  /// A plan of (kind, k) under `mem` from priced solves only (no memory-limited solve, whose
  /// time limit makes plans depend on the machine's load): with a recompute policy that
  /// chooses per region, under a rank's own limit price_memory (both models: its bound is
  /// the stage's), and on a share of a rank (its bound is none) the model with recomputation
  /// alone, where memory is bought; with a fixed policy its own model.
  PricedBound price_plans(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed);
  struct PricedFloor {
    /// A lower bound of min_x [T(x) + lambda (U(x) - live + deferred H(x))] over the plans of
    /// the canonical stage (kind, k) with `inflight` microbatches in flight, the least of the
    /// two memory models: T its microbatch time, U its usage at t* with the kept usages scaled
    /// (inflight_memory.h boundary_usage), live the nodes live at t* (U exceeds the true usage
    /// there by less than a byte a node: the rounding), H the bytes its B hands to its W
    /// (PartTimes::kept_for_w_bytes), which a zero-bubble rank keeps `deferred` times.
    double floor = 0;
    int64_t live = 0;  ///< the most nodes live at t* of the two models
  };
  /// One priced floor: a memory-free solve of `relaxed`'s stage with the usage at t* priced
  /// at `lambda` per model (no memory limit; its proven bound).
  PricedFloor priced_floor(const StageSolve& relaxed, double inflight, double deferred, double lambda);

  /// A progress line: to the options' callback, or on a worker thread to its task's buffer.
  void say(std::string line) const;
  /// `s`'s time and need under `mem` as a progress line.
  void report(const StageSolve& s, std::string_view what, StageMemory mem) const;
  /// task(0..tasks-1) on PipelineOptions::stage_threads threads; their progress lines are
  /// printed after, in task order, and the first exception in task order is rethrown.
  void run_parallel(size_t tasks, const std::function<void(size_t)>& task) const;

  const LayerMap& layers() const { return m_; }
  int32_t num_layers() const { return L_; }
  const Mesh& sub() const { return sub_; }
  const PlannerOptions& options() const { return opt_; }
  const PipelineOptions& pipeline_options() const { return popt_; }
  int32_t solves() const { return solves_.load(); }
  /// Of those, the solves that stopped at the time limit (Plan::clock_stopped).
  int32_t clock_stopped_solves() const { return clock_stopped_.load(); }
  /// Where the search reports its progress (PipelineOptions::on_progress).
  PipelineProgressTracker& progress() const { return progress_; }

 private:
  PlannerOptions stage_options(const StageGraph& sg, double inflight, int64_t limit) const;
  /// price_memory's dual in one memory model (the recompute policy the stage is built with):
  /// Kelley's planes over the price; bound +inf when even the least usages exceed the budget.
  PricedBound price_model(RecomputePolicy model, StageMemory mem, const StageSolve& relaxed,
                          const StageSolve* at_hand);
  /// `from`'s strategies in a stage optimizer built with recomputation policy `model` (memory
  /// free): its optimizer and the matched full assignment (-1 where a node has no match).
  struct Carried {
    std::shared_ptr<ShardingOptimizer> so;
    std::vector<StrategyIdx> choice;
  };
  Carried carried(const StageSolve& from, RecomputePolicy model) const;
  /// A fresh optimizer of `sg`'s memory-free problem in recomputation model `model`, its
  /// problem copied from the one built for that stage and model the first time (kept in
  /// carried_problems_).  Why: the rank refit and the fitted sources carry many plans of one
  /// canonical stage into the same model, and building its problem (strategies, costs,
  /// recomputation nodes) each time cost as much as the evaluations themselves.  The copy is
  /// the problem a build gives (build_problem is a function of graph, mesh and options).
  std::shared_ptr<ShardingOptimizer> carried_optimizer(const StageGraph& sg, RecomputePolicy model) const;
  /// `choice` (a full assignment of `so`'s problem) as a plan of `relaxed`'s stage, with its
  /// figures, no bound; `so` is kept as its optimizer.  nullptr when a node is unmatched (-1)
  /// or the plan's cost is not finite.
  std::shared_ptr<StageSolve> evaluated(std::shared_ptr<ShardingOptimizer> so, const StageSolve& relaxed,
                                        const std::vector<StrategyIdx>& choice, double inflight, int64_t budget) const;

  const Graph& g_;
  const Mesh& mesh_;
  const PlannerOptions& opt_;
  const PipelineOptions& popt_;
  const LayerMap& m_;
  int32_t pp_ = 0, L_ = 0;
  Mesh sub_;
  mutable std::atomic<int32_t> solves_{0};
  mutable std::atomic<int32_t> clock_stopped_{0};
  /// Counts a finished intra-op solve (and whether the clock stopped it).
  void counted_solve(const Plan& p) const {
    ++solves_;
    if (p.clock_stopped) ++clock_stopped_;
  }
  /// carried_optimizer's built problems, by the stage's origin nodes (a canonical stage's
  /// identity) and the model; read and written from the stage threads under the mutex.
  mutable std::mutex carried_mu_;
  mutable std::map<std::pair<std::vector<NodeIdx>, RecomputePolicy>, std::shared_ptr<const BuiltProblem>> carried_problems_;
  mutable PipelineProgressTracker progress_;
};

}  // namespace autoshard

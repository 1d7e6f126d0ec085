#pragma once
/// The stage problems of the pipeline search (pipeline/pipeline.h), solved once each and kept.
///
/// Two kinds of solve per canonical stage (kind, k layers):
///  - memory-free (`free`): no device limit.  A relaxation of every memory budget, so its
///    bounds hold for any in-flight count; with tied layers its optimum is concave in k
///    (pipeline.h), which gives the chord bounds between solved sizes.
///  - fitted (`fitted`): the plan a stage of that kind and size gets on a pp rank that keeps
///    `inflight` microbatches in flight under `budget` bytes per device.  When the memory-free
///    plan fits there (its one-microbatch peak + (inflight - 1) x its kept activations <=
///    budget) it is the fitted optimum too (the relaxation's optimum is feasible); else the
///    stage is planned with PlannerOptions::inflight_microbatches and the budget as its limit
///    (planner/inflight_memory.h), so the solver's recomputation trades recompute time against
///    the in-flight memory.  That scaled model is a relaxation of the in-flight constraint: the
///    solve's bound holds; its plan is checked against the exact in-flight peak and planned
///    again under a limit lowered by the excess when over (once).  The memory-free plan with
///    every layer region fully recomputed (evaluated, not solved) and torchtitan's layout (FSDP
///    + TP with full activation checkpointing, a small pinned solve) are plans at hand: the
///    solve only looks for a cheaper one (its cutoff), and a time-limited solve of a large
///    stage that finds none leaves the better of them.
/// Fitted costs are non-decreasing in k and in inflight and non-increasing in budget (a plan
/// of the larger problem restricted, or under the tighter budget, is one of the other).
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/stage_pattern.h"

namespace autoshard {

/// Stage kinds of the cost tables.
enum StageKind : int32_t { kStageFirst = 0, kStageMid = 1, kStageLast = 2, kStageBoth = 3 };

StageKind kind_of(int32_t s, int32_t S);
/// Layers [lo, hi) of the canonical stage of a kind with k layers (of L).
std::pair<int32_t, int32_t> canonical_range(StageKind kind, int32_t k, int32_t L);

/// The sum over a stage optimizer's problem nodes of their cheapest strategy's compute: a lower
/// bound of any plan's objective (edges cost >= 0; the overlap model hides communication only,
/// so a node's in-op communication, op_comm, is left out).  What a solve stopped by the time
/// limit before proving a bound still has.
double node_floor(const ShardingOptimizer& so);
/// A solve's proven bound: at least `floor` (a time-limited solve may prove none), +inf when
/// the problem is proven infeasible.
double proven_bound(const Plan& p, double floor);

/// Priced solves (memory at t* priced, stage_lagrange.cc) per fitted stage at most, after the
/// memory-free one.
inline constexpr int kMaxPricedSolves = 6;

/// A memory-limited stage plan over the exact in-flight peak is repaired by recomputing more
/// (StageSolver::least_recompute); where the repair costs at most this share more, it is kept
/// instead of solving again under a lowered limit (a second time-limited solve).  On llama3-405b
/// `--layers 32` (Interleaved1F1B v=2) repairs cost 3.1 % (kept: 89.9 against 87.2 ms) and
/// 21 % (solved again: 86.9 ms).
inline constexpr double kRepairSlack = 0.05;

/// What a stage may use: `inflight` microbatches in flight on its rank, `budget` bytes per
/// device (0: no limit).
struct StageMemory {
  double inflight = 1;
  int64_t budget = 0;
  /// The budget also holds the gradients the runtime sums over the step (StageSolve::
  /// deferred_grad_bytes): with one stage per rank, whose budget is the rank's limit.  With v
  /// stages per rank the budget is a share of the rank and the rank's assembly counts them.
  bool grads = true;
  /// The budget is the rank's own limit (one stage per rank): only then is it a relaxation
  /// whose stage bounds enter the pipeline's bound, and only then does the stage's priced
  /// memory (StageSolver::price_memory) give it a bound.  Not part of the fitted key: it
  /// changes the bound a plan is given, not which plans fit.
  bool rank_limit = true;
};

class StageSolver {
 public:
  StageSolver(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
              const LayerMap& m, int32_t pp);

  /// The memory-free plan of the canonical stage (kind, k): solved, or -- where the nearest
  /// solved sizes of the kind below and above k are one pattern (pipeline/stage_pattern.h) --
  /// that pattern evaluated at k, with the chord of their bounds as its bound.
  std::shared_ptr<const StageSolve> free(StageKind kind, int32_t k);
  /// free() of every key not known yet, the solves run on PipelineOptions::stage_threads
  /// threads.  Which are solved and which evaluated is decided before any runs, in key order,
  /// so the result does not depend on the threads' timing.
  void prefetch(const std::vector<std::pair<StageKind, int32_t>>& keys);
  /// Solves the stages of `keys` that were evaluated as patterns (the sizes a chosen split
  /// uses): their memory-free plans, and under `mem` their fitted plans (fit()), in parallel as
  /// prefetch does; a solve replaces the evaluated plan where it is cheaper, and the better of
  /// the two bounds is kept either way.
  void refine(const std::vector<std::tuple<StageKind, int32_t, StageMemory>>& keys);
  /// fitted() of every key, the memory-free plans first (prefetch), then the fitted solves
  /// of those that do not fit, on threads as prefetch runs them.
  void prefetch_fitted(const std::vector<std::tuple<StageKind, int32_t, StageMemory>>& keys);
  /// The plan of (kind, k) under `mem` (the memory-free one for budget 0).
  std::shared_ptr<const StageSolve> fitted(StageKind kind, int32_t k, StageMemory mem);
  /// Whether fitted(kind, k, mem) is known without solving.
  bool resolved(StageKind kind, int32_t k, StageMemory mem) const;
  /// What `s` needs per device with `inflight` microbatches in flight: its one-microbatch
  /// peak, the gradients summed over the step, and the other microbatches' kept activations.
  static double need_bytes(const StageSolve& s, double inflight, bool grads = true);
  static double need_bytes(const StageSolve& s, StageMemory mem) { return need_bytes(s, mem.inflight, mem.grads); }
  /// `s`'s plan fits `mem` (need_bytes <= budget).
  static bool fits(const StageSolve& s, StageMemory mem);
  /// What a stage with plan `s` adds to its pp rank's peak: need_bytes with the step's summed
  /// gradients, plus the gradients its B hands to W held for `deferred` microbatches (a
  /// zero-bubble rank's W waiting).
  static double rank_need_bytes(const StageSolve& s, double inflight, double deferred);
  /// `from`'s sharding with the least recomputation whose rank_need_bytes(inflight, deferred)
  /// is at most `budget` (planner/recompute_fit.h: exact evaluations, no solve), its bound the
  /// memory-free `relaxed`'s; nullptr when none is found.  Assembly's rank refit
  /// (pipeline_assemble.cc): a stage plan made for its kind's most in flight and a share of its
  /// rank gets its own rank's in-flight count and part of that rank's limit.
  std::shared_ptr<const StageSolve> refit(const StageSolve& from, const StageSolve& relaxed, double inflight,
                                          double deferred, int64_t budget) const;
  /// Up to `most` distinct solved fitted plans of (kind, k) with a finite cost, the fastest
  /// first: the shardings a rank's refit starts from.
  std::vector<std::shared_ptr<const StageSolve>> fastest_fitted(StageKind kind, int32_t k, size_t most) const;
  /// A plan of (kind, k) for a rank that keeps `inflight` microbatches in flight, `deferred`
  /// hand-overs to W, under `budget` (as rank_need_bytes counts it): the fastest refit of its
  /// two fastest solved fitted plans and of its memory-free plan, or, with no fitted plan of
  /// that size, of the pattern of its kind's nearest (extend_fitted); nullptr when none fits.
  /// Evaluations only, cached: the rank balance's moves (pipeline_refit.cc).
  std::shared_ptr<const StageSolve> fit_for_rank(StageKind kind, int32_t k, double inflight, double deferred,
                                                 int64_t budget);

  using FreeKey = std::pair<int32_t, int32_t>;                  ///< (kind, k)
  using FitKey = std::tuple<int32_t, int32_t, double, int64_t, bool>;  ///< (kind, k, inflight, budget, grads)
  const std::map<FreeKey, std::shared_ptr<const StageSolve>>& free_solves() const { return free_; }
  const std::map<FitKey, std::shared_ptr<const StageSolve>>& fitted_solves() const { return fitted_; }
  int32_t solves() const { return solves_.load(); }
  /// Where the search reports its progress (PipelineOptions::on_progress).
  PipelineProgressTracker& progress() const { return progress_; }
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
  /// A priced stage for the pipeline's rank-level bound: (kind, k, inflight, deferred, lambda).
  using PriceKey = std::tuple<int32_t, int32_t, double, double, double>;
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
  /// The priced floors of `keys`: one memory-free solve with the usage at t* priced per key
  /// and model (no memory limit; its proven bound), on PipelineOptions::stage_threads
  /// threads; cached.
  std::vector<PricedFloor> priced_floors(const std::vector<PriceKey>& keys);
  /// Prices a middle stage of k layers under the device limit with `inflight` microbatches in
  /// flight and the step's gradients (price_memory, as a rank with one stage of k layers),
  /// and keeps the pattern of its cheapest priced plan that fits: a sharding made for a whole
  /// rank's memory, which the rank refit maps onto stages of other sizes (rank_sources).
  /// False when memory does not bind there or no priced plan fits.
  bool price_rank_pattern(int32_t k, double inflight, int64_t limit);
  /// The kept rank patterns evaluated at (kind, k) (those that map: stages of >= 2 layers of
  /// the kind they were made on), each bounded by the memory-free bound; cached.
  std::vector<std::shared_ptr<const StageSolve>> rank_sources(StageKind kind, int32_t k);
  bool has_rank_patterns() const { return !rank_patterns_.empty(); }
  const LayerMap& layers() const { return m_; }
  const Mesh& sub() const { return sub_; }
  const PlannerOptions& options() const { return opt_; }

 private:
  PlannerOptions stage_options(const StageGraph& sg, double inflight, int64_t limit) const;
  std::shared_ptr<StageSolve> solve(StageKind kind, int32_t k, StageMemory mem, int64_t limit,
                                    double cutoff = std::numeric_limits<double>::infinity());
  /// The plan of (kind, k) under `mem` when `relaxed` (its memory-free plan) does not fit:
  /// fitted()'s work, touching no shared state (prefetch_fitted runs it on threads).
  std::shared_ptr<StageSolve> fit(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed);
  /// A progress line: to the options' callback, or on a worker thread to its task's buffer.
  void say(std::string line) const;
  /// task(0..tasks-1) on PipelineOptions::stage_threads threads; their progress lines are
  /// printed after, in task order, and the first exception in task order is rethrown.
  void run_parallel(size_t tasks, const std::function<void(size_t)>& task) const;
  /// Two solved stages of one kind around a size.
  struct Bracket {
    std::shared_ptr<const StageSolve> below, above;
    int32_t kb = 0, ka = 0;
  };
  /// The cheapest of the bracket's patterns (pipeline/stage_pattern.h) evaluated at k (every
  /// layer recomputed when `full_recompute`), its figures set and no bound yet; nullptr when
  /// no pattern maps.
  std::shared_ptr<StageSolve> between(StageKind kind, int32_t k, const Bracket& b, bool full_recompute);
  /// The cheapest of `pats` evaluated at (kind, k), as between() does.
  std::shared_ptr<StageSolve> at_size(StageKind kind, int32_t k, const std::vector<StagePattern>& pats, bool full_recompute);
  /// Gives `s` its bound and status and says so when its gap is no wider than the bracket's
  /// solves left (else the caller solves).
  bool accept_between(StageSolve& s, StageKind kind, int32_t k, const Bracket& b, double bound,
                      std::string_view what) const;
  /// The memory-free (kind, k) as the pattern of its nearest solved sizes (free()), or nullptr.
  std::shared_ptr<StageSolve> interpolate(StageKind kind, int32_t k);
  /// (kind, k) under `mem` as the pattern of the nearest fitted plans of its kind and
  /// in-flight count that recompute every layer (the plans at hand fit() prefers for large
  /// stages): memory and cost are affine in the layers, so it is checked against `mem` and
  /// bounded by the memory-free bound; nullptr when there is none or it does not fit.
  std::shared_ptr<StageSolve> interpolate_fitted(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed);
  /// `solved` where it is cheaper than `was`, else `was`; with the better of their bounds, as
  /// a solved plan.
  static std::shared_ptr<const StageSolve> better_of(const StageSolve& was, std::shared_ptr<StageSolve> solved);
  /// Solves the memory-free `keys` on PipelineOptions::stage_threads threads; results in key
  /// order, progress lines printed in key order.
  std::vector<std::shared_ptr<StageSolve>> solve_all(const std::vector<FreeKey>& keys);
  /// torchtitan's layout inside a stage (FSDP + TP, or FSDP without a tp dim; recipes.h) with
  /// full activation checkpointing: a pinned, memory-free solve (small: the pins leave little
  /// to decide); nullptr when the recipe does not apply.
  std::shared_ptr<StageSolve> recipe_candidate(StageKind kind, int32_t k, StageMemory mem);
  void report(const StageSolve& s, std::string_view what, StageMemory mem) const;

  /// price_memory's dual in one memory model (the recompute policy the stage is built with):
  /// Kelley's planes over the price; bound +inf when even the least usages exceed the budget.
  PricedBound price_model(RecomputePolicy model, StageMemory mem, const StageSolve& relaxed,
                          const StageSolve* at_hand);
  /// One key of priced_floors, solved.
  PricedFloor priced_floor(const StageSolve& relaxed, double inflight, double deferred, double lambda);
  /// `from`'s strategies in the model with recomputation nodes, with the least recomputation
  /// found that fits `mem` (planner/recompute_fit.h: a few exact evaluations, no solve), or
  /// nullptr when none fits or the strategies do not map.  `what` names it in the progress line.
  std::shared_ptr<StageSolve> least_recompute(const StageSolve& from, StageMemory mem, std::string_view what) const;
  /// (kind, k) under `mem` as the sharding pattern of the nearest solved fitted plans of its
  /// kind (the same in-flight count first, then the nearest size; two at most) with the least
  /// recomputation that fits `mem`, bounded by `relaxed`'s memory-free bound; nullptr when
  /// none maps or fits.  Repeated layers make a fitted plan's sharding a good one for other
  /// sizes of its kind (their budgets per layer are alike), and its recomputation is re-chosen
  /// for the size's own budget and in-flight count.  Marked `extended`: refine() keeps it.
  std::shared_ptr<StageSolve> extend_fitted(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed);
  /// `from`'s strategies in a stage optimizer built with recomputation policy `model` (memory
  /// free): its optimizer and the matched full assignment (-1 where a node has no match).
  struct Carried {
    std::shared_ptr<ShardingOptimizer> so;
    std::vector<StrategyIdx> choice;
  };
  Carried carried(const StageSolve& from, RecomputePolicy model) const;
  /// `relaxed`'s plan with every layer region fully recomputed (evaluated, not solved), or
  /// nullptr when its strategies do not map.
  std::shared_ptr<StageSolve> recompute_all(const StageSolve& relaxed, StageMemory mem);
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
  std::map<FreeKey, std::shared_ptr<const StageSolve>> free_;
  std::map<FitKey, std::shared_ptr<const StageSolve>> fitted_;
  std::map<PriceKey, PricedFloor> priced_;
  std::vector<StagePattern> rank_patterns_;
  std::map<FreeKey, std::vector<std::shared_ptr<const StageSolve>>> rank_sources_;
  std::map<std::tuple<int32_t, int32_t, double, double, int64_t>, std::shared_ptr<const StageSolve>> rank_fits_;
  std::atomic<int32_t> solves_{0};
  mutable PipelineProgressTracker progress_;
};

}  // namespace autoshard

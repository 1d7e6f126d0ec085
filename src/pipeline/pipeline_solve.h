#pragma once
/// The stage plans of the pipeline search (pipeline/pipeline.h), each made once and kept in a
/// StageCatalog: StageSolver asks the stage-plan sources (pipeline/stage_source.h) in order.
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
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/stage_builder.h"
#include "pipeline/stage_catalog.h"
#include "pipeline/stage_key.h"
#include "pipeline/stage_pattern.h"
#include "pipeline/stage_source.h"

namespace autoshard {

class StageSolver {
 public:
  StageSolver(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
              const LayerMap& m, int32_t pp);

  /// The memory-free plan of the canonical stage (kind, k): solved, or -- where the nearest
  /// solved sizes of the kind below and above k are one pattern (pipeline/stage_pattern.h) --
  /// that pattern evaluated at k, with the chord of their bounds as its bound.
  std::shared_ptr<const StageSolve> free(StageKind kind, int32_t k);
  /// free() of every key not known yet, the sources run on PipelineOptions::stage_threads
  /// threads.  Which are solved and which evaluated is decided before any solve runs, in key
  /// order, so the result does not depend on the threads' timing.
  void prefetch(const std::vector<std::pair<StageKind, int32_t>>& keys);
  /// The plan of (kind, k) under `mem` (the memory-free one where it fits, or for budget 0).
  std::shared_ptr<const StageSolve> fitted(StageKind kind, int32_t k, StageMemory mem);
  /// fitted() of every request, the memory-free plans first (prefetch), then the fitted
  /// sources of those that do not fit, on threads as prefetch runs them.
  void prefetch_fitted(const std::vector<StageRequest>& reqs);
  /// Solves the stages of `reqs` that were evaluated as patterns (the sizes a chosen split
  /// uses): their memory-free plans, and under their memory their fitted plans, in parallel as
  /// prefetch does; a solve replaces the evaluated plan where it is cheaper, and the better of
  /// the two bounds is kept either way.
  void refine(const std::vector<StageRequest>& reqs);
  /// Whether fitted(kind, k, mem) is known without solving.
  bool resolved(StageKind kind, int32_t k, StageMemory mem) const;

  /// Up to `most` distinct solved fitted plans of (kind, k) with a finite cost, the fastest
  /// first: the shardings a rank's refit starts from.
  std::vector<std::shared_ptr<const StageSolve>> fastest_fitted(StageKind kind, int32_t k, size_t most) const;
  /// A plan of (kind, k) for a rank that keeps `inflight` microbatches in flight, `deferred`
  /// hand-overs to W, under `budget` (as StageBuilder::rank_need_bytes counts it): the fastest
  /// refit of its two fastest solved fitted plans, of the rank patterns and of its memory-free
  /// plan, or, with no fitted plan of that size, of the pattern of its kind's nearest
  /// (extend_fitted); nullptr when none fits.  Evaluations only, catalogued: the rank
  /// balance's moves (pipeline_refit.cc).
  std::shared_ptr<const StageSolve> fit_for_rank(StageKind kind, int32_t k, double inflight, double deferred,
                                                 int64_t budget);
  /// The priced floors of `keys` (StageKey::priced_floor): one memory-free solve with the
  /// usage at t* priced per key and model, on PipelineOptions::stage_threads threads; kept.
  std::vector<StageBuilder::PricedFloor> priced_floors(const std::vector<StageKey>& keys);
  /// Prices a middle stage of k layers under the device limit with `inflight` microbatches in
  /// flight and the step's gradients (price_memory, as a rank with one stage of k layers),
  /// and keeps the pattern of its cheapest priced plan that fits: a sharding made for a whole
  /// rank's memory, which the rank refit maps onto stages of other sizes (rank_sources).
  /// False when memory does not bind there or no priced plan fits.
  bool price_rank_pattern(int32_t k, double inflight, int64_t limit);
  /// The kept rank patterns evaluated at (kind, k) (those that map: stages of >= 2 layers of
  /// the kind they were made on), each bounded by the memory-free bound; kept.
  std::vector<std::shared_ptr<const StageSolve>> rank_sources(StageKind kind, int32_t k);
  bool has_rank_patterns() const { return !rank_patterns_.empty(); }
  /// Whether any priced floor was computed (memory priced for the ranks' bounds).
  bool has_priced_floors() const { return !priced_.empty(); }

  const StageCatalog& catalog() const { return catalog_; }
  StageBuilder& builder() { return b_; }
  const StageBuilder& builder() const { return b_; }

 private:
  /// For each request the plan of the first of `sources` that gives one, stored in the
  /// catalog under its key: each source in turn on the requests still without a plan (on
  /// threads when `threads`), the catalog written after each round.  `relaxed`: per request
  /// its memory-free plan (nullptr for memory-free requests).
  void resolve(const StageSources& sources, const std::vector<StageKey>& keys, const std::vector<StageRequest>& reqs,
               const std::vector<std::shared_ptr<const StageSolve>>& relaxed, bool threads);
  /// `source` on every request, on threads: results in request order.
  std::vector<std::shared_ptr<StageSolve>> round(const StagePlanSource& source, const std::vector<StageRequest>& reqs,
                                                 const std::vector<std::shared_ptr<const StageSolve>>& relaxed,
                                                 bool threads);
  /// The fitted key and request of (kind, k) under `mem` (a stage holding every layer: k = L).
  StageRequest canonical(StageKind kind, int32_t k, StageMemory mem) const;
  StageSourceContext context() { return {b_, catalog_}; }
  /// PipelineOptions::on_memory_priced, the first time only.
  void memory_priced();

  StageBuilder b_;
  std::atomic<bool> memory_priced_{false};
  StageSourceLists sources_;
  StageCatalog catalog_;
  std::map<StageKey, StageBuilder::PricedFloor> priced_;
  std::vector<StagePattern> rank_patterns_;
  std::map<StageKey, std::vector<std::shared_ptr<const StageSolve>>> rank_sources_;
};

}  // namespace autoshard

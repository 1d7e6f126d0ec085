#pragma once
/// Where a stage plan comes from.  Each way of getting one -- a solve, the pattern of solved
/// sizes evaluated at another, a fitted plan's pattern extended, torchtitan's recipe, a plan's
/// recomputation re-chosen for a budget -- is a StagePlanSource, and each kind of plan the
/// search asks for has an ordered list of them (StageSourceLists): cheap evaluations first,
/// a solve last.  StageSolver runs a list over many requests at once, one source per round
/// on threads, each round reading only what the catalog held when it began, so the plans do
/// not depend on the threads' timing.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/stage_catalog.h"
#include "pipeline/stage_key.h"

namespace autoshard {

class StageBuilder;

/// A stage plan asked for: the canonical stage (kind, k) under `mem` (budget 0: memory-free).
struct StageRequest {
  StageKind kind = kStageMid;
  int32_t k = 1;
  StageMemory mem;
};

/// What a source may read: the builder that plans stages and the plans catalogued so far.
struct StageSourceContext {
  StageBuilder& builder;
  const StageCatalog& catalog;
};

class StagePlanSource {
 public:
  virtual ~StagePlanSource() = default;
  /// A plan for `req`, or nullptr (the next source of the list is asked).  `relaxed`: the
  /// request's memory-free plan (nullptr for a memory-free request); `earlier`: what the
  /// list's earlier sources gave for it (nullptr where none), for sources that start from
  /// another's plan.
  virtual std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req,
                                           const StageSolve* relaxed,
                                           const std::vector<std::shared_ptr<StageSolve>>& earlier) const = 0;
};

using StageSources = std::vector<std::unique_ptr<StagePlanSource>>;

/// The ordered lists, chosen once per search from its options.
struct StageSourceLists {
  /// The memory-free plan: the pattern of the nearest solved sizes around k (with the chord of
  /// their bounds), else a solve.  The first that gives a plan wins.
  StageSources memory_free;
  /// A plan under a budget whose memory-free plan does not fit: the pattern of the nearest
  /// fully recomputed fitted plans (else, with PipelineOptions::extend_fitted, a solved
  /// fitted pattern with its recomputation re-chosen), else the fitted search
  /// (pipeline/stage_fit.cc).  The first that gives a plan wins.
  StageSources fitted;
};
StageSourceLists stage_source_lists(const PlannerOptions& opt, const PipelineOptions& popt);

/// The fitted search's plans at hand, the cheapest that fits kept: the memory-free plan fully
/// recomputed, torchtitan's recipe, and each of those two with only as much recomputation as
/// the budget needs, as far as `opt`'s recompute policy allows each.
StageSources at_hand_sources(const PlannerOptions& opt);
/// The fitted search (pipeline/stage_fit.cc): the cheapest plan at hand that fits, then, where
/// PipelineOptions::solve_fitted and it is not within the target gap of the bound, the
/// memory-limited solve with the plan at hand as its cutoff (its plan repaired or solved
/// again under a lowered limit when over the exact in-flight peak); without solve_fitted, no
/// memory-limited solve: the cheapest priced plan that fits where nothing at hand does.  Always gives a plan (microbatch_us +inf when none fits).
std::unique_ptr<StagePlanSource> fitted_search(StageSources at_hand);

/// (kind, k) under `mem` as the sharding pattern of the nearest solved fitted plans of its
/// kind (the same in-flight count first, then the nearest size; two at most) with the least
/// recomputation that fits `mem`, bounded by `relaxed`'s memory-free bound; nullptr when
/// none maps or fits.  Repeated layers make a fitted plan's sharding a good one for other
/// sizes of its kind (their budgets per layer are alike), and its recomputation is re-chosen
/// for the size's own budget and in-flight count.  Marked `extended`: refine() keeps it.
std::shared_ptr<StageSolve> extend_fitted(const StageSourceContext& cx, StageKind kind, int32_t k, StageMemory mem,
                                          const StageSolve& relaxed);

/// `solved` where it is cheaper than `was`, else `was`; with the better of their bounds, as
/// a solved plan (a bracket end for later patterns).
std::shared_ptr<const StageSolve> better_of(const StageSolve& was, std::shared_ptr<StageSolve> solved);

}  // namespace autoshard

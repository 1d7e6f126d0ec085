#pragma once
/// The least recomputation that makes a plan fit, its sharding held.
///
/// Why: a pipeline stage under a memory budget has had three plans at hand (planner/
/// pipeline_solve.h): the memory-free plan, torchtitan's layout and the memory-limited solve.
/// The first two came with every layer fully recomputed, the third was planned again from
/// scratch (a 10 s solve on llama3-405b's stages) when its plan went over the exact in-flight
/// peak.  Full recomputation of every layer is often far more than the budget needs
/// (torchtitan's layout used 10 GB of a 45.7 GB budget on a 9-layer 405B stage), and a
/// plan a few GB over needs a few regions recomputed, not a new solve.
///
/// What: the regions of a problem built with recomputation nodes (recompute.h) fall into
/// classes (the same activation class and modes in every layer: attention, mlp).  With the
/// sharding fixed, a region's mode changes the plan's time and its kept bytes by nearly the
/// same amount in every layer, so one probe per (class, mode) -- every region of the class in
/// that mode, the others keeping -- gives each region's time and memory per mode, and the
/// plans with n regions of a class in mode m are estimated as sums.  The estimated Pareto
/// front of the counts (least time per memory) is walked from the fastest estimate under the
/// budget, each candidate evaluated exactly, until one fits.  A heuristic: the estimate is
/// affine where the true peak need not be, so every answer is an exactly evaluated plan that
/// fits, and none is claimed optimal.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "planner/problem_builder.h"

namespace autoshard {

/// What the caller's evaluation of a full assignment says: its time and what it needs of the
/// budget (for a pipeline stage: its one-microbatch peak plus the other microbatches in flight).
struct RecomputeFigures {
  double time_us = 0;
  double need_bytes = 0;
};
/// nullopt: the assignment has no finite cost.
using RecomputeEvaluator = std::function<std::optional<RecomputeFigures>(const std::vector<StrategyIdx>&)>;

/// `choice` with region r in mode index region_mode[r] (an index into its modes; -1 leaves the
/// region's decision as it is), and the gap, tail and keep nodes set to follow their decision
/// and owner.
std::vector<StrategyIdx> with_region_modes(const BuiltProblem& bp, std::vector<StrategyIdx> choice,
                                           const std::vector<StrategyIdx>& region_mode);

struct RecomputeFit {
  std::vector<StrategyIdx> choice;
  RecomputeFigures figures;
  int32_t evaluations = 0;  ///< exact evaluations spent (probes included)
};

/// The fastest assignment found with `base`'s strategies and some regions recomputed whose
/// need is at most `budget`, spending at most `max_evaluations` exact evaluations; nullopt when
/// bp has no regions or none found fits.  Deterministic: the same inputs give the same answer.
std::optional<RecomputeFit> least_recompute_that_fits(const BuiltProblem& bp, const std::vector<StrategyIdx>& base,
                                                      double budget, const RecomputeEvaluator& evaluate,
                                                      int32_t max_evaluations = 16);

}  // namespace autoshard

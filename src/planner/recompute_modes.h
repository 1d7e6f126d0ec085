#pragma once
/// --recompute auto under a binding memory limit, solved case by case.
///
/// Why: a region's decision node is tied to every gap and tail node of the region (recompute.h),
/// and clustering ties the decisions of all repeated layers into one node per region class.
/// So a handful of decision classes couple every recomputation node of the model: the exact
/// reductions, which fold a fixed policy's recomputation nodes into their owners (llama3-8b
/// 1x8: 987 tied nodes -> 117), leave the auto model whole (12,494 nodes), too large for the
/// MIP, and its anytime search and LP bound ran out the time limit (22.9 s and a 0.35 % gap
/// for the torchtitan case, docs/benchmarks.md "Memory pressure without flags").
///
/// What: those classes are few (2 for a LLaMA: attention and mlp), so each combination of their
/// modes is a case the solver handles as it handles a fixed policy: its memory floor (every
/// node at its least usage under the case's modes) proves a case infeasible without solving;
/// its memory-free optimum, when it fits, is the case's optimum; only the cases whose
/// memory-free bound is below the best plan found and whose optimum does not fit are solved
/// with the limit, cut off at the best plan.  The minimum over cases is exact: every tied plan
/// belongs to one case, and the bound is the least of the cases' proven bounds.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/problem_builder.h"
#include "solver/solver.h"

namespace autoshard {

/// The decision classes of a tied problem: classes (of `class_of`) holding a region decision
/// with more than one mode, in increasing order, and how many modes each has.
struct ModeClasses {
  std::vector<PNodeIdx> classes;
  std::vector<StrategyIdx> counts;
  /// Number of mode combinations (saturates at INT64_MAX / 4).
  int64_t cases() const;
  /// Combination k (mixed radix, first class fastest): one mode index per class.
  std::vector<StrategyIdx> modes_of(int64_t k) const;
};
ModeClasses decision_classes(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of);

/// Per region of bp: the mode index `modes` gives its decision class (-1 for a region whose
/// decision is in no class of `mc`: a single mode).
std::vector<StrategyIdx> region_modes(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                                      const ModeClasses& mc, const std::vector<StrategyIdx>& modes);

/// Restricts `p` to the regions' modes: every other strategy of a decision, and of the gap,
/// tail and keep nodes tied to it, costs +inf.  `node_of` maps bp's problem nodes to p's (a
/// clustering's class_of; empty: p is bp.problem's shape).
void fix_region_modes(const BuiltProblem& bp, const std::vector<StrategyIdx>& region_mode,
                      const std::vector<PNodeIdx>& node_of, Problem& p);

/// The least peak any plan of bp could have under the regions' modes (every node at its least
/// usage among the strategies allowed): a proven lower bound on such a plan's peak.
int64_t memory_floor_with_modes(const BuiltProblem& bp, const std::vector<StrategyIdx>& region_mode);

/// Solves the memory-limited auto problem case by case (see the file comment).  Returns nullopt
/// when there is nothing to enumerate or more than `max_cases` cases (the caller solves the
/// joint model).  The result is in cp's terms, as solve() of cp.problem would give it;
/// status kInfeasible when every case is proven infeasible.
std::optional<SolveResult> solve_recompute_cases(const BuiltProblem& bp, const ClusteredProblem& cp,
                                                 const SolverOptions& so,
                                                 const std::function<double()>& remaining,
                                                 int64_t max_cases = 27);

}  // namespace autoshard

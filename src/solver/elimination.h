#pragma once
/// Exact minimization by variable (bucket) elimination: the pairwise min-sum problem
/// (node costs + edge costs, memory ignored) is solved by eliminating nodes one at a time in a
/// greedy min-table-size order, each elimination producing a table over the node's neighbours
/// (Dechter's bucket elimination, i.e. dynamic programming over a tree decomposition).  Exact
/// and fast when the graph left after reductions has small treewidth, as planner problems do
/// (chains of layers with residual and parameter-gradient shortcuts); gives up otherwise.
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

struct EliminationOptions {
  /// Largest table (entries) one elimination may create; beyond it the method gives up.
  int64_t max_table = 16'000'000;
  /// Largest work (table entries x eliminated domain x factors, summed over all steps and
  /// conditioning values).
  int64_t max_work = 400'000'000;
  /// Cutset conditioning: at most this many value combinations of the fixed variables.
  int64_t max_cut_combinations = 4096;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct EliminationStats {
  double largest_table = 0;  ///< largest table created (or, on giving up, the one refused)
  int32_t eliminated = 0;
  int32_t cut = 0;  ///< variables fixed by cutset conditioning
  double work = 0;  ///< table entries x domain x factors, summed over steps
};

/// The optimal assignment ignoring the usage limit, or nullopt when a table would be too large
/// or the deadline passes.  The optimum may be +inf when every assignment is forbidden.
std::optional<std::vector<StrategyIdx>> solve_by_elimination(const Problem& p,
                                                             const EliminationOptions& opt = {},
                                                             EliminationStats* stats = nullptr);

}  // namespace autoshard

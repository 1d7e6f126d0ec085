#pragma once
/// Lagrangian relaxation of the memory rows: the solver's one pricing machinery for plain
/// Problems (the group model's bound is lower_bound.h's).  Each row k gets a price
/// lambda_k >= 0 per byte (row_prices.h), every node pays usage x the prices of the rows it
/// appears in, and the priced pairwise problem is solved without memory:
///  - exactly by elimination (elimination.h) when it can: the priced optimum minus
///    sum_k lambda_k (limit - offset_k) is then a lower bound on the constrained optimum (weak
///    duality), and prices follow subgradient steps (subgradient.h, shared with the group
///    model's bound in lower_bound.h) towards it;
///  - otherwise heuristically, by the exact reductions (reduce.h: trees and chains vanish) and
///    greedy descent (greedy.h) on what is left: the same steps, no bound, and the first
///    priced plan that fits ends the search.
/// Every priced plan that happens to fit is a feasible plan.  If none fits, the prices are
/// scaled up until one does.
#include <chrono>
#include <vector>

#include "problem/problem.h"
#include "solver/elimination.h"
#include "solver/memory_rows.h"

namespace autoshard {

struct LagrangianResult {
  bool applicable = false;                ///< some priced problem was solved
  bool exact = false;                     ///< by elimination: lower_bound is valid
  std::vector<StrategyIdx> best_feasible;  ///< empty if none found
  Cost best_cost = kInfCost;
  Cost lower_bound = -kInfCost;           ///< -inf unless exact
  int iterations = 0;
};

LagrangianResult lagrangian_memory(const Problem& p, const std::vector<MemoryRow>& rows,
                                   std::chrono::steady_clock::time_point deadline,
                                   int max_iterations = 60);

}  // namespace autoshard

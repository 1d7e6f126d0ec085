#pragma once
/// Lagrangian relaxation of the memory rows, for problems whose pairwise part is solved exactly
/// by elimination (elimination.h): each row k gets a price lambda_k >= 0 per byte, every node
/// pays usage x the prices of the rows it appears in, and the priced pairwise problem is solved
/// exactly.  Its value minus sum_k lambda_k (limit - offset_k) is a lower bound on the
/// constrained optimum (weak duality); prices follow subgradient steps (Polyak step sizes), and
/// every priced optimum that happens to fit is a feasible plan.  If none fits, the prices are
/// scaled up until one does.
#include <chrono>
#include <vector>

#include "problem/problem.h"
#include "solver/elimination.h"
#include "solver/reduce.h"

namespace autoshard {

struct LagrangianResult {
  bool applicable = false;                ///< elimination could solve the priced problems
  std::vector<StrategyIdx> best_feasible;  ///< empty if none found
  Cost best_cost = kInfCost;
  Cost lower_bound = -kInfCost;
  int iterations = 0;
};

LagrangianResult lagrangian_memory(const Problem& p, const std::vector<MemoryRow>& rows,
                                   std::chrono::steady_clock::time_point deadline,
                                   int max_iterations = 60);

}  // namespace autoshard

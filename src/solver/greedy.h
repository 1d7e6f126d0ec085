#pragma once
/// Fast heuristic used as the exact search's warm start and as the fallback answer when the
/// search runs out of time: per-node cheapest strategy (or the reduced problem's greedy plan),
/// coordinate descent on the full cost (node + incident edges), then memory repair (penalised
/// descent, then cheapest cost increase per unit of usage removed from violated rows) and a
/// final memory-respecting descent.  Priced restarts are lagrangian.h's.
#include <chrono>
#include <cstdint>
#include <vector>

#include "problem/problem.h"
#include "solver/memory_rows.h"

namespace autoshard {

struct GreedyResult {
  std::vector<StrategyIdx> choice;
  Cost cost = kInfCost;       ///< evaluate_cost of choice (+inf if a forbidden pair is used)
  bool memory_ok = false;     ///< every row within the usage limit
};

/// `rows` are the problem's memory rows (see memory_rows); `start` (optional, may be empty)
/// is an initial assignment.
/// The search stops improving at `deadline` (it still returns an assignment).
using Deadline = std::chrono::steady_clock::time_point;
GreedyResult greedy_solve(const Problem& p, const std::vector<MemoryRow>& rows,
                          const std::vector<StrategyIdx>& start = {},
                          Deadline deadline = Deadline::max());

/// The problem's exact reductions (reduce.h: trees and chains are solved exactly there), greedy
/// descent on what is left, mapped back; memory ignored.  Empty when the reductions prove that
/// no finite-cost assignment exists.  The Lagrangian heuristic's priced solver (lagrangian.h).
std::vector<StrategyIdx> reduced_greedy(const Problem& p, Deadline deadline);

}  // namespace autoshard

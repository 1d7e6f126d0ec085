#pragma once
/// Exact search with a MIP solved by COIN-OR CBC.
///
/// Formulation (Alpa's marginal edge form): binary s_v[q] with sum_q s_v[q] = 1; for every
/// edge continuous e[p,q] in [0,1] with sum_q e[p,q] = s_u[p] and sum_p e[p,q] = s_v[q];
/// forbidden (+inf) pairs get no variable, which forces them to 0.  Memory: one row per
/// memory row (see memory_rows), with each node's minimum usage moved to the right-hand side.
///
/// The child first solves the LP relaxation alone (Clp's dual simplex from a crash basis):
/// an integral optimum is the answer, proven, without branch and bound.  Otherwise CBC
/// continues from that basis.
///
/// CBC runs in a forked child process: it streams every new incumbent and, periodically, its
/// best bound through a pipe, and is killed with SIGKILL at the deadline.  This makes the time
/// limit hold even when CBC itself does not honour it (observed: CBC stuck in the root LP of
/// an 816-node instance far past setMaximumSeconds).
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "problem/problem.h"
#include "solver/memory_rows.h"

namespace autoshard {

struct MipOptions {
  double time_limit_s = 60;  ///< wall clock for the whole call, including the fork
  double mip_gap = 0;
  int threads = 1;
  /// Memory the CBC child may allocate beyond what it inherits; 0: 3/4 of the machine's
  /// memory.  Past it the child fails (the solve goes on without a MIP answer).
  int64_t memory_budget_bytes = 0;
  std::function<void(std::string_view)> progress;
};

enum class MipStatus {
  kOptimal,     ///< proven optimal (within mip_gap)
  kFeasible,    ///< stopped with an incumbent
  kInfeasible,  ///< proven infeasible
  kNoSolution,  ///< stopped without an incumbent
};

struct MipResult {
  MipStatus status = MipStatus::kNoSolution;
  std::vector<StrategyIdx> choice;  ///< empty unless an incumbent exists
  double objective = kInfCost;      ///< MIP objective of `choice`
  double bound = -kInfCost;         ///< best proven lower bound on the objective
  int64_t variables = 0;
  int64_t constraints = 0;
  /// The LP relaxation's optimum was integral, which proved it; CBC's branch and bound did
  /// not run.
  bool root_integral = false;
};

/// Minimizes cost subject to the memory rows (and forbidden pairs).  `warm` (may be empty)
/// must be a full assignment; it is passed to CBC if it is feasible.
MipResult solve_cost_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt);

/// Minimizes the peak max_rows(offset + usages) subject only to forbidden choices and pairs.
/// The objective is the peak; `rows` should contain every maximal row (drop_slack = false).
MipResult solve_peak_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt);

}  // namespace autoshard

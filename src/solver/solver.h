#pragma once
/// The exact solver: reductions (reduce.h), a greedy warm start (greedy.h), then an exact
/// search on what is left -- message passing where memory cannot bind and its bound meets its
/// plan (trws.h), else a CBC MIP in a child process (mip.h) -- and the answer mapped back to
/// the original problem.  The time limit covers the whole call and holds even when CBC does
/// not honour its own limit.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "problem/problem.h"
#include "solver/trws.h"

namespace autoshard {

/// Relative gap below which a solution counts as proven optimal: covers the floating-point
/// margins of the bounds (TRW-S sums many reparametrised terms; 1e-9 relative each way).
inline constexpr double kProofTolerance = 1e-8;

enum class SolveStatus {
  kOptimal,     ///< proven optimal (within mip_gap)
  kFeasible,    ///< a feasible assignment, optimality not proven before the time limit
  kInfeasible,  ///< no assignment avoids forbidden choices and fits the usage limit
  kTimedOut,    ///< the time limit passed without any feasible assignment
};
std::string_view solve_status_name(SolveStatus s);

struct SolverOptions {
  double time_limit_s = 60;
  double mip_gap = 0;   ///< relative gap at which the search may stop
  int threads = 1;
  bool skip_reductions = false;
  /// Optional initial assignment of the original problem (used if it is feasible and better
  /// than the greedy one).
  std::vector<StrategyIdx> warm_start;
  /// The caller only wants an assignment cheaper than this (e.g. the mesh search: the best mesh
  /// so far).  The search stops as soon as its proven lower bound reaches it; the result then
  /// has lower_bound >= cutoff and, as status, kFeasible with the best assignment found so far
  /// or kTimedOut.  The anytime search honours it; the MIP runs as usual.
  Cost cutoff = kInfCost;
  /// Without memory rows, stop where message passing does not prove the optimum (instead of
  /// the MIP or the time-limited anytime search): the answer is its plan and bound.  For callers that want a
  /// bound and a plan quickly and deterministically (the overlap objective's dual solves,
  /// planner/overlap_solve.h).
  bool bound_only = false;
  /// Most message-passing (TRW-S) iterations before the exact search; its bound is valid at
  /// every iteration.  The overlap objective's dual solves take fewer (overlap_solve.h).
  int message_passing_iterations = 2000;
  /// Message passing starts from these messages and leaves its own (trws.h); for a series
  /// of solves of one problem shape with other costs.  nullptr: from zero.
  MessageMemory* messages = nullptr;
  /// Receives one-line progress messages (phases, incumbents, bounds).
  std::function<void(std::string_view)> progress;
  /// Every phase stops on its own limits -- proof, message_passing_iterations, a fixed
  /// elimination work -- instead of its share of time_limit_s, which is then a safety net
  /// only: the answer depends on the problem alone unless that net is reached
  /// (SolveResult::clock_stopped).  The MIP and the anytime search have no work limit (CBC
  /// runs to its proof or the deadline).  For callers whose plans must not depend on the
  /// machine's load (the pipeline's stage solves, pipeline/stage_builder.h).
  bool work_limited = false;
};

struct SolveResult {
  /// One strategy per original node; empty when infeasible or timed out without a solution.
  std::vector<StrategyIdx> choice;
  Cost objective = kInfCost;    ///< evaluate_cost(p, choice)
  Cost lower_bound = -kInfCost; ///< proven lower bound on the optimum
  double gap = kInfCost;        ///< (objective - lower_bound) / max(|objective|, 1e-9)
  SolveStatus status = SolveStatus::kTimedOut;
  int64_t peak_usage = 0;       ///< peak_usage(p, choice)
  /// When infeasible because of memory: the smallest peak achievable by any assignment that
  /// avoids forbidden choices (proven unless min_peak_proven is false); -1 otherwise.
  int64_t min_peak_usage = -1;
  bool min_peak_proven = false;
  /// Seconds per phase: "reduce", "warm start", "mip", "map back" (and "min peak").
  std::vector<std::pair<std::string, double>> phase_seconds;
  int32_t reduced_nodes = 0;    ///< size of the problem the exact search saw
  int32_t reduced_edges = 0;
  int64_t mip_variables = 0;    ///< 0 when no MIP was needed
  std::string method;           ///< what proved the answer: "reductions", "mip", "greedy", ...
  /// A phase stopped at the deadline rather than on its own limits (or the solve ended past
  /// it): the answer may depend on the machine's speed and load.
  bool clock_stopped = false;
};

/// Solves `p` (throws std::invalid_argument if p.validate() fails).
SolveResult solve(const Problem& p, const SolverOptions& opt = {});

}  // namespace autoshard

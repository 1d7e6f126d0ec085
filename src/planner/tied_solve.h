#pragma once
/// One solve of a built problem, as the planner does it: tie repeated layers (cluster.h), solve
/// without the memory limit first (every reduction applies) and, only when that optimum does
/// not fit, again under the limit (on the exact tied memory model where the tie
/// over-estimates, exact_tied.h); prove infeasibility from the memory floor when even the
/// least-memory layout does not fit.  ShardingOptimizer::get_solution runs it once for the
/// additive objective and once per multiplier for the overlap-aware one (overlap_solve.h).
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "planner/cluster.h"
#include "planner/options.h"
#include "planner/problem_builder.h"
#include "solver/solver.h"

namespace autoshard {

struct TiedSolve;

struct TiedSolveInput {
  const Graph& graph;
  const BuiltProblem& bp;
  const PlannerOptions& options;
  /// Parameter-memory constraints live in the usage limit: never relaxed.
  bool has_shadows = false;
  /// The layer ties of `graph` (find_layer_ties), found once for repeated solves; nullptr:
  /// find them.
  const std::vector<std::pair<NodeIdx, NodeIdx>>* ties = nullptr;
  /// A full assignment to start from, or empty.
  std::vector<StrategyIdx> warm_start;
  std::chrono::steady_clock::time_point deadline;
  /// Stop after the memory-free solve (the device limit relaxed; parameter-memory rows, when
  /// there are any, kept): its bound holds under the limit too; TiedSolve::fits says whether
  /// its plan fits.  Deterministic where a memory-limited search might stop at the deadline.
  bool relaxed_only = false;
  /// The overlap objective's first solve (overlap_solve.h): a memory-free solve of the same
  /// problem already made (ShardingOptimizer's recompute probe), reused when it is proven
  /// optimal and fits -- the full solve would end at the same proof.  nullptr: none.
  const TiedSolve* first_solve = nullptr;
  /// Most message-passing iterations per solve (SolverOptions::message_passing_iterations);
  /// 0: the solver's default.
  int message_passing_iterations = 0;
  /// Messages to start the memory-free solve's message passing from, replaced by its own
  /// (SolverOptions::messages); nullptr: none.
  MessageMemory* messages = nullptr;
  /// The memory floor (TiedSolve::peak_floor) of a solve of a problem with the same usages (the
  /// overlap dual's first solve: the multipliers scale costs only), reused instead of
  /// recomputed; -2: unknown.
  int64_t known_peak_floor = -2;
  /// The memory-free solve stops where message passing does not prove its optimum
  /// (SolverOptions::bound_only) instead of running the MIP: for a caller that wants a good
  /// plan quickly and has no use for its bound (the overlap objective's additive solve: an
  /// additive bound bounds nothing of the overlapped step, overlap_solve.h).  A plan that must
  /// be found under the memory limit is searched for as usual.
  bool quick_relaxed = false;
};

/// Message-passing iterations of a quick_relaxed solve under PlannerOptions::work_limited:
/// without a work limit it has a tenth of the time left, which on llama3-405b's pipeline
/// stages (10 s each) was 590-740 iterations idle, fewer under load; this fixes it near that.
inline constexpr int kQuickRelaxedIterations = 600;

struct TiedSolve {
  SolveResult r;          ///< on cp.problem (choice is tied: cp.expand() gives the full one)
  ClusteredProblem cp;
  int64_t peak_floor = -1;  ///< peak of the least-memory layout when a limit applies, else -1
  double cluster_seconds = 0;
  bool fits = true;  ///< false: relaxed_only stopped with a plan over the memory limit
  /// A solve stopped at the deadline rather than on its own limits, or the call ended past
  /// it (SolveResult::clock_stopped): the answer may depend on the machine's load.
  bool clock_stopped = false;
};

TiedSolve solve_tied(const TiedSolveInput& in);

}  // namespace autoshard

#pragma once
/// An exact memory model for tied problems whose class usages over-estimate.
///
/// Clustering ties repeated layers and counts a class as m x its members' usage over the union
/// of their intervals (cluster.h).  That is safe for plans -- a tied plan that fits there fits
/// for real -- but it rejects tied plans that do fit, and a bound proved on it bounds only the
/// plans that fit the over-estimate, so the planner reported the memory-free optimum as its
/// bound (issue 12: gap 8.6 % on llama3-8b 2x8 at 20 GiB).  The exact model: each class keeps
/// its first member's usage and interval, and every other member becomes a zero-cost shadow
/// node over its own interval whose strategies are the member's distinct usages, tied to the
/// class by an edge that allows only the matching usage.  The anytime reductions fold the
/// shadows back into their class as memory pieces, so the search and its Lagrangian bound see
/// one group per class but the members' true lifetimes.
#include <cstdint>
#include <vector>

#include "planner/cluster.h"
#include "problem/problem.h"
#include "solver/solver.h"

namespace autoshard {

struct ExactTiedProblem {
  /// cp's costs and edges, the untied problem's usages, intervals and limit; nodes
  /// 0 .. num_classes-1 are the classes, the rest are shadows.
  Problem problem;
  PNodeIdx num_classes = 0;
  /// Per shadow: its class, and its strategy for each strategy of the class.
  std::vector<PNodeIdx> shadow_class;
  std::vector<std::vector<StrategyIdx>> shadow_choice;

  /// Choice for every node of `problem` from a choice per class (empty stays empty).
  std::vector<StrategyIdx> extend(const std::vector<StrategyIdx>& class_choice) const;
  /// The classes' part of a choice for `problem`.
  std::vector<StrategyIdx> classes(const std::vector<StrategyIdx>& choice) const;
};

/// The exact model of `cp`, tied from `full`: a class choice extended to the shadows has the
/// same cost as in cp.problem and the same usage at every time point as the untied plan it
/// expands to.  Throws std::invalid_argument if a class's members have different strategy
/// counts.
ExactTiedProblem exact_memory_tied_problem(const Problem& full, const ClusteredProblem& cp);

/// Solves the exact model: small ones with solve(), larger ones with the anytime search (its
/// reductions fold the shadows back; the memory rows of solve() would list every shadow of the
/// live layers at every time point, which its MIP and greedy cannot afford), a share of the
/// time going to the memory-aware Lagrangian bound.  The result is in class terms: choice, objective and bound as for cp.problem, status
/// kOptimal when the bound meets the plan, kFeasible with a plan, kTimedOut without one (the
/// search proves no infeasibility), kInfeasible when no finite-cost plan exists at all.
/// opt.warm_start, when it is a full choice of et.problem, is the first incumbent.
/// allow_mip = false sends every size to the anytime search (for tests).
SolveResult solve_exact_tied(const ExactTiedProblem& et, const SolverOptions& opt, bool allow_mip = true);

}  // namespace autoshard

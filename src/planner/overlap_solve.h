#pragma once
/// Minimising the overlap-aware step time T(x) (overlap.h) with a proven bound.
///
/// The additive optimum is solved first: its T is the first upper bound and its preferred
/// multipliers (1 where its windows hide all their communication, else 0) the first centre.
/// T(x) = max over mu of A(x) - sum_s [mu_k(s) H_s(x) + (1 - mu_k(s)) W_s(x)], so for every
/// mu the ordinary problem with those costs (scale_overlap_costs) has an optimum L(mu) <= min T
/// (weak duality).  The loop maximises the concave L by Kelley's cutting planes: every plan x
/// it meets gives the plane A(x) - sum_k [mu_k H_k(x) + (1 - mu_k) W_k(x)] >= L(mu), the master
/// LP (solver/cutting_plane.h) proposes the next mu within a trust region around the best
/// multipliers so far (halved when a solve brings no better bound), and each solve (solve_tied) both raises
/// the bound (its proven lower bound on L(mu)) and offers a plan whose true T is evaluated.  It
/// stops when the best plan meets the bound, when the planes leave no room above the bound,
/// after kMaxOverlapSolves solves, or at the deadline; the gap left is the Lagrangian duality
/// gap of a discrete choice, reported as is.
#include <string>
#include <utility>
#include <vector>

#include "planner/overlap.h"
#include "planner/tied_solve.h"

namespace autoshard {

/// Solves at most: the additive optimum, then the dual's.
inline constexpr int kMaxOverlapSolves = 8;
/// Dual solves in a row that may leave the bound where it is before the dual stops.
inline constexpr int kMaxStalledSolves = 2;
/// Message-passing iterations per dual solve: its bound holds at any iteration, and where it
/// has not met its plan by then it rises slowly (llama3-8b 8x8: 1,450 iterations for the
/// last 0.1 % of two dual solves, half of the planning time).  200 gave the same plans and
/// bounds as 400 on llama3-8b 2x8 and 8x8, llama3-70b 8x8 and 8x8x8 (pp) and llama3-8b 2x4x8
/// (pp), in 15-25 % less time; 150 lowered the 8b pipeline's bound and 100 its plan too
/// (docs/benchmarks.md).
inline constexpr int kDualIterations = 200;
/// The first dual solve's: its multipliers are a guess around the additive plan's regimes, and
/// its bound is soon left behind (llama3-70b 8x8x8: 196.5 ms, against 229.2 ms two solves
/// later), so its plan -- a plane for the master -- is what it is for, and 400 iterations
/// gave the same plan and the same final answer on every benchmark case as 100.
inline constexpr int kFirstDualIterations = 100;
/// The dual solves relax the memory limit (solve_tied's relaxed_only): the memory-free L(mu)
/// is still a lower bound on min T, each solve ends at a proof rather than at a time limit (so
/// plans do not depend on the machine's speed), and only their plans that fit are candidates.

struct OverlapSolve {
  TiedSolve last;                    ///< the last solve (its cp and statistics)
  SolveStatus status = SolveStatus::kInfeasible;
  std::vector<StrategyIdx> choice;   ///< full assignment of the best plan; empty if none
  double objective_us = kInfCost;    ///< T of the best plan
  double lower_bound_us = -kInfCost; ///< proven: min T >= this
  int solves = 0;
  std::vector<double> mu;            ///< the multipliers of the best bound
  std::vector<std::pair<std::string, double>> phase_seconds;  ///< summed over the solves
  /// A solve stopped at the deadline, or the dual loop did (TiedSolve::clock_stopped).
  bool clock_stopped = false;
};

/// `in.bp` is the built problem with its true costs; `in.warm_start` may be empty.
OverlapSolve solve_overlap(const TiedSolveInput& in, const OverlapModel& m);

}  // namespace autoshard

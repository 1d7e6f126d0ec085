#pragma once
/// Cheap lower bounds on the optimum (memory ignored, so valid for the constrained problem).
#include "problem/problem.h"
#include "solver/group_model.h"

namespace autoshard {

/// Each node's unary cost is split evenly over its edges; the bound is the sum over edges of
/// the minimum of (edge cost + the two shares), plus minima of isolated nodes, plus the offset.
/// Returns +inf if some edge or node has no finite choice.
Cost edge_split_lower_bound(const GroupModel& m);
/// Same bound on a plain Problem.
Cost edge_split_lower_bound(const Problem& p);

/// Memory-aware Lagrangian bound: prices lambda_t >= 0 on the time segments' memory rows turn
/// usage into unary penalties; for any prices, (TRW-S bound of cost + penalties) +
/// sum_t lambda_t (base_t - limit) + offset is a lower bound on the constrained optimum.  The
/// prices follow projected subgradient steps (subgradient.h: Polyak steps towards
/// `upper_bound`, the cost of a known feasible solution, offset included) from the TRW-S
/// labeling's usage profile, for up to `time_s` seconds.  Returns the best bound seen (at least the memory-free TRW-S bound).
Cost lagrangian_memory_bound(const GroupModel& m, Cost upper_bound, double time_s);

}  // namespace autoshard

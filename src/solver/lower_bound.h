#pragma once
/// Cheap lower bounds on the optimum (memory ignored, so valid for the constrained problem).
#include "problem/problem.h"
#include "solver/anytime_reduce.h"

namespace autoshard {

/// Each node's unary cost is split evenly over its edges; the bound is the sum over edges of
/// the minimum of (edge cost + the two shares), plus minima of isolated nodes, plus the offset.
/// Returns +inf if some edge or node has no finite choice.
Cost edge_split_lower_bound(const GroupModel& m);
/// Same bound on a plain Problem.
Cost edge_split_lower_bound(const Problem& p);

}  // namespace autoshard

#pragma once
/// Kelley's cutting-plane master for maximising a concave function given by supporting
/// planes: each cut i says f(mu) <= a_i + b_i . mu, and the master finds
///     max_{mu in [0,1]^K} min_i (a_i + b_i . mu)
/// as a linear program (Clp).  Its value bounds max f from above; the planner's overlap dual
/// (planner/overlap.h) evaluates f at the maximiser to add the next cut.
/// (J. E. Kelley, "The cutting-plane method for solving convex programs", SIAM J. 1960.)
#include <vector>

namespace autoshard {

struct PlaneCut {
  double a = 0;
  std::vector<double> b;  ///< one per dimension
};

struct CutMaximum {
  std::vector<double> mu;  ///< the maximiser, each in [0, 1]
  double value = 0;        ///< min over cuts at mu (an upper bound on max f)
};

/// Needs at least one cut; every cut's `b` has `dims` entries.  With `lo`/`hi` (one entry per
/// dimension, inside [0, 1]) the maximiser is searched in that box only (a trust region that
/// keeps the method from jumping between the corners of [0,1]^K).  Deterministic.
CutMaximum maximize_cut_model(const std::vector<PlaneCut>& cuts, size_t dims,
                              const std::vector<double>& lo = {}, const std::vector<double>& hi = {});

}  // namespace autoshard

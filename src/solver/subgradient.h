#pragma once
/// Projected subgradient ascent on memory-row prices lambda >= 0, the step rule both Lagrangian
/// relaxations use (lagrangian.h on plain Problems, lower_bound.h on the group model).
///
/// The step is Polyak's (B. T. Polyak, "Minimization of unsmooth functionals", 1969):
///     lambda <- max(0, lambda + theta * (target - dual) / |g|^2 * g),
/// with g the rows' overflow (load - limit) at the priced optimum and `target` a primal value
/// (or an estimate of the optimum).  theta shrinks whenever the dual has not improved for
/// `patience` steps (the usual safeguard, Held, Wolfe and Crowder 1974).
#include <cstddef>
#include <limits>
#include <vector>

namespace autoshard {

class Subgradient {
 public:
  /// `shrink`: factor applied to theta after `patience` steps without a better dual.
  Subgradient(int patience, double shrink) : patience_(patience), shrink_(shrink) {}

  /// Records the dual value reached at the current prices; true if it is the best so far.
  bool record(double dual) {
    if (dual > best_) {
      best_ = dual;
      since_best_ = 0;
      return true;
    }
    if (++since_best_ >= patience_) theta_ *= shrink_, since_best_ = 0;
    return false;
  }

  /// Components of g that would push a zero price below zero do not count (projection).
  static void project(const std::vector<double>& lambda, std::vector<double>& g) {
    for (size_t k = 0; k < g.size(); ++k)
      if (lambda[k] <= 0 && g[k] < 0) g[k] = 0;
  }

  /// One step from `dual` towards `target` along g.  Returns false when the prices cannot move
  /// (g is zero, or the step left every price where it was).
  bool step(std::vector<double>& lambda, const std::vector<double>& g, double target, double dual) const {
    double norm2 = 0;
    for (double x : g) norm2 += x * x;
    if (norm2 <= 0) return false;
    const double t = theta_ * (target - dual) / norm2;
    bool moved = false;
    for (size_t k = 0; k < g.size(); ++k) {
      const double next = lambda[k] + t * g[k] > 0 ? lambda[k] + t * g[k] : 0.0;
      moved = moved || next != lambda[k];
      lambda[k] = next;
    }
    return moved;
  }

  double theta() const { return theta_; }
  double best() const { return best_; }

 private:
  int patience_;
  double shrink_;
  double theta_ = 1.0;
  double best_ = -std::numeric_limits<double>::infinity();
  int since_best_ = 0;
};

}  // namespace autoshard

#include "solver/cutting_plane.h"

#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace autoshard {

CutMaximum maximize_cut_model(const std::vector<PlaneCut>& cuts, size_t dims,
                              const std::vector<double>& lo, const std::vector<double>& hi) {
  if (cuts.empty()) throw std::invalid_argument("maximize_cut_model: no cuts");
  // Columns: mu_0 .. mu_{K-1} in [0, 1], then t (free).  Rows: t - b_i . mu <= a_i.
  const int ncols = static_cast<int>(dims) + 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> collb(static_cast<size_t>(ncols), 0.0), colub(static_cast<size_t>(ncols), 1.0);
  std::vector<double> obj(static_cast<size_t>(ncols), 0.0);
  for (size_t k = 0; k < dims; ++k) {
    if (k < lo.size()) collb[k] = std::clamp(lo[k], 0.0, 1.0);
    if (k < hi.size()) colub[k] = std::clamp(hi[k], collb[k], 1.0);
  }
  collb.back() = -inf;
  colub.back() = inf;
  obj.back() = -1;  // Clp minimises: maximise t
  std::vector<int> row_start{0}, idx;
  std::vector<double> val, rlb, rub;
  for (const PlaneCut& c : cuts) {
    if (c.b.size() != dims) throw std::invalid_argument("maximize_cut_model: cut of wrong size");
    for (size_t k = 0; k < dims; ++k)
      if (c.b[k] != 0) {
        idx.push_back(static_cast<int>(k));
        val.push_back(-c.b[k]);
      }
    idx.push_back(ncols - 1);
    val.push_back(1);
    row_start.push_back(static_cast<int>(idx.size()));
    rlb.push_back(-inf);
    rub.push_back(c.a);
  }
  CoinPackedMatrix mat(false, ncols, static_cast<int>(cuts.size()), row_start.back(), val.data(),
                       idx.data(), row_start.data(), nullptr);
  ClpSimplex clp;
  clp.setLogLevel(0);
  clp.loadProblem(mat, collb.data(), colub.data(), obj.data(), rlb.data(), rub.data());
  clp.primal();
  if (clp.status() != 0) throw std::runtime_error("maximize_cut_model: the master LP did not solve");
  const double* x = clp.primalColumnSolution();
  CutMaximum out;
  out.mu.assign(x, x + dims);
  for (size_t k = 0; k < dims; ++k) out.mu[k] = std::clamp(out.mu[k], collb[k], colub[k]);
  // The value at the (clamped) maximiser, from the cuts themselves rather than the LP's
  // floating-point objective.
  out.value = inf;
  for (const PlaneCut& c : cuts) {
    double v = c.a;
    for (size_t k = 0; k < dims; ++k) v += c.b[k] * out.mu[k];
    out.value = std::min(out.value, v);
  }
  return out;
}

}  // namespace autoshard

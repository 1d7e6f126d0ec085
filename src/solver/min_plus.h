#pragma once
/// The degree-2 elimination's min-plus product (reducer.cc): a node v between u and w is
/// removed, and the new u - w edge holds, for each pair (p, r), the cheapest way through v,
///     m[p * kw + r] = min over q of ( through(q, p) + onward(q, r) ),
/// where through(q, p) is v's cost plus the u - v edge's and onward(q, r) the v - w edge's.
/// arg holds the minimising q, the first in `order` on ties (so the reducer's preference among
/// equal-cost strategies -- least usage, lowest index -- is kept), or -1 where every way is
/// +inf.
#include <cstdint>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

struct MinPlusProduct {
  std::vector<Cost> m;        ///< ku x kw, row-major
  std::vector<int32_t> arg;   ///< ku x kw: v's minimising strategy, -1 if none is finite
};

/// One row of the product: where x + onward[r] < row[r], row[r] takes it and arg[r] becomes
/// q.  Branch-free so that it vectorises (an AVX2 clone is picked at load time where the CPU
/// has it; the results are the same bits: a compare and a select, no reassociation).
void min_plus_row(double* row, double* arg, const double* onward, double x, double q, int32_t n);

/// The message-passing kernels (trws.cc) and the dominance test (reducer.cc): the inner loops
/// of the solver's hottest phases.  Each gives exactly the bits of the plain loop it replaces
/// (min is exact and order-free on numbers; the planner's reduced problems hold no NaN), but
/// keeps several partial minima at once so that the loop vectorises rather than waiting on one
/// chain of add-and-compare (the message-passing kernels and the dominance test were 35 % and 12 % of planning
/// llama3-70b on 8x8x8, docs/benchmarks.md "Round 3" of the overlap-aware objective).
/// out[t] = min(out[t], x + row[t]) for t < n.
void min_plus_into(double* out, const double* row, double x, int32_t n);
/// min over t < n of ((x + r[t]) + p[t]) - q[t], evaluated in that order; +inf when n is 0.
double min_plus_dot3(double x, const double* r, const double* p, const double* q, int32_t n);
/// Whether a[i] <= b[i] for every i < n (false if some a[i] > b[i]).
bool all_at_most(const double* a, const double* b, int32_t n);

/// The product for v's strategies in `order` (each of 0 .. |S_v|-1 once).
template <class Through, class Onward>
MinPlusProduct min_plus_product(int32_t ku, int32_t kw, const std::vector<int32_t>& order, Through through,
                                Onward onward) {
  const size_t n = static_cast<size_t>(ku) * static_cast<size_t>(kw);
  MinPlusProduct out;
  out.m.assign(n, kInfCost);
  // The argmin is kept as a double beside the cost (exact for any strategy index), so that both
  // arrays take the same vector lanes.
  std::vector<double> argd(n, -1);
  std::vector<Cost> col(static_cast<size_t>(kw));
  for (const int32_t q : order) {
    for (int32_t r = 0; r < kw; ++r) col[static_cast<size_t>(r)] = onward(q, r);
    for (int32_t p = 0; p < ku; ++p) {
      const Cost x = through(q, p);
      if (!(x < kInfCost)) continue;
      const size_t at = static_cast<size_t>(p) * static_cast<size_t>(kw);
      min_plus_row(&out.m[at], &argd[at], col.data(), x, q, kw);
    }
  }
  out.arg.resize(n);
  for (size_t i = 0; i < n; ++i) out.arg[i] = static_cast<int32_t>(argd[i]);
  return out;
}

}  // namespace autoshard

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

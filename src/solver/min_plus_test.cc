#include "solver/min_plus.h"

#include <gtest/gtest.h>

#include <random>

namespace autoshard {
namespace {

/// v has 3 strategies between u (2) and w (2).  through[q][p] = v's cost + u - v edge,
/// onward[q][r] = v - w edge; by hand:
///   (p=0, r=0): q0 1+4=5, q1 2+3=5, q2 inf  -> 5, tie: the first in `order`
///   (p=0, r=1): q0 1+0=1, q1 2+9=11       -> 1 (q0)
///   (p=1, r=0): q0 inf, q1 inf, q2 inf    -> inf, arg -1
///   (p=1, r=1): likewise                  -> inf, arg -1
TEST(MinPlus, HandComputedProductWithTiesAndInfinities) {
  const Cost inf = kInfCost;
  const Cost through[3][2] = {{1, inf}, {2, inf}, {inf, inf}};
  const Cost onward[3][2] = {{4, 0}, {3, 9}, {0, 0}};
  auto t = [&](int32_t q, int32_t p) { return through[q][p]; };
  auto o = [&](int32_t q, int32_t r) { return onward[q][r]; };
  const MinPlusProduct a = min_plus_product(2, 2, {0, 1, 2}, t, o);
  EXPECT_EQ(a.m, (std::vector<Cost>{5, 1, inf, inf}));
  EXPECT_EQ(a.arg, (std::vector<int32_t>{0, 0, -1, -1}));
  const MinPlusProduct b = min_plus_product(2, 2, {1, 0, 2}, t, o);  // q1 preferred on ties
  EXPECT_EQ(b.m, a.m);
  EXPECT_EQ(b.arg, (std::vector<int32_t>{1, 0, -1, -1}));
}

/// Against the plain triple loop on random matrices (both vectorised and not, the same bits).
TEST(MinPlus, MatchesTheTripleLoop) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> cost(0, 30);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t ku = 1 + trial % 7, k = 1 + trial % 5, kw = 1 + trial % 11;
    std::vector<Cost> th(static_cast<size_t>(k * ku)), on(static_cast<size_t>(k * kw));
    for (Cost& c : th) c = cost(rng) == 0 ? kInfCost : cost(rng) * 0.5;
    for (Cost& c : on) c = cost(rng) == 0 ? kInfCost : cost(rng) * 0.25;
    std::vector<int32_t> order(static_cast<size_t>(k));
    for (int32_t q = 0; q < k; ++q) order[static_cast<size_t>(q)] = q;  // index order, as the loop
    const MinPlusProduct mp = min_plus_product(
        ku, kw, order, [&](int32_t q, int32_t p) { return th[static_cast<size_t>(q * ku + p)]; },
        [&](int32_t q, int32_t r) { return on[static_cast<size_t>(q * kw + r)]; });
    for (int32_t p = 0; p < ku; ++p)
      for (int32_t r = 0; r < kw; ++r) {
        Cost best = kInfCost;
        int32_t arg = -1;
        for (int32_t q = 0; q < k; ++q) {
          const Cost c = th[static_cast<size_t>(q * ku + p)] + on[static_cast<size_t>(q * kw + r)];
          if (c < best) best = c, arg = q;
        }
        EXPECT_EQ(mp.m[static_cast<size_t>(p * kw + r)], best) << trial;
        EXPECT_EQ(mp.arg[static_cast<size_t>(p * kw + r)], arg) << trial;
      }
  }
}

}  // namespace
}  // namespace autoshard

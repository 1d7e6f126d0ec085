#include "solver/min_plus.h"

#include <gtest/gtest.h>

#include <algorithm>
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

/// The message-passing kernels and the dominance test against their plain loops: the same
/// bits, on random rows with infinities, of every length around the kernels' blocks of eight.
TEST(MinPlus, KernelsMatchThePlainLoops) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> cost(0, 40);
  auto value = [&] { return cost(rng) == 0 ? kInfCost : cost(rng) * 0.37 - 3; };
  for (int32_t n = 0; n <= 37; ++n)
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE("n " + std::to_string(n) + " trial " + std::to_string(trial));
      std::vector<double> a(static_cast<size_t>(n)), b(a), c(a), out(a);
      for (size_t i = 0; i < a.size(); ++i) a[i] = value(), b[i] = value(), c[i] = value(), out[i] = value();
      if (trial % 3 == 0) c = a;  // equal and nearly equal rows, where the dominance test runs
      if (trial % 3 == 1 && n > 0) c = a, c[static_cast<size_t>(trial) % a.size()] -= 1;
      const double x = value() == kInfCost ? 0.5 : cost(rng) * 0.25;
      std::vector<double> want = out;
      for (size_t t = 0; t < want.size(); ++t) want[t] = std::min(want[t], x + a[t]);
      std::vector<double> got = out;
      min_plus_into(got.data(), a.data(), x, n);
      EXPECT_EQ(got, want);
      // b must stay finite here: inf - inf is NaN, which the planner's problems never hold.
      for (double& v : b) v = v == kInfCost ? 7 : v;
      double best = kInfCost;
      for (size_t t = 0; t < a.size(); ++t) best = std::min(best, x + a[t] + c[t] - b[t]);
      EXPECT_EQ(min_plus_dot3(x, a.data(), c.data(), b.data(), n), best);
      bool at_most = true;
      for (size_t i = 0; i < a.size(); ++i) at_most = at_most && !(c[i] > a[i]);
      EXPECT_EQ(all_at_most(c.data(), a.data(), n), at_most);
    }
}

}  // namespace
}  // namespace autoshard

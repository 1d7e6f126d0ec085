#include "solver/mip.h"

#include <gtest/gtest.h>

#include <random>

#include "solver/reduce.h"
#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

/// Edges whose costs depend on a few classes of strategies (as repeated layers' edges depend on
/// a few distinct specs): equal rows, equal columns, one-sided costs and forbidden class pairs,
/// the cases the class-compressed formulation treats specially.
Problem class_structured(uint32_t seed) {
  Problem p = testing::random_problem(seed, {.min_nodes = 3, .max_nodes = 7, .max_strategies = 5});
  std::mt19937 rng(seed * 7919u + 1);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (ProblemEdge& e : p.edges) {
    const size_t ku = p.nodes[static_cast<size_t>(e.u)].costs.size();
    const size_t kv = p.nodes[static_cast<size_t>(e.v)].costs.size();
    const int kind = uni(0, 3);
    const int ca = uni(1, 3), cb = uni(1, 3);
    const int forbid = uni(0, 8);
    for (size_t a = 0; a < ku; ++a)
      for (size_t b = 0; b < kv; ++b) {
        const int ka = static_cast<int>(a) % ca, kb = static_cast<int>(b) % cb;
        Cost c = 0;
        if (kind == 0) c = ka * 4 + kb * 3 + (ka == kb ? 0 : 5);  // classes on both ends
        else if (kind == 1) c = kb * 2 + 1;                       // depends on v only
        else if (kind == 2) c = ka * 3;                           // depends on u only
        else c = 6;                                               // constant
        if (forbid == ka * 3 + kb) c = kInfCost;                  // a forbidden class pair
        e.costs[a * kv + b] = c;
      }
  }
  return p;
}

TEST(MipClasses, MatchesBruteForceOnClassStructuredEdges) {
  int solved = 0, by_root = 0, by_branching = 0;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    SCOPED_TRACE(seed);
    const Problem p = class_structured(seed);
    const testing::Brute b = testing::brute_force(p);
    const std::vector<MemoryRow> rows = memory_rows(p, {}, true);
    MipOptions o;
    o.time_limit_s = 20;
    const MipResult m = solve_cost_mip(p, rows, {}, o);
    if (!b.feasible) {
      EXPECT_TRUE(m.choice.empty() || m.status == MipStatus::kInfeasible);
      continue;
    }
    ASSERT_EQ(m.status, MipStatus::kOptimal);
    ASSERT_EQ(m.choice.size(), p.nodes.size());
    EXPECT_NEAR(evaluate_cost(p, m.choice), b.cost, 1e-6);
    EXPECT_NEAR(m.objective, b.cost, 1e-6);
    if (p.usage_limit >= 0) {
      EXPECT_LE(peak_usage(p, m.choice), p.usage_limit);
    }
    ++solved;
    (m.root_integral ? by_root : by_branching) += 1;
  }
  EXPECT_GT(solved, 60);
  // Both ways of proving are exercised: an integral LP relaxation, and CBC's branch and bound.
  EXPECT_GT(by_root, 10);
  EXPECT_GT(by_branching, 0);
}

TEST(MipClasses, WarmStartThroughFoldedAndClassEdges) {
  // A warm start must survive the compression: the optimum given as the warm start comes back.
  for (uint32_t seed = 200; seed <= 240; ++seed) {
    SCOPED_TRACE(seed);
    const Problem p = class_structured(seed);
    const testing::Brute b = testing::brute_force(p);
    if (!b.feasible) continue;
    MipOptions o;
    o.time_limit_s = 20;
    const MipResult m = solve_cost_mip(p, memory_rows(p, {}, true), b.choice, o);
    ASSERT_EQ(m.status, MipStatus::kOptimal);
    EXPECT_NEAR(evaluate_cost(p, m.choice), b.cost, 1e-6);
  }
}

/// Two strategies per node; every edge costs `same` when both ends pick the same strategy and 0
/// otherwise.
Problem two_coloring(int n, const std::vector<std::pair<int, int>>& edges, Cost same) {
  Problem p;
  for (int i = 0; i < n; ++i) p.nodes.push_back({"n" + std::to_string(i), {0, 0}, {0, 0}, 0, 0});
  p.nodes[0].costs = {0, 3};  // breaks the symmetry between the colourings
  for (auto [u, v] : edges) p.edges.push_back({u, v, {same, 0, 0, same}});
  return p;
}

TEST(MipRoot, IntegralRelaxationProvesWithoutBranching) {
  // On a path the LP relaxation is exact (a tree's local polytope is integral): the child's
  // dual simplex alone proves the optimum 0 (alternating strategies).
  const Problem p = two_coloring(5, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, 10);
  MipOptions o;
  o.time_limit_s = 20;
  const MipResult m = solve_cost_mip(p, {}, {}, o);
  ASSERT_EQ(m.status, MipStatus::kOptimal);
  EXPECT_TRUE(m.root_integral);
  EXPECT_EQ(m.choice, (std::vector<StrategyIdx>{0, 1, 0, 1, 0}));
  EXPECT_EQ(m.objective, 0);
  EXPECT_EQ(m.bound, 0);
}

TEST(MipRoot, FractionalRelaxationGoesToBranchAndBound) {
  // An odd cycle cannot alternate: the optimum is 10 (one edge with equal ends), while the LP
  // relaxation sets every s to 1/2 and costs 0 (plus the 1.5 of node 0's halves).  CBC must
  // take over from the fractional root and prove 10.
  const Problem p = two_coloring(3, {{0, 1}, {1, 2}, {0, 2}}, 10);
  MipOptions o;
  o.time_limit_s = 20;
  const MipResult m = solve_cost_mip(p, {}, {}, o);
  ASSERT_EQ(m.status, MipStatus::kOptimal);
  EXPECT_FALSE(m.root_integral);
  EXPECT_EQ(m.objective, 10);
  EXPECT_EQ(evaluate_cost(p, m.choice), 10);
  EXPECT_EQ(m.choice[0], 0);
}

}  // namespace
}  // namespace autoshard

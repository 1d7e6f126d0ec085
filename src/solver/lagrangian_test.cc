#include "solver/lagrangian.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

TEST(Lagrangian, BoundNeverExceedsOptimumAndPlansFit) {
  int found = 0;
  for (uint32_t seed = 1000; seed < 1300; ++seed) {
    Problem p = testing::random_problem(seed);
    if (p.usage_limit < 0) continue;
    auto want = testing::brute_force(p);
    std::vector<MemoryRow> rows = memory_rows(p, {}, true);
    if (rows.empty()) continue;
    LagrangianResult lr = lagrangian_memory(p, rows, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    ASSERT_TRUE(lr.applicable);
    if (want.feasible) {
      EXPECT_LE(lr.lower_bound, want.cost + 1e-9) << "seed " << seed;
    }
    if (!lr.best_feasible.empty()) {
      ++found;
      EXPECT_LE(peak_usage(p, lr.best_feasible), p.usage_limit) << "seed " << seed;
      EXPECT_EQ(lr.best_cost, evaluate_cost(p, lr.best_feasible));
      EXPECT_GE(lr.best_cost, want.cost) << "seed " << seed;
    }
  }
  EXPECT_GT(found, 20);
}

/// A complete graph elimination cannot take (every node has 13 neighbours of 8 strategies):
/// the relaxation falls back to the heuristic priced solver -- no bound, but a plan that fits.
TEST(Lagrangian, HeuristicPricedSolverWhenEliminationCannot) {
  std::mt19937 rng(11);
  Problem p;
  const int n = 14, k = 8;
  for (int v = 0; v < n; ++v) {
    ProblemNode nd;
    for (int s = 0; s < k; ++s) {
      nd.costs.push_back(std::uniform_int_distribution<int>(0, 20)(rng));
      nd.usages.push_back(std::uniform_int_distribution<int>(0, 10)(rng));
    }
    nd.start = 0;
    nd.end = 1;
    p.nodes.push_back(nd);
  }
  for (int u = 0; u < n; ++u)
    for (int v = u + 1; v < n; ++v) {
      ProblemEdge e{u, v, {}};
      for (int a = 0; a < k * k; ++a) e.costs.push_back(std::uniform_int_distribution<int>(0, 9)(rng));
      p.edges.push_back(e);
    }
  ASSERT_FALSE(solve_by_elimination(p));
  const int64_t lo = peak_usage(p, least_usage_choice(p));
  p.usage_limit = lo + 10;  // most cheap choices overflow
  const std::vector<MemoryRow> rows = memory_rows(p, {}, true);
  ASSERT_FALSE(rows.empty());
  const LagrangianResult lr = lagrangian_memory(p, rows, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(lr.applicable);
  EXPECT_FALSE(lr.exact);
  EXPECT_EQ(lr.lower_bound, -kInfCost);
  ASSERT_FALSE(lr.best_feasible.empty());
  EXPECT_LE(peak_usage(p, lr.best_feasible), p.usage_limit);
  EXPECT_EQ(lr.best_cost, evaluate_cost(p, lr.best_feasible));
}

}  // namespace
}  // namespace autoshard

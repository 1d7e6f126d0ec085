#include "solver/group_bnb.h"

#include <gtest/gtest.h>

#include <cmath>

#include "solver/anytime.h"
#include "solver/lower_bound.h"
#include "solver/reduce.h"
#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

using testing::brute_force;
using testing::random_problem;

/// Two groups, one segment, limit 10, offset 5: each group has a "keep" strategy (usage 6,
/// cost 0) and a "shrink" strategy (usage 0, cost 10 for a, 9 for b); the edge adds 1 when both
/// keep, which needs 12 > 10 and so never happens in a plan.  The LP keeps a fully and b by two
/// thirds (6 + 4 = 10): 9/3 for b's shrink share plus 2/3 on the edge, 5 + 11/3 in all.  The
/// optimum keeps a and shrinks b: 5 + 9.
GroupModel knapsack_pair() {
  GroupModel m;
  m.unary = {{0, 10}, {0, 9}};
  GroupModel::Piece pa{0, 1, {6, 0}}, pb{0, 1, {6, 0}};
  m.pieces = {{pa}, {pb}};
  m.edges = {{0, 1, {1, 0, 0, 0}}};
  m.adj = {{{0, true}}, {{0, false}}};
  m.base = {0};
  m.limit = 10;
  m.offset = 5;
  return m;
}

TEST(GroupBnb, KnapsackPairHasExactOptimumAndProof) {
  const GroupModel m = knapsack_pair();
  EXPECT_DOUBLE_EQ(group_cost(m, {0, 0}), 5 + 0 + 0 + 1);
  EXPECT_EQ(group_usage(m, {0, 0}), (std::vector<int64_t>{12}));
  EXPECT_EQ(group_usage(m, {0, 1}), (std::vector<int64_t>{6}));
  // The memory-aware Lagrangian bound cannot pass the LP value 5 + 11/3.
  EXPECT_LE(lagrangian_memory_bound(m, 14, 0.05), 5 + 11.0 / 3 + 1e-6);
  const GroupBnbResult r = group_branch_and_bound(m, {}, {});
  ASSERT_TRUE(r.ran);
  EXPECT_TRUE(r.proven);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1}));
  EXPECT_DOUBLE_EQ(r.cost, 5 + 9);
  EXPECT_DOUBLE_EQ(r.lower_bound, 5 + 9);
  EXPECT_EQ(r.memory_rows, 1);
  EXPECT_GE(r.nodes, 2);  // the root is fractional
}

TEST(GroupBnb, WorseIncumbentIsImprovedAndKeptIfBest) {
  const GroupModel m = knapsack_pair();
  const GroupBnbResult r = group_branch_and_bound(m, {1, 1}, {});  // cost 5 + 19
  ASSERT_TRUE(r.ran);
  EXPECT_EQ(r.choice, (std::vector<int32_t>{0, 1}));
  const GroupBnbResult same = group_branch_and_bound(m, {0, 1}, {});
  EXPECT_EQ(same.choice, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(same.proven);
}

TEST(GroupBnb, CutoffStopsOnceNothingCheaperCanExist) {
  const GroupModel m = knapsack_pair();
  GroupBnbOptions opt;
  opt.cutoff = 5 + 10;  // above the optimum: the search runs to its proof
  EXPECT_TRUE(group_branch_and_bound(m, {}, opt).proven);
  opt.cutoff = 5 + 4;  // between the LP value (5 + 11/3) and the optimum (5 + 9)
  const GroupBnbResult r = group_branch_and_bound(m, {}, opt);
  ASSERT_TRUE(r.ran);
  EXPECT_GE(r.lower_bound, opt.cutoff * (1 - 1e-6));  // less the LP tolerance margin
  EXPECT_LE(r.lower_bound, 5 + 9);
}

TEST(GroupBnb, NothingFitsIsProven) {
  GroupModel m = knapsack_pair();
  m.base = {5};  // at least 5 + 0 + 0 fits ...
  m.limit = 4;   // ... but not under 4
  const GroupBnbResult r = group_branch_and_bound(m, {}, {});
  ASSERT_TRUE(r.ran);
  EXPECT_TRUE(r.proven);
  EXPECT_FALSE(r.found);
  EXPECT_EQ(r.lower_bound, kInfCost);
}

TEST(GroupBnb, NotAttemptedWithoutLimitOrBeyondTheColumnCap) {
  GroupModel m = knapsack_pair();
  GroupBnbOptions small;
  small.max_columns = 3;
  EXPECT_FALSE(group_branch_and_bound(m, {}, small).ran);
  small.max_columns = 1000;
  small.max_entries = 3;
  EXPECT_FALSE(group_branch_and_bound(m, {}, small).ran);
  m.limit = -1;
  EXPECT_FALSE(group_branch_and_bound(m, {}, {}).ran);
}

/// Random small problems: proven answers match brute force; the bound never passes it.
TEST(GroupBnb, MatchesBruteForceOnRandomProblems) {
  int proven_feasible = 0, proven_infeasible = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const Problem p = random_problem(seed);
    if (p.usage_limit < 0) continue;
    const auto brute = brute_force(p);
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible || m.limit < 0) continue;
    GroupBnbOptions opt;
    opt.time_limit_s = 2;
    const GroupBnbResult r = group_branch_and_bound(m, {}, opt);
    ASSERT_TRUE(r.ran) << seed;
    ASSERT_TRUE(r.proven) << seed;
    if (!brute.feasible) {
      EXPECT_FALSE(r.found) << seed;
      ++proven_infeasible;
      continue;
    }
    ASSERT_TRUE(r.found) << seed;
    const auto x = red.expand(r.choice);
    EXPECT_NEAR(evaluate_cost(p, x), brute.cost, 1e-6) << seed;
    EXPECT_NEAR(r.cost, brute.cost, 1e-6) << seed;
    EXPECT_NEAR(group_cost(m, r.choice), r.cost, 1e-6) << seed;
    EXPECT_LE(peak_usage(p, x), p.usage_limit) << seed;
    EXPECT_NEAR(r.lower_bound, brute.cost, 1e-6) << seed;
    ++proven_feasible;
  }
  EXPECT_GT(proven_feasible, 50);
  EXPECT_GT(proven_infeasible, 3);
}

/// Stopped at a gap: the bound is below the optimum and within the gap of the plan.
TEST(GroupBnb, GapStopKeepsAValidBound) {
  int stopped_early = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    testing::RandomOptions o;
    o.min_nodes = 8;
    o.max_nodes = 10;
    o.max_strategies = 5;
    const Problem p = random_problem(seed, o);
    if (p.usage_limit < 0) continue;
    const auto brute = brute_force(p);
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible || m.limit < 0 || !brute.feasible) continue;
    GroupBnbOptions opt;
    opt.gap = 0.2;
    const GroupBnbResult r = group_branch_and_bound(m, {}, opt);
    ASSERT_TRUE(r.ran) << seed;
    ASSERT_TRUE(r.found) << seed;
    EXPECT_LE(r.lower_bound, brute.cost + 1e-6) << seed;
    EXPECT_GE(r.cost, brute.cost - 1e-6) << seed;
    EXPECT_LE(r.cost - r.lower_bound, 0.2 * std::abs(r.cost) + 1e-6) << seed;
    if (!r.proven) ++stopped_early;
  }
  EXPECT_GT(stopped_early, 0);
}

/// Through the anytime solver: with a share for the memory bound, small constrained problems
/// come back proven (bound == cost) and match brute force.
TEST(GroupBnb, AnytimeProvesSmallConstrainedOptima) {
  int proven = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    const Problem p = random_problem(seed);
    if (p.usage_limit < 0) continue;
    const auto brute = brute_force(p);
    if (!brute.feasible) continue;
    AnytimeOptions ao;
    ao.time_limit_s = 0.3;
    ao.threads = 1;
    ao.memory_bound_share = 0.5;
    const AnytimeResult r = solve_anytime(p, ao);
    ASSERT_TRUE(r.feasible) << seed;
    EXPECT_LE(r.lower_bound, brute.cost + 1e-6) << seed;
    if (r.lower_bound >= r.cost - 1e-6) {
      EXPECT_NEAR(r.cost, brute.cost, 1e-6) << seed;
      ++proven;
    }
  }
  EXPECT_GT(proven, 10);
}

}  // namespace
}  // namespace autoshard

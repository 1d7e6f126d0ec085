#include "solver/reduce.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

using testing::brute_force;
using testing::random_problem;

/// Reduces `p` with `opt` and checks against brute force: same optimum (original vs reduced
/// + constant, with base usage), and the mapped-back reduced optimum is an optimal, feasible
/// assignment of the original.
void check_reduction(const Problem& p, const ReduceOptions& opt, uint32_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  ASSERT_EQ(p.validate(), "");
  const auto bo = brute_force(p);
  ReducedProblem rp = reduce(p, opt);
  if (rp.infeasible) {
    EXPECT_EQ(bo.min_peak, -1) << "reductions claim infeasible but an allowed assignment exists";
    return;
  }
  ASSERT_EQ(rp.problem.validate(), "");
  for (const auto& e : rp.problem.edges) EXPECT_LT(e.u, e.v);
  const auto br = brute_force(rp.problem, rp.base);
  ASSERT_EQ(bo.feasible, br.feasible);
  if (!bo.feasible) return;
  EXPECT_NEAR(bo.cost, br.cost + rp.constant_cost, 1e-9);
  std::vector<StrategyIdx> back = rp.map_back(br.choice);
  EXPECT_NEAR(evaluate_cost(p, back), bo.cost, 1e-9);
  if (p.usage_limit >= 0) {
    EXPECT_LE(peak_usage(p, back), p.usage_limit);
  }
  // Memory rows of the reduced problem give the same peak as the base-augmented sweep.
  auto rows = memory_rows(rp.problem, rp.base, false);
  Problem q = rp.problem;
  for (const BaseUsage& b : rp.base) q.nodes.push_back({"", {0}, {b.usage}, b.start, b.end});
  std::vector<StrategyIdx> full = br.choice;
  full.resize(q.nodes.size(), 0);
  EXPECT_EQ(rows_peak(rp.problem, rows, br.choice), peak_usage(q, full));
}

struct RuleCase {
  const char* name;
  ReduceOptions opt;
};

ReduceOptions only(bool elim, bool dom, bool dec) {
  ReduceOptions o;
  o.eliminate = elim;
  o.dominance = dom;
  o.decompose = dec;
  return o;
}

class ReduceRandom : public ::testing::TestWithParam<int> {};

TEST_P(ReduceRandom, MatchesBruteForce) {
  const RuleCase cases[] = {
      {"forbidden+single+parallel only", only(false, false, false)},
      {"decompose", only(false, false, true)},
      {"dominance", only(false, true, false)},
      {"eliminate", only(true, false, false)},
      {"all", ReduceOptions{}},
      {"all, chains always", [] {
         ReduceOptions o;
         o.chain_growth_slack = 1 << 20;
         return o;
       }()},
  };
  const RuleCase& rc = cases[GetParam()];
  SCOPED_TRACE(rc.name);
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    testing::RandomOptions ro;
    ro.limit = seed % 5 != 0;
    check_reduction(random_problem(seed, ro), rc.opt, seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, ReduceRandom, ::testing::Range(0, 6));

TEST(Reduce, TreeWithoutLimitReducesToNothing) {
  // A star with a chain: no usage limit, so everything is memory-free and eliminated.
  Problem p;
  for (int i = 0; i < 6; ++i) p.nodes.push_back({"", {1.0 * i, 2, 3}, {1, 2, 3}, 0, 10});
  auto edge = [&](int u, int v) {
    ProblemEdge e{u, v, {}};
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) e.costs.push_back(a == b ? 0 : 5 + a);
    p.edges.push_back(e);
  };
  edge(0, 1), edge(0, 2), edge(0, 3), edge(3, 4), edge(4, 5);
  ReducedProblem rp = reduce(p);
  EXPECT_EQ(rp.problem.num_nodes(), 0);
  auto bo = brute_force(p);
  EXPECT_DOUBLE_EQ(rp.constant_cost, bo.cost);
  EXPECT_DOUBLE_EQ(evaluate_cost(p, rp.map_back({})), bo.cost);
}

TEST(Reduce, BindingMemoryKeepsVaryingUsageNodes) {
  // Leaf 1 is cheap with big usage; the limit binds, so the leaf must not be eliminated.
  Problem p;
  p.nodes.push_back({"", {0, 0}, {1, 1}, 0, 4});
  p.nodes.push_back({"", {0, 10}, {9, 1}, 0, 4});
  p.edges.push_back({0, 1, {0, 1, 1, 0}});
  p.usage_limit = 5;
  ReducedProblem rp = reduce(p);
  ASSERT_FALSE(rp.infeasible);
  auto br = brute_force(rp.problem, rp.base);
  EXPECT_DOUBLE_EQ(br.cost + rp.constant_cost, 10);  // node 1 must take strategy 1
  EXPECT_EQ(rp.map_back(br.choice)[1], 1);
}

TEST(Reduce, MemoryRowsKeepOnlyMaximalLiveSets) {
  Problem p;
  // Intervals: [0,4) [1,3) [2,6) [5,7): maximal live sets {0,1,2} at t=2, {2,3} at t=5.
  for (auto [s, e] : {std::pair{0, 4}, {1, 3}, {2, 6}, {5, 7}})
    p.nodes.push_back({"", {0, 0}, {1, 2}, s, e});
  p.usage_limit = 100;
  auto rows = memory_rows(p, {}, false);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].nodes, (std::vector<PNodeIdx>{0, 1, 2}));
  EXPECT_EQ(rows[1].nodes, (std::vector<PNodeIdx>{2, 3}));
  EXPECT_TRUE(memory_rows(p, {}, true).empty());  // limit 100 never binds
  // A base bump at [6,7) makes t=6 a row of its own ({3} + 5 is not dominated by {2,3} + 0).
  auto rows2 = memory_rows(p, {{6, 7, 5}}, false);
  ASSERT_EQ(rows2.size(), 3u);
  EXPECT_EQ(rows2[2].offset, 5);
}

TEST(Reduce, ParallelAndReversedEdgesAreSummed) {
  Problem p;
  p.nodes.push_back({"", {0, 0}, {0, 0}, 0, 1});
  p.nodes.push_back({"", {0, 0, 0}, {0, 0, 0}, 0, 1});
  p.edges.push_back({0, 1, {1, 2, 3, 4, 5, 6}});
  p.edges.push_back({1, 0, {1, 0, 0, 0, 0, 9}});
  ReduceOptions o = only(false, false, false);
  ReducedProblem rp = reduce(p, o);
  ASSERT_EQ(rp.problem.num_edges(), 1);
  EXPECT_EQ(rp.problem.edges[0].costs, (std::vector<Cost>{2, 2, 3, 4, 5, 15}));
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

/// 10k-node planner-like problem: a long chain of layers, each with a few side nodes, one hub
/// joined to every 10th node, and a usage limit that binds somewhere.  Reductions must be fast.
TEST(ReduceScale, TenThousandNodesIsFast) {
  for (bool tight : {false, true}) {
  const int n = 10000;
  Problem p = testing::planner_like(n, tight);
  auto t0 = std::chrono::steady_clock::now();
  ReducedProblem rp = reduce(p);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("10k nodes reduced to %d nodes %d edges in %.3f s\n", rp.problem.num_nodes(),
              rp.problem.num_edges(), s);
  EXPECT_LT(s, 5.0);
  if (!tight) {
    EXPECT_LT(rp.problem.num_nodes(), n / 2);
  }
  }
}

}  // namespace
}  // namespace autoshard

#include "solver/elimination.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "solver/anytime.h"
#include "solver/solver.h"
#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

using testing::brute_force;
using testing::random_problem;
using testing::RandomOptions;

TEST(Elimination, MatchesBruteForceWithoutMemory) {
  RandomOptions o;
  o.limit = false;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    Problem p = random_problem(seed, o);
    p.usage_limit = -1;
    auto got = solve_by_elimination(p);
    ASSERT_TRUE(got.has_value()) << "seed " << seed;
    auto want = brute_force(p);
    EXPECT_EQ(evaluate_cost(p, *got), want.cost) << "seed " << seed;
  }
}

TEST(Elimination, CutsetConditioningIsExact) {
  // Tiny table limits force conditioning on the denser random graphs.
  RandomOptions o;
  o.limit = false;
  o.min_nodes = 6;
  int conditioned = 0;
  for (uint32_t seed = 2000; seed < 2300; ++seed) {
    Problem p = random_problem(seed, o);
    p.usage_limit = -1;
    EliminationOptions eo;
    eo.max_table = 4;
    eo.max_work = 100000;
    EliminationStats st;
    auto got = solve_by_elimination(p, eo, &st);
    if (!got) continue;
    if (st.cut > 0) ++conditioned;
    EXPECT_EQ(evaluate_cost(p, *got), brute_force(p).cost) << "seed " << seed;
  }
  EXPECT_GT(conditioned, 10);
}

/// The work of eliminating `p` in the greedy smallest-table order, every variable's table size
/// recomputed from scratch at every step (the order solve_by_elimination keeps up to date).
double reference_greedy_work(const Problem& p) {
  const size_t n = static_cast<size_t>(p.num_nodes());
  std::vector<std::set<PNodeIdx>> factors;
  for (size_t v = 0; v < n; ++v) factors.push_back({static_cast<PNodeIdx>(v)});
  for (const ProblemEdge& e : p.edges) factors.push_back({e.u, e.v});
  std::vector<char> gone(n, 0), used(factors.size(), 0);
  auto dom = [&](PNodeIdx v) { return static_cast<double>(p.nodes[static_cast<size_t>(v)].costs.size()); };
  auto size_if_eliminated = [&](size_t v) {
    std::set<PNodeIdx> nb;
    for (size_t f = 0; f < factors.size(); ++f)
      if (!used[f] && factors[f].count(static_cast<PNodeIdx>(v)))
        for (PNodeIdx u : factors[f]) if (static_cast<size_t>(u) != v) nb.insert(u);
    double size = 1;
    for (PNodeIdx u : nb) size *= dom(u);
    return std::make_pair(size, nb);
  };
  double work = 0;
  for (size_t step = 0; step < n; ++step) {
    size_t best = n;
    double best_size = std::numeric_limits<double>::infinity();
    for (size_t v = 0; v < n; ++v) {
      if (gone[v]) continue;
      const double s = size_if_eliminated(v).first;
      if (s < best_size) best_size = s, best = v;
      if (s <= 1) break;
    }
    const auto [size, nb] = size_if_eliminated(best);
    double bucket = 0;
    for (size_t f = 0; f < factors.size(); ++f)
      if (!used[f] && factors[f].count(static_cast<PNodeIdx>(best))) used[f] = 1, ++bucket;
    work += size * dom(static_cast<PNodeIdx>(best)) * bucket;
    gone[best] = 1;
    if (!nb.empty()) {
      factors.push_back(nb);
      used.push_back(0);
    }
  }
  return work;
}

TEST(Elimination, OrderIsTheSmallestTableFirst) {
  // The order decides the tables' sizes, so the work summed over the steps tells orders apart:
  // each variable's kept table size must be the one recomputed from scratch.
  RandomOptions o;
  o.limit = false;
  o.min_nodes = 8;
  o.max_nodes = 14;
  o.max_strategies = 5;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    Problem p = random_problem(seed, o);
    p.usage_limit = -1;
    EliminationStats st;
    if (!solve_by_elimination(p, {}, &st)) continue;
    EXPECT_EQ(st.work, reference_greedy_work(p)) << "seed " << seed;
  }
}

TEST(Elimination, GoldenChain) {
  // a - b - c with costs chosen so the best pair differs from each node's own minimum.
  Problem p;
  p.nodes = {{"a", {0, 5}, {0, 0}, 0, 1}, {"b", {3, 0}, {0, 0}, 0, 1}, {"c", {0, 1}, {0, 0}, 0, 1}};
  p.edges = {{0, 1, {10, 0, 0, 10}}, {1, 2, {0, 7, 7, 0}}};
  auto got = solve_by_elimination(p);
  ASSERT_TRUE(got);
  // a=0 forces b=1 (edge 0), b=1 prefers c=1: 0 + 0 + 1 + 0 + 0 = 1.
  EXPECT_EQ(*got, (std::vector<StrategyIdx>{0, 1, 1}));
  EXPECT_EQ(evaluate_cost(p, *got), 1);
}

TEST(Elimination, GivesUpOnHugeTables) {
  // A clique of 8 nodes with 20 strategies each has treewidth 7: 20^7 entries.
  Problem p;
  for (int v = 0; v < 8; ++v) p.nodes.push_back({"", std::vector<Cost>(20, 1), std::vector<int64_t>(20, 0), 0, 1});
  for (int u = 0; u < 8; ++u)
    for (int v = u + 1; v < 8; ++v) p.edges.push_back({u, v, std::vector<Cost>(400, 1)});
  EXPECT_FALSE(solve_by_elimination(p).has_value());
}

TEST(Elimination, SolverUsesItWhenMemoryCannotBind) {
  RandomOptions o;
  o.limit = false;
  o.min_nodes = 7;
  for (uint32_t seed = 500; seed < 600; ++seed) {
    Problem p = random_problem(seed, o);
    p.usage_limit = -1;
    SolveResult r = solve(p, {});
    auto want = brute_force(p);
    if (!want.feasible) continue;
    EXPECT_EQ(r.status, SolveStatus::kOptimal);
    EXPECT_EQ(r.objective, want.cost) << "seed " << seed;
  }
}

}  // namespace
}  // namespace autoshard


namespace autoshard {
namespace {

TEST(AnytimeBound, NeverExceedsTheExactOptimum) {
  // The planner takes the anytime search's bound as proof when it meets the cost: check it
  // against exact optima (elimination) on planner-like problems without memory limits.
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    Problem p = testing::planner_like(200, seed % 2 == 1, seed);
    p.usage_limit = -1;
    auto exact = solve_by_elimination(p);
    ASSERT_TRUE(exact) << "seed " << seed;
    const Cost opt = evaluate_cost(p, *exact);
    AnytimeOptions o;
    o.time_limit_s = 0.2;
    o.threads = 1;
    AnytimeResult r = solve_anytime(p, o);
    EXPECT_LE(r.lower_bound, opt + 1e-6 * std::max(1.0, opt)) << "seed " << seed;
  }
}

}  // namespace
}  // namespace autoshard

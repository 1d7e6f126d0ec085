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
    // Overflowing strategies are removed for the limit: then only a feasible assignment
    // disproves the claim; otherwise any allowed one does.
    if (opt.overflow)
      EXPECT_FALSE(bo.feasible) << "reductions claim infeasible but a feasible assignment exists";
    else
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

ReduceOptions only(bool elim, bool dom, bool dec, bool merge = false) {
  ReduceOptions o;
  o.eliminate = elim;
  o.dominance = dom;
  o.decompose = dec;
  o.merge = merge;
  o.overflow = false;
  return o;
}

class ReduceRandom : public ::testing::TestWithParam<int> {};

TEST_P(ReduceRandom, MatchesBruteForce) {
  const RuleCase cases[] = {
      {"forbidden+single+parallel only", only(false, false, false)},
      {"decompose", only(false, false, true)},
      {"dominance", only(false, true, false)},
      {"eliminate", only(true, false, false)},
      {"merge", only(false, false, false, true)},
      {"overflow", [] {
         ReduceOptions o = only(false, false, false);
         o.overflow = true;
         return o;
       }()},
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
    ro.function_edge_prob = seed % 3 == 0 ? 0.4 : 0;
    check_reduction(random_problem(seed, ro), rc.opt, seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, ReduceRandom, ::testing::Range(0, 8));

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

TEST(Reduce, OverflowingStrategiesAreRemoved) {
  // A parameter memory row: three nodes using 1, 2 or 4 at one time point, cheaper the more
  // they use.  Limit 3 leaves no room above the minima: each node keeps only its smallest
  // usage and is folded.  Limit 4 leaves room 1: usage 2 stays, usage 4 goes.
  auto row = [](int64_t limit) {
    Problem p;
    for (int i = 0; i < 3; ++i) p.nodes.push_back({"", {3.0, 1.0, 0.0}, {1, 2, 4}, 0, 1});
    p.usage_limit = limit;
    return p;
  };
  ReduceOptions o = only(false, false, false);
  o.overflow = true;
  ReducedProblem tight = reduce(row(3), o);
  ASSERT_FALSE(tight.infeasible);
  EXPECT_EQ(tight.problem.num_nodes(), 0);
  EXPECT_DOUBLE_EQ(tight.constant_cost, 9);
  EXPECT_EQ(tight.map_back({}), (std::vector<StrategyIdx>{0, 0, 0}));
  ReducedProblem room = reduce(row(4), o);
  ASSERT_EQ(room.problem.num_nodes(), 3);
  for (const ProblemNode& n : room.problem.nodes) EXPECT_EQ(n.costs, (std::vector<Cost>{3.0, 1.0}));
  o.overflow = false;
  EXPECT_EQ(reduce(row(3), o).problem.num_nodes(), 3);
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

namespace autoshard {
namespace {

/// Segment bounds of a problem, as the reductions compress time.
std::vector<int64_t> segment_bounds(const Problem& p) {
  std::vector<int64_t> b;
  for (const ProblemNode& n : p.nodes)
    if (n.end > n.start) b.push_back(n.start), b.push_back(n.end);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

/// Usage of the original problem during the segment starting at time t.
int64_t usage_at(const Problem& p, const std::vector<StrategyIdx>& x, int64_t t) {
  int64_t u = 0;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const ProblemNode& n = p.nodes[sz(v)];
    if (n.start <= t && t < n.end) u += n.usages[sz(x[sz(v)])];
  }
  return u;
}

/// Like the planner's tied layer classes: each node after the first is fixed by an earlier one
/// (one finite entry per row of a random map), on an overlapping interval of its own, plus a
/// few ordinary edges, under a limit between the smallest and largest peak.
Problem tied_layers(uint32_t seed) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  const int n = uni(3, 8);
  for (int v = 0; v < n; ++v) {
    ProblemNode nd;
    for (int s = uni(2, 3); s > 0; --s) nd.costs.push_back(uni(0, 20)), nd.usages.push_back(uni(0, 8));
    nd.start = v;
    nd.end = v + uni(1, 3);
    p.nodes.push_back(nd);
  }
  for (int v = 1; v < n; ++v) {
    const int h = uni(0, v - 1);
    const size_t kv = p.nodes[sz(v)].costs.size(), kh = p.nodes[sz(h)].costs.size();
    ProblemEdge e{v, h, std::vector<Cost>(kv * kh, kInfCost)};
    for (size_t t = 0; t < kh; ++t) e.costs[sz(uni(0, static_cast<int>(kv) - 1)) * kh + t] = uni(0, 9);
    p.edges.push_back(e);
    if (uni(0, 2) == 0) {
      const int o = uni(0, n - 1);
      if (o == v) continue;
      ProblemEdge f{v, o, {}};
      for (size_t i = 0; i < kv * p.nodes[sz(o)].costs.size(); ++i) f.costs.push_back(uni(0, 9));
      p.edges.push_back(f);
    }
  }
  std::vector<StrategyIdx> lo(sz(n)), hi(sz(n));
  for (int v = 0; v < n; ++v) {
    const auto& u = p.nodes[sz(v)].usages;
    lo[sz(v)] = static_cast<StrategyIdx>(std::min_element(u.begin(), u.end()) - u.begin());
    hi[sz(v)] = static_cast<StrategyIdx>(std::max_element(u.begin(), u.end()) - u.begin());
  }
  const int64_t a = peak_usage(p, lo), b = peak_usage(p, hi);
  p.usage_limit = a + (b - a) * uni(1, 9) / 10;
  return p;
}

/// reduce() merges only what keeps one interval per node; still exact on tied layers.
TEST(Reduce, TiedLayersMatchBruteForce) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    check_reduction(tied_layers(seed), ReduceOptions{}, seed);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

/// The group model against brute force, for every group choice: its cost is the expanded
/// choice's cost; on segments that can bind its usage is the expanded choice's usage, and on the
/// others the original fits whatever is chosen.  So the model's optimum (enumerated) is the
/// original's, and expanding it gives an optimal feasible plan.
TEST(GroupReduction, EveryChoiceMatchesBruteForce) {
  int merged = 0, pieces_kept = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomOptions ro;
    ro.limit = seed % 5 != 0;
    const Problem p = seed % 2 == 0 ? tied_layers(seed) : testing::random_problem(seed, ro);
    const auto brute = testing::brute_force(p);
    const GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible) {  // overflowing strategies are removed: memory may be the reason
      EXPECT_FALSE(brute.feasible);
      continue;
    }
    const std::vector<int64_t> bounds = segment_bounds(p);
    ASSERT_EQ(sz(m.num_segments()), bounds.empty() ? 0 : bounds.size() - 1);
    for (const auto& pcs : m.pieces) {
      pieces_kept += static_cast<int>(pcs.size());
      merged += pcs.size() > 1;
    }
    std::vector<int32_t> x(sz(m.num_groups()), 0);
    Cost best = kInfCost;
    std::vector<int32_t> best_x;
    for (;;) {
      const Cost c = group_cost(m, x);
      const std::vector<StrategyIdx> ox = red.expand(x);
      if (c < kInfCost) {
        ASSERT_NEAR(evaluate_cost(p, ox), c, 1e-9);
      } else {
        ASSERT_FALSE(evaluate_cost(p, ox) < kInfCost);
      }
      const std::vector<int64_t> u = group_usage(m, x);
      bool fits = true;
      for (size_t s = 0; s < u.size(); ++s) {
        const int64_t orig = usage_at(p, ox, bounds[s]);
        if (m.can_bind(static_cast<int32_t>(s))) {
          ASSERT_EQ(u[s], orig) << "segment " << s;
        } else if (p.usage_limit >= 0) {
          ASSERT_LE(orig, p.usage_limit) << "segment " << s;
        }
        fits = fits && (p.usage_limit < 0 || u[s] <= p.usage_limit);
      }
      if (fits && c < best) best = c, best_x = x;
      size_t i = 0;
      while (i < x.size() && ++x[i] == static_cast<int32_t>(m.unary[i].size())) x[i++] = 0;
      if (i == x.size()) break;
    }
    ASSERT_EQ(best < kInfCost, brute.feasible);
    if (!brute.feasible) continue;
    EXPECT_NEAR(best, brute.cost, 1e-9);
    const std::vector<StrategyIdx> back = red.expand(best_x);
    EXPECT_NEAR(evaluate_cost(p, back), brute.cost, 1e-9);
    if (p.usage_limit >= 0) {
      EXPECT_LE(peak_usage(p, back), p.usage_limit);
    }
    EXPECT_EQ(red.restrict(back), best_x);
  }
  EXPECT_GT(pieces_kept, 100);  // memory stayed in the model ...
  EXPECT_GT(merged, 10);        // ... and merges gave groups several pieces
}

/// Node 1 is a function of node 0 (one finite entry per row), on another interval, and the limit
/// binds on both: the group model merges them into one group with two pieces; reduce() keeps a
/// Problem, so it leaves both nodes.  (Without overflow: a=0 alone overflows the limit, and that
/// rule would settle everything before a merge.)
TEST(GroupReduction, MergeKeepsBothIntervalsAsPieces) {
  Problem p;
  p.nodes.push_back({"a", {0, 4}, {9, 1}, 0, 2});
  p.nodes.push_back({"b", {0, 1}, {1, 9}, 2, 4});
  p.nodes.push_back({"c", {0}, {0}, 0, 4});  // fixes the segments' end
  p.edges.push_back({0, 1, {kInfCost, 1, 2, kInfCost}});  // a=0 -> b=1, a=1 -> b=0
  p.usage_limit = 8;
  ReduceOptions no_overflow;
  no_overflow.overflow = false;
  const GroupReduction red(p, no_overflow);
  const GroupModel& m = red.model();
  ASSERT_EQ(m.num_groups(), 1);
  ASSERT_EQ(m.pieces[0].size(), 2u);
  // a=0 uses 9 > 8 on [0, 2): only a=1, b=0 fits, at cost 4 + 2 + 0.
  const ReducedProblem rp = reduce(p, no_overflow);
  EXPECT_EQ(rp.problem.num_nodes(), 2);
  const auto br = testing::brute_force(rp.problem, rp.base);
  ASSERT_TRUE(br.feasible);
  EXPECT_DOUBLE_EQ(br.cost + rp.constant_cost, 6);
  EXPECT_EQ(rp.map_back(br.choice), (std::vector<StrategyIdx>{1, 0, 0}));
  for (int32_t g = 0; g < 2; ++g) {
    const std::vector<StrategyIdx> x = red.expand({g});
    EXPECT_EQ(x[1], x[0] == 0 ? 1 : 0);
  }
  EXPECT_EQ(red.expand(red.restrict({1, 0, 0})), (std::vector<StrategyIdx>{1, 0, 0}));
}

}  // namespace
}  // namespace autoshard

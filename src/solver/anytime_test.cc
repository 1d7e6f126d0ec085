#include "solver/anytime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "problem/iopddl.h"
#include "solver/reduce.h"
#include "solver/lower_bound.h"
#include "solver/penalty_search.h"
#include "solver/solver_test_util.h"
#include "solver/trws.h"

namespace autoshard {
namespace {

using testing::brute_force;

const std::string kExample = std::string(AUTOSHARD_SOURCE_DIR) + "/tests/fixtures/iopddl/example.json";

Problem random_problem(std::mt19937& rng, int n, int max_s, double p_edge, double p_inf, bool tight) {
  Problem p;
  std::uniform_int_distribution<int> cost(0, 50), use(1, 20), t(0, 10);
  for (int i = 0; i < n; ++i) {
    ProblemNode node;
    int s = 1 + static_cast<int>(rng() % static_cast<unsigned>(max_s));
    for (int k = 0; k < s; ++k) {
      node.costs.push_back(rng() % 10 == 0 ? kInfCost : cost(rng));
      node.usages.push_back(use(rng));
    }
    int a = t(rng), b = t(rng);
    node.start = std::min(a, b);
    node.end = std::max(a, b);
    p.nodes.push_back(node);
  }
  for (int u = 0; u < n; ++u)
    for (int v = u + 1; v < n; ++v) {
      if (std::uniform_real_distribution<double>(0, 1)(rng) > p_edge) continue;
      ProblemEdge e;
      e.u = u;
      e.v = v;
      size_t sz = p.nodes[static_cast<size_t>(u)].costs.size() * p.nodes[static_cast<size_t>(v)].costs.size();
      for (size_t k = 0; k < sz; ++k)
        e.costs.push_back(std::uniform_real_distribution<double>(0, 1)(rng) < p_inf ? kInfCost : cost(rng));
      p.edges.push_back(e);
    }
  p.usage_limit = tight ? 40 : -1;
  return p;
}


TEST(Anytime, ExampleReaches445) {
  IopddlInstance inst = read_iopddl(kExample);
  AnytimeOptions opt;
  opt.time_limit_s = 0.3;
  opt.threads = 2;
  AnytimeResult r = solve_anytime(inst.problem, opt);
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(r.cost, 445);
  EXPECT_EQ(r.choice, (std::vector<StrategyIdx>{0, 0, 2, 1, 0}));
  EXPECT_LE(r.lower_bound, 445);
  EXPECT_GE(r.time_to_first_feasible_s, 0);
}

TEST(Anytime, DriverPrintsSolutionLast) {
  std::ostringstream out;
  EXPECT_EQ(run_iopddl(kExample, 1.0, 1, out), 0);
  std::string s = out.str();
  ASSERT_GE(s.size(), 2u);
  std::string last = s.substr(s.rfind('\n', s.size() - 2) + 1);
  EXPECT_EQ(last, "[0, 0, 2, 1, 0]\n") << s;
  std::ostringstream bad;
  EXPECT_EQ(run_iopddl("/nonexistent.json", 1.0, 1, bad), 1);
  EXPECT_NE(bad.str().find("[]\n"), std::string::npos);
}

TEST(Anytime, ReductionPreservesCostAndUsage) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Problem p = random_problem(rng, 3 + trial % 8, 4, 0.4, 0.3, trial % 2 == 0);
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible) {
      EXPECT_TRUE(std::isinf(brute_force(p).cost)) << trial;
      continue;
    }
    for (int k = 0; k < 5; ++k) {
      std::vector<int32_t> x(static_cast<size_t>(m.num_groups()));
      for (int32_t g = 0; g < m.num_groups(); ++g)
        x[static_cast<size_t>(g)] = static_cast<int32_t>(rng() % m.unary[static_cast<size_t>(g)].size());
      const Cost c = group_cost(m, x);
      std::vector<StrategyIdx> ox = red.expand(x);
      Cost oc = evaluate_cost(p, ox);
      if (std::isinf(c)) {
        EXPECT_TRUE(std::isinf(oc)) << trial;
      } else {
        EXPECT_EQ(c, oc) << trial;
      }
    }
    EXPECT_LE(edge_split_lower_bound(m), brute_force(p).cost) << trial;
  }
}

TEST(Anytime, RandomSmallProblemsReachBruteForceOptimum) {
  std::mt19937 rng(42);
  int solved = 0;
  for (int trial = 0; trial < 24; ++trial) {
    Problem p = random_problem(rng, 5 + trial % 4, 4, 0.35, 0.15, trial % 3 != 0);
    Cost opt = brute_force(p).cost;
    AnytimeOptions o;
    o.time_limit_s = 0.2;
    o.threads = 2;
    AnytimeResult r = solve_anytime(p, o);
    if (std::isinf(opt)) {
      EXPECT_FALSE(r.feasible) << trial;
      continue;
    }
    ASSERT_TRUE(r.feasible) << trial;
    EXPECT_EQ(r.cost, opt) << trial;
    EXPECT_LE(r.lower_bound, opt) << trial;
    if (p.usage_limit >= 0) {
      EXPECT_LE(peak_usage(p, r.choice), p.usage_limit);
    }
    ++solved;
  }
  EXPECT_GT(solved, 10);
}


TEST(Anytime, TrwsIsExactOnTreesAndBoundIsValid) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    // Random tree, no memory, no forbidden pairs.
    int n = 3 + trial % 6;
    Problem p = random_problem(rng, n, 4, 0.0, 0.0, false);
    for (auto& node : p.nodes)
      for (auto& c : node.costs)
        if (std::isinf(c)) c = 60;
    for (int v = 1; v < n; ++v) {
      ProblemEdge e;
      e.u = static_cast<int32_t>(rng() % static_cast<unsigned>(v));
      e.v = v;
      size_t sz = p.nodes[static_cast<size_t>(e.u)].costs.size() * p.nodes[static_cast<size_t>(v)].costs.size();
      for (size_t k = 0; k < sz; ++k) e.costs.push_back(static_cast<double>(rng() % 50));
      p.edges.push_back(e);
    }
    Cost opt = brute_force(p).cost;
    GroupReduction red(p);
    const GroupModel& m = red.model();
    Trws t(m);
    t.iterate(30, nullptr);
    EXPECT_EQ(group_cost(m, t.labeling()), opt) << trial;
    EXPECT_LE(t.lower_bound(nullptr) + m.offset, opt + 1e-6) << trial;
  }
  // Bound validity on graphs with cycles and forbidden pairs.
  for (int trial = 0; trial < 100; ++trial) {
    Problem p = random_problem(rng, 4 + trial % 5, 4, 0.5, 0.2, false);
    Cost opt = brute_force(p).cost;
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible) continue;
    Trws t(m);
    t.iterate(1 + trial % 10, nullptr);
    EXPECT_LE(t.lower_bound(nullptr) + m.offset, opt + 1e-6) << trial;
  }
}

TEST(Anytime, LagrangianMemoryBoundIsValid) {
  std::mt19937 rng(13);
  int tighter = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Problem p = random_problem(rng, 5 + trial % 4, 4, 0.35, 0.1, true);
    Cost opt = brute_force(p).cost;
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible || std::isinf(opt)) continue;
    Cost lb = lagrangian_memory_bound(m, opt, 0.01);
    EXPECT_LE(lb, opt + 1e-6) << trial;
    if (lb > edge_split_lower_bound(m) + 1e-6) ++tighter;
  }
  EXPECT_GT(tighter, 0);
}

TEST(Anytime, PenaltySearchFindsFeasibleOptima) {
  std::mt19937 rng(5);
  int hits = 0, feasible = 0;
  for (int trial = 0; trial < 30; ++trial) {
    Problem p = random_problem(rng, 6 + trial % 4, 4, 0.35, 0.1, true);
    Cost opt = brute_force(p).cost;
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible || std::isinf(opt)) continue;
    SharedIncumbent shared;
    shared.start = std::chrono::steady_clock::now();
    std::atomic<bool> stop{false};
    PenaltySearchStats st;
    run_penalty_search(m, 3, shared.start + std::chrono::milliseconds(60), shared, stop, &st);
    EXPECT_LE(st.lower_bound + m.offset, opt + 1e-6) << trial;
    if (!shared.have) continue;
    ++feasible;
    std::vector<StrategyIdx> x = red.expand(shared.choice);
    EXPECT_LE(peak_usage(p, x), p.usage_limit) << trial;
    EXPECT_EQ(evaluate_cost(p, x), shared.cost + m.offset) << trial;
    EXPECT_GE(shared.cost + m.offset, opt) << trial;
    if (shared.cost + m.offset == opt) ++hits;
  }
  EXPECT_GT(feasible, 10);
  EXPECT_GT(hits, feasible / 2);
}

TEST(Anytime, RepairReachesTheLimitOrSaysNo) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 60; ++trial) {
    Problem p = random_problem(rng, 6 + trial % 5, 4, 0.3, 0.0, true);
    GroupReduction red(p);
    const GroupModel& m = red.model();
    if (m.infeasible) continue;
    GroupSearch s(m, 1);
    std::vector<int32_t> x(static_cast<size_t>(m.num_groups()));
    for (int32_t g = 0; g < m.num_groups(); ++g)
      x[static_cast<size_t>(g)] = static_cast<int32_t>(rng() % m.unary[static_cast<size_t>(g)].size());
    s.set_state(x);
    bool ok = s.repair(std::chrono::steady_clock::now() + std::chrono::seconds(5));
    EXPECT_EQ(ok, s.overflow() == 0) << trial;
    GroupSearch check(m, 2);
    check.set_state(s.state());
    EXPECT_EQ(check.cost(), s.cost()) << trial;
    EXPECT_EQ(check.bad(), s.bad()) << trial;
    EXPECT_EQ(check.overflow(), s.overflow()) << trial;
  }
}

TEST(Anytime, CutoffStopsOnceTheBoundReachesIt) {
  // Memory-limited problems whose memory-free bound stays below the optimum: without a cutoff
  // the search runs to its time limit; with the bound it proves as the cutoff it stops at once.
  std::mt19937 rng(11);
  int cut = 0;
  for (int trial = 0; trial < 40 && cut < 3; ++trial) {
    Problem p = random_problem(rng, 8, 4, 0.4, 0.05, true);
    AnytimeOptions o;
    o.time_limit_s = 0.3;
    o.threads = 1;
    const AnytimeResult first = solve_anytime(p, o);
    if (!first.feasible || first.cost <= first.lower_bound) continue;  // proven: nothing to cut
    o.time_limit_s = 30;
    o.cutoff = first.lower_bound;
    const auto t0 = std::chrono::steady_clock::now();
    const AnytimeResult r = solve_anytime(p, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(r.lower_bound, o.cutoff) << trial;
    EXPECT_LT(seconds, 20) << trial;  // far from its 30 s limit
    if (r.feasible) {
      EXPECT_GE(r.cost, o.cutoff) << trial;
    }
    ++cut;
  }
  EXPECT_EQ(cut, 3);
}


}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

/// restrict() is expand()'s inverse on the reduced model's own choices, and a warm start that
/// is the optimum comes back as the answer even when the search has no time.
TEST(Anytime, WarmStartIsTheFirstIncumbent) {
  int warmed = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    const Problem p = testing::random_problem(seed);
    const auto brute = testing::brute_force(p);
    if (!brute.feasible) continue;
    GroupReduction red(p);
    if (red.model().infeasible) continue;
    std::vector<int32_t> g(red.model().unary.size(), 0);
    EXPECT_EQ(red.restrict(red.expand(g)), g) << seed;
    EXPECT_TRUE(red.restrict({}).empty());
    if (red.restrict(brute.choice).empty()) continue;  // the reductions dropped that optimum
    AnytimeOptions ao;
    ao.time_limit_s = 0;
    ao.threads = 1;
    ao.warm_start = brute.choice;
    const AnytimeResult r = solve_anytime(p, ao);
    ASSERT_TRUE(r.feasible) << seed;
    EXPECT_NEAR(r.cost, brute.cost, 1e-9) << seed;
    ++warmed;
  }
  EXPECT_GT(warmed, 20);
}

}  // namespace
}  // namespace autoshard

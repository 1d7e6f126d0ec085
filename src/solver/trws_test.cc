#include "solver/trws.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "solver/mip.h"
#include "solver/solver.h"
#include "solver/solver_test_util.h"

namespace autoshard {
namespace {

std::chrono::steady_clock::time_point in_seconds(double s) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

/// Against brute force (memory ignored): the bound never exceeds the optimum, the plan is never
/// below it, and a claimed proof is the optimum.
TEST(MessagePassing, BoundAndProofAgainstBruteForce) {
  int proven = 0, feasible = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomOptions ro;
    ro.limit = false;
    const Problem p = testing::random_problem(seed, ro);
    const auto brute = testing::brute_force(p);
    const MessagePassingResult r = solve_by_message_passing(p, in_seconds(5), kProofTolerance);
    if (!brute.feasible) {
      EXPECT_TRUE(r.choice.empty() || !(r.cost < kInfCost));
      continue;
    }
    ++feasible;
    EXPECT_LE(r.lower_bound, brute.cost + 1e-9);
    if (r.choice.empty()) continue;
    EXPECT_GE(r.cost, brute.cost - 1e-9);
    EXPECT_DOUBLE_EQ(evaluate_cost(p, r.choice), r.cost);
    if (r.proven) {
      ++proven;
      EXPECT_NEAR(r.cost, brute.cost, 1e-9);
    }
  }
  EXPECT_GT(proven, feasible / 2);  // most small problems have tight relaxations
}

/// A frustrated K4 (four nodes that each want to differ from all others, two strategies; no
/// reduction applies): its local-polytope relaxation is loose (every node half and half costs
/// 0, any plan at least 2), so no proof is claimed, and solve() proves the optimum otherwise.
TEST(MessagePassing, NoProofWhereTheRelaxationIsLoose) {
  Problem p;
  for (int i = 0; i < 4; ++i) p.nodes.push_back({"", {0, 0}, {0, 0}, 0, 1});
  for (int u = 0; u < 4; ++u)
    for (int v = u + 1; v < 4; ++v) p.edges.push_back({u, v, {1, 0, 0, 1}});
  const MessagePassingResult r = solve_by_message_passing(p, in_seconds(5), kProofTolerance);
  EXPECT_FALSE(r.proven);
  EXPECT_DOUBLE_EQ(r.cost, 2);  // a 2-2 split: one agreeing pair on each side
  EXPECT_LT(r.lower_bound, 2);
  const SolveResult s = solve(p, {});
  EXPECT_EQ(s.status, SolveStatus::kOptimal);
  EXPECT_DOUBLE_EQ(s.objective, 2);
  EXPECT_NE(s.method, "message passing (bound met)");
}

/// A series of solves that never close (the loose problem above, as the overlap dual's solves
/// of llama3-70b 8x8x8 with ordered strategies): after one that did not close, each continues
/// from the remembered messages within its budget instead of restarting cold (1.5 budgets).
TEST(MessagePassing, WarmSolvesAfterAnUnprovenOneDoNotRestart) {
  Problem p;
  for (int i = 0; i < 4; ++i) p.nodes.push_back({"", {0, 0}, {0, 0}, 0, 1});
  for (int u = 0; u < 4; ++u)
    for (int v = u + 1; v < 4; ++v) p.edges.push_back({u, v, {1, 0, 0, 1}});
  constexpr int kBudget = 100, kNoStall = 1 << 30;
  MessageMemory memory;
  std::vector<int> iterations;
  for (int k = 0; k < 3; ++k) {
    const MessagePassingResult r =
        solve_by_message_passing(p, in_seconds(5), kProofTolerance, kBudget, kNoStall, &memory);
    EXPECT_FALSE(r.proven);
    EXPECT_DOUBLE_EQ(r.cost, 2);
    EXPECT_LT(r.lower_bound, 2);
    EXPECT_TRUE(memory.unproven);
    iterations.push_back(r.iterations);
  }
  EXPECT_EQ(iterations, (std::vector<int>{kBudget, kBudget, kBudget}));
}

/// A kSide x kSide grid, eight ordered strategies per node, random unary costs (times
/// `unary_scale`) and edges costing w |p - q|: submodular, so the relaxation is tight.
Problem monge_grid(uint32_t seed, double unary_scale = 1) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  constexpr int kSide = 10, kLabels = 8;
  Problem p;
  for (int i = 0; i < kSide * kSide; ++i) {
    ProblemNode n{"", {}, std::vector<int64_t>(kLabels, 0), 0, 1};
    for (int q = 0; q < kLabels; ++q) n.costs.push_back(unary_scale * uni(0, 30));
    p.nodes.push_back(n);
  }
  auto edge = [&](int u, int v) {
    const double w = uni(1, 4);
    ProblemEdge e{u, v, {}};
    for (int a = 0; a < kLabels; ++a)
      for (int b = 0; b < kLabels; ++b) e.costs.push_back(w * std::abs(a - b));
    p.edges.push_back(e);
  };
  for (int r = 0; r < kSide; ++r)
    for (int c = 0; c < kSide; ++c) {
      if (c + 1 < kSide) edge(r * kSide + c, r * kSide + c + 1);
      if (r + 1 < kSide) edge(r * kSide + c, (r + 1) * kSide + c);
    }
  return p;
}

/// The overlap dual's series of solves (overlap_solve.h): the same grid with its unary costs
/// rescaled, each solve started from the previous one's messages.  Each still proves its own
/// optimum (the same cost as a cold start), and the warm starts need fewer iterations in all.
TEST(MessagePassing, RememberedMessagesStartTheNextSolve) {
  MessageMemory memory;
  int warm_iterations = 0, cold_iterations = 0;
  for (double scale : {1.0, 0.9, 0.8, 0.85}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    const Problem p = monge_grid(3, scale);
    const MessagePassingResult cold = solve_by_message_passing(p, in_seconds(5), kProofTolerance);
    const MessagePassingResult warm =
        solve_by_message_passing(p, in_seconds(5), kProofTolerance, 2000, 200, &memory);
    ASSERT_TRUE(cold.proven);
    ASSERT_TRUE(warm.proven);
    EXPECT_NEAR(warm.cost, cold.cost, 1e-9 * cold.cost);
    EXPECT_FALSE(memory.edges.empty());
    EXPECT_FALSE(memory.unproven);
    if (scale != 1.0) warm_iterations += warm.iterations, cold_iterations += cold.iterations;
  }
  EXPECT_LT(warm_iterations, cold_iterations);
}

/// Messages remembered from another problem (other nodes, other strategy counts) are a start
/// like any other: the bound stays below the optimum and a proof is the optimum (brute force).
TEST(MessagePassing, StaleMessagesKeepTheBoundValid) {
  MessageMemory memory;
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    testing::RandomOptions ro;
    ro.limit = false;
    const Problem p = testing::random_problem(seed, ro);
    const auto brute = testing::brute_force(p);
    const bool had = !memory.edges.empty();
    const MessagePassingResult r =
        solve_by_message_passing(p, in_seconds(5), kProofTolerance, 2000, 200, &memory);
    if (!brute.feasible || r.choice.empty()) continue;
    EXPECT_LE(r.lower_bound, brute.cost + 1e-9) << had;
    EXPECT_GE(r.cost, brute.cost - 1e-9);
    if (r.proven) {
      EXPECT_NEAR(r.cost, brute.cost, 1e-9);
    }
  }
}

/// solve() proves a memory-free problem that neither the reductions nor exact elimination
/// finish by message passing, without a MIP: a 10x10 grid, eight ordered strategies per node,
/// random unary costs and edges costing w |p - q| (a Monge matrix: submodular, so the
/// relaxation is tight; treewidth 10 makes elimination tables of 8^11 entries).  The MIP on the
/// same problem agrees.
TEST(MessagePassing, SolveUsesItWhereMemoryCannotBind) {
  const Problem p = monge_grid(3);
  const SolveResult s = solve(p, {});
  ASSERT_EQ(s.status, SolveStatus::kOptimal);
  EXPECT_EQ(s.method, "message passing (bound met)");
  EXPECT_EQ(s.mip_variables, 0);
  const MipResult m = solve_cost_mip(p, {}, {}, MipOptions{});
  ASSERT_EQ(m.status, MipStatus::kOptimal);
  EXPECT_NEAR(s.objective, evaluate_cost(p, m.choice), 1e-9);
}

}  // namespace
}  // namespace autoshard

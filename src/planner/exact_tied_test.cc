// The exact memory model of tied problems: on a small MLP whose tied memory over-estimates,
// every tied plan costs and peaks in it exactly as its untied expansion does; the anytime
// search's plan fits and its memory-aware bound holds against the MIP's proven optimum.
#include "planner/exact_tied.h"

#include <gtest/gtest.h>

#include <random>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/problem_builder.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

/// Four tied layers whose activations live at different times.
Graph four_layer_mlp() {
  ModelOptions mo;
  mo.layers = 4;
  return build_model("mlp", mo);
}

struct Tied {
  Graph g = four_layer_mlp();
  Mesh mesh{{2, 2}, {"dp", "tp"}, *hardware_preset("h100")};
  BuiltProblem bp;
  ClusteredProblem cp;
  Tied() {
    PlannerOptions o;
    o.objective = Objective::kAdditive;  // these tests pin the additive formulation
    o.memory_limit_bytes = 0;
    bp = build_problem(g, mesh, o, {});
    cp = cluster_problem(g, bp);
  }
};

/// Sets et's limit halfway between the least-usage floor and the memory-free optimum's peak.
struct HalfwayLimit {
  SolveResult free;  ///< the memory-free optimum
  int64_t free_peak = 0, floor = 0;
};
HalfwayLimit set_halfway_limit(ExactTiedProblem& et, const SolverOptions& so) {
  HalfwayLimit h;
  h.free = solve(et.problem, so);
  h.free_peak = peak_usage(et.problem, h.free.choice);
  h.floor = peak_usage(et.problem, least_usage_choice(et.problem));
  et.problem.usage_limit = h.floor + (h.free_peak - h.floor) / 2;
  return h;
}

TEST(ExactTied, CostAndPeakMatchTheUntiedPlan) {
  Tied t;
  ASSERT_FALSE(t.cp.memory_exact);  // the layers' activations live at different times
  ASSERT_GT(t.cp.num_classes_tied, 0);
  const ExactTiedProblem et = exact_memory_tied_problem(t.bp.problem, t.cp);
  EXPECT_EQ(et.num_classes, t.cp.problem.num_nodes());
  EXPECT_GT(et.problem.num_nodes(), et.num_classes);  // shadows
  std::mt19937 rng(7);
  int over = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<StrategyIdx> x(static_cast<size_t>(t.cp.problem.num_nodes()));
    for (size_t c = 0; c < x.size(); ++c)
      x[c] = static_cast<StrategyIdx>(rng() % t.cp.problem.nodes[c].costs.size());
    const std::vector<StrategyIdx> full = t.cp.expand(x), ext = et.extend(x);
    EXPECT_EQ(et.classes(ext), x);
    EXPECT_EQ(evaluate_cost(et.problem, ext), evaluate_cost(t.cp.problem, x)) << trial;
    const int64_t exact = peak_usage(t.bp.problem, full);
    EXPECT_EQ(peak_usage(et.problem, ext), exact) << trial;
    const int64_t tied = peak_usage(t.cp.problem, x);
    EXPECT_GE(tied, exact) << trial;  // the clustering's model never under-estimates
    over += tied > exact ? 1 : 0;
  }
  EXPECT_GT(over, 0);  // ... and here it does over-estimate
}

TEST(ExactTied, AnytimeBoundHoldsAgainstTheProvenOptimum) {
  Tied t;
  ExactTiedProblem et = exact_memory_tied_problem(t.bp.problem, t.cp);
  SolverOptions so;
  so.time_limit_s = 30;
  const HalfwayLimit h = set_halfway_limit(et, so);
  const SolveResult& free = h.free;
  ASSERT_EQ(free.status, SolveStatus::kOptimal);
  ASSERT_LT(h.floor, h.free_peak);

  const SolveResult mip = solve_exact_tied(et, so);
  ASSERT_EQ(mip.status, SolveStatus::kOptimal);
  EXPECT_GT(mip.objective, free.objective);  // the limit binds
  EXPECT_LE(peak_usage(et.problem, et.extend(mip.choice)), et.problem.usage_limit);

  SolverOptions ao;
  ao.time_limit_s = 1.5;
  const SolveResult any = solve_exact_tied(et, ao, /*allow_mip=*/false);
  EXPECT_EQ(any.method, "anytime search (exact tied memory)");
  ASSERT_FALSE(any.choice.empty());
  EXPECT_LE(peak_usage(et.problem, et.extend(any.choice)), et.problem.usage_limit);
  EXPECT_DOUBLE_EQ(any.objective, evaluate_cost(t.cp.problem, any.choice));
  EXPECT_GE(any.objective, mip.objective * (1 - 1e-9));
  EXPECT_LE(any.lower_bound, mip.objective * (1 + 1e-9));
  // Memory-aware: above the memory-free optimum, which was the only bound before.
  EXPECT_GT(any.lower_bound, free.objective);
}

TEST(ExactTied, PlannerProvesTheTiedOptimumUnderMemory) {
  Tied t;
  ExactTiedProblem et = exact_memory_tied_problem(t.bp.problem, t.cp);
  SolverOptions so;
  so.time_limit_s = 30;
  set_halfway_limit(et, so);
  const int64_t limit = et.problem.usage_limit;
  const SolveResult mip = solve_exact_tied(et, so);
  ASSERT_EQ(mip.status, SolveStatus::kOptimal);

  PlannerOptions o;

  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.memory_limit_bytes = limit;
  o.time_limit_s = 30;
  ShardingOptimizer opt(t.g, t.mesh, o);
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_TRUE(p.checked);
  // Before the exact model, the over-estimate made this "feasible", bounded by the
  // memory-free optimum.
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_NEAR(p.objective_us, mip.objective, 1e-6 * mip.objective);
  EXPECT_LE(p.peak_memory_bytes, limit);
}

}  // namespace
}  // namespace autoshard

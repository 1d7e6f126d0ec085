// The default recomputation policy (if-needed), auto solved case by case, and what an
// infeasible answer suggests, on a small LLaMA.
#include "planner/recompute_modes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/fit_advice.h"
#include "planner/recompute.h"
#include "planner/sharding_optimizer.h"
#include "planner/recompute_block.h"

namespace autoshard {
namespace {

/// A small LLaMA: 3 layers (the middle one ties with neither end in some models; here all
/// three tie), hidden 64, batch 4 x 64 tokens.
Graph three_layer_llama() {
  return testing::tiny_llama(3);
}

Mesh dp_mesh(int64_t n) { return Mesh({n}, {"dp"}, *hardware_preset("h100")); }

Plan plan_policy(const Graph& g, const Mesh& m, RecomputePolicy p, int64_t limit) {
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // proofs and equalities below are the additive objective's
  o.recompute = p;
  o.memory_limit_bytes = limit;
  o.time_limit_s = 30;
  ShardingOptimizer opt(g, m, o);
  return opt.get_solution();
}

TEST(RecomputeDefault, IsIfNeeded) {
  EXPECT_EQ(PlannerOptions{}.recompute, RecomputePolicy::kIfNeeded);
  EXPECT_EQ(parse_recompute_policy("if-needed"), RecomputePolicy::kIfNeeded);
  EXPECT_EQ(recompute_policy_name(RecomputePolicy::kIfNeeded), "if-needed");
}

// (a) When the memory-free optimum fits, the default builds no recomputation node and its plan
// is --recompute none's, placement for placement.
TEST(RecomputeDefault, FittingProblemBuildsNoRecomputationNodes) {
  const Graph g = three_layer_llama();
  const Mesh mesh = dp_mesh(2);
  PlannerOptions o;  // the default policy, the H100's memory
  ShardingOptimizer opt(g, mesh, o);
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_FALSE(opt.recompute_escalated());
  EXPECT_EQ(opt.built_policy(), RecomputePolicy::kNone);
  EXPECT_TRUE(opt.problem().recompute_regions.empty());
  EXPECT_TRUE(opt.problem().recompute_aux.empty());
  // One per node but the output, and the context-parallel buffer node of each attention
  // (planner/cp_memory.h): no recomputation node.
  EXPECT_EQ(p.problem_nodes, g.size() - 1 + static_cast<NodeIdx>(opt.problem().cp_buffers.size()));
  EXPECT_EQ(opt.problem().cp_buffers.size(), 6u);  // 3 layers x (forward + backward)
  EXPECT_TRUE(p.layer_recompute.empty());
  EXPECT_TRUE(p.recomputed_nodes.empty());
  const Plan none = plan_policy(g, mesh, RecomputePolicy::kNone, -1);
  EXPECT_EQ(p.objective_us, none.objective_us);
  EXPECT_EQ(p.peak_memory_bytes, none.peak_memory_bytes);
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i]) {
      EXPECT_EQ(p.nodes[i]->strategy, none.nodes[i]->strategy) << g.node(static_cast<NodeIdx>(i)).name;
    }
}

// (b) When memory binds, the default recomputes, fits, and proves the same optimum as an
// explicit --recompute auto; an explicit none stays infeasible.
TEST(RecomputeDefault, MemoryBoundProblemRecomputesAndFits) {
  const Graph g = three_layer_llama();
  const Mesh one = dp_mesh(1);
  const Plan keep = plan_policy(g, one, RecomputePolicy::kNone, 0);
  const Plan full = plan_policy(g, one, RecomputePolicy::kFull, 0);
  ASSERT_TRUE(keep.has_solution && full.has_solution);
  ASSERT_LT(full.peak_memory_bytes, keep.peak_memory_bytes);
  const int64_t limit = (keep.peak_memory_bytes + full.peak_memory_bytes) / 2;
  EXPECT_FALSE(plan_policy(g, one, RecomputePolicy::kNone, limit).has_solution);  // one device: one layout

  PlannerOptions o;
  o.objective = Objective::kAdditive;
  o.memory_limit_bytes = limit;
  o.time_limit_s = 30;
  std::vector<std::string> said;
  o.progress = [&](std::string_view m) { said.emplace_back(m); };
  ShardingOptimizer opt(g, one, o);
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_TRUE(p.checked);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_LE(p.peak_memory_bytes, limit);
  EXPECT_GT(p.recompute_us, 0);
  EXPECT_LE(p.objective_us, full.objective_us + 1e-9);
  EXPECT_TRUE(opt.recompute_escalated());
  EXPECT_EQ(opt.built_policy(), RecomputePolicy::kAuto);
  EXPECT_FALSE(opt.problem().recompute_regions.empty());
  // Solved by cases over the tied decision classes (attention, mlp), not the joint model.
  EXPECT_NE(std::find(said.begin(), said.end(), "recompute auto: 2 decision classes, 9 cases"), said.end());

  const Plan explicit_auto = plan_policy(g, one, RecomputePolicy::kAuto, limit);
  ASSERT_TRUE(explicit_auto.has_solution);
  EXPECT_NEAR(p.objective_us, explicit_auto.objective_us, 1e-9 * p.objective_us);
  EXPECT_EQ(p.recomputed_nodes, explicit_auto.recomputed_nodes);

  // A second solve starts from no recomputation again and ends at the same plan.
  const Plan again = opt.get_solution();
  EXPECT_EQ(again.objective_us, p.objective_us);
  EXPECT_EQ(again.recomputed_nodes, p.recomputed_nodes);
}

// A solution file of a default-policy solve that recomputed is reused as it was: the file
// names the problem its choice indexes (problem_recompute "auto").
TEST(RecomputeDefault, SolutionFileOfARecomputingPlanIsReused) {
  const Graph g = three_layer_llama();
  const Mesh one = dp_mesh(1);
  const Plan keep = plan_policy(g, one, RecomputePolicy::kNone, 0);
  const Plan full = plan_policy(g, one, RecomputePolicy::kFull, 0);
  PlannerOptions o;
  o.memory_limit_bytes = (keep.peak_memory_bytes + full.peak_memory_bytes) / 2;
  o.ilp_solution_file = ::testing::TempDir() + "/recompute_default_solution.json";
  std::remove(o.ilp_solution_file.c_str());
  ShardingOptimizer first(g, one, o);
  const Plan p = first.get_solution();
  ASSERT_TRUE(p.has_solution);
  ASSERT_TRUE(first.recompute_escalated());
  o.preload_solution = true;
  ShardingOptimizer second(g, one, o);
  const Plan q = second.get_solution();
  ASSERT_TRUE(q.has_solution);
  EXPECT_NE(std::find_if(q.warnings.begin(), q.warnings.end(),
                         [](const std::string& w) { return w.rfind("reused the solution", 0) == 0; }),
            q.warnings.end());
  EXPECT_TRUE(second.recompute_escalated());
  EXPECT_EQ(q.objective_us, p.objective_us);
  EXPECT_EQ(q.recomputed_nodes, p.recomputed_nodes);
  std::remove(o.ilp_solution_file.c_str());
}

// The cases are exact: every case's floor bounds what its plans peak at, and the optimum by
// cases equals the best case solved alone (each mode pinned by fix_region_modes).
TEST(RecomputeCases, CasesPartitionTheAutoModel) {
  const Graph g = three_layer_llama();
  PlannerOptions o;
  o.recompute = RecomputePolicy::kAuto;
  o.memory_limit_bytes = 0;
  ShardingOptimizer opt(g, dp_mesh(1), o);
  const BuiltProblem& bp = opt.problem();
  std::vector<PNodeIdx> identity(static_cast<size_t>(bp.problem.num_nodes()));
  for (size_t v = 0; v < identity.size(); ++v) identity[v] = static_cast<PNodeIdx>(v);
  const ModeClasses untied = decision_classes(bp, identity);
  EXPECT_EQ(untied.classes.size(), 6u);  // 3 layers x (attention, mlp)
  EXPECT_EQ(untied.cases(), 729);
  ASSERT_EQ(untied.modes_of(5), (std::vector<StrategyIdx>{2, 1, 0, 0, 0, 0}));
  // Keep everywhere vs full everywhere: the floors order as the peaks do.
  const auto keep = region_modes(bp, identity, untied, std::vector<StrategyIdx>(6, 0));
  const auto full = region_modes(bp, identity, untied, std::vector<StrategyIdx>(6, 2));
  const int64_t f_keep = memory_floor_with_modes(bp, keep), f_full = memory_floor_with_modes(bp, full);
  EXPECT_LT(f_full, f_keep);
  // One device has one layout per node: the floor is the peak of that case's plan.
  Problem p = bp.problem;
  fix_region_modes(bp, full, {}, p);
  const std::vector<StrategyIdx> least = least_usage_choice(p);
  EXPECT_EQ(peak_usage(bp.problem, least), f_full);
  for (const auto& r : bp.recompute_regions)
    EXPECT_EQ(r.modes.at(static_cast<size_t>(least[static_cast<size_t>(r.decision)])), RecomputePolicy::kFull);
}

// (c) An infeasible answer names what would make it fit, with the planner's own numbers.
TEST(FitAdvice, InfeasibleAnswerNamesTheRemedies) {
  const Graph g = three_layer_llama();
  const Mesh one = dp_mesh(1);
  const Plan keep = plan_policy(g, one, RecomputePolicy::kNone, 0);
  const Plan full = plan_policy(g, one, RecomputePolicy::kFull, 0);
  const Plan two = plan_policy(g, dp_mesh(2), RecomputePolicy::kNone, 0);
  ASSERT_TRUE(keep.has_solution && full.has_solution && two.has_solution);
  // Below what one device needs without recomputation, above what full recomputation needs
  // and what two devices need.
  const int64_t limit = std::max(full.peak_memory_bytes, keep.peak_memory_bytes * 3 / 4);
  ASSERT_LT(limit, keep.peak_memory_bytes);
  PlannerOptions o;
  o.recompute = RecomputePolicy::kNone;
  o.memory_limit_bytes = limit;
  ShardingOptimizer opt(g, one, o);
  const Plan p = opt.get_solution();
  ASSERT_FALSE(p.has_solution);
  ASSERT_EQ(p.status, SolveStatus::kInfeasible);
  const std::vector<std::string> fit = fit_suggestions(opt, p);
  ASSERT_EQ(fit.size(), 3u) << ::testing::PrintToString(fit);
  // One device: the only layout is the floor, reached.
  EXPECT_EQ(fit[0], "memory: --memory-limit " + [&] {
    std::string b = bytes_ceil(keep.peak_memory_bytes);
    b.erase(b.find(' '), 1);
    return b;
  }() + ": a layout peaks at exactly that, and none lower");
  EXPECT_EQ(fit[1], "recompute: --recompute auto (or full): fully recomputed layers need at least " +
                        bytes_ceil(full.peak_memory_bytes) + " per device, under the " + bytes_ceil(limit) +
                        " budget");
  EXPECT_EQ(fit[2].rfind("mesh: 2 (dp), 2 devices: ", 0), 0u) << fit[2];
  EXPECT_NE(fit[2].find("within the budget"), std::string::npos) << fit[2];

  // The default policy tried recomputation: no recompute line; below full's floor too, only
  // the budget and mesh remain.
  o.recompute = RecomputePolicy::kIfNeeded;
  o.memory_limit_bytes = full.peak_memory_bytes - 1;
  ShardingOptimizer dflt(g, one, o);
  const Plan q = dflt.get_solution();
  ASSERT_FALSE(q.has_solution);
  const std::vector<std::string> fit2 = fit_suggestions(dflt, q);
  ASSERT_GE(fit2.size(), 1u);
  for (const std::string& s : fit2) EXPECT_EQ(s.rfind("recompute:", 0), std::string::npos) << s;
  EXPECT_EQ(fit2[0].rfind("memory: --memory-limit ", 0), 0u) << fit2[0];
  EXPECT_TRUE(fit_suggestions(opt, keep).empty());  // a plan: nothing to suggest
}

TEST(FitAdvice, BytesRoundUp) {
  EXPECT_EQ(bytes_ceil(int64_t{77} << 30), "77.00 GiB");
  EXPECT_EQ(bytes_ceil((int64_t{77} << 30) + 1), "77.01 GiB");
  EXPECT_EQ(bytes_ceil(1536), "1.50 KiB");
  EXPECT_EQ(bytes_ceil(int64_t{3} << 20), "3.00 MiB");
}

}  // namespace
}  // namespace autoshard

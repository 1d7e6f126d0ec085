// Activation recomputation as a planner decision: a one-layer MLP block worked out by hand
// (cost and peak per mode), and a small LLaMA where the solver picks recomputation to fit.
#include "planner/recompute.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cost/compute.h"
#include "mesh/hardware.h"
#include "models/builder.h"
#include "models/models.h"
#include "planner/recompute_block.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

Mesh one_device() { return Mesh({1}, {"d"}, *hardware_preset("h100")); }

using testing::compute_of;
using testing::mlp_block;

Plan plan_with(const Graph& g, RecomputePolicy p) {
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.memory_limit_bytes = 0;
  o.recompute = p;
  ShardingOptimizer opt(g, one_device(), o);
  return opt.get_solution();
}

TEST(Recompute, MlpBlockCostAndPeakByHand) {
  const Graph g = mlp_block();
  ASSERT_EQ(g.size(), 18);
  ASSERT_EQ(g.node(4).op, "mm");
  ASSERT_EQ(g.node(5).op, "relu");
  ASSERT_EQ(g.node(12).op, "t");
  const int64_t params = 2 * testing::kBlockH * testing::kBlockF * 16;
  const Plan keep = plan_with(g, RecomputePolicy::kNone);
  const Plan sel = plan_with(g, RecomputePolicy::kSelective);
  const Plan full = plan_with(g, RecomputePolicy::kFull);
  for (const Plan* p : {&keep, &sel, &full}) {
    ASSERT_TRUE(p->has_solution);
    EXPECT_TRUE(p->checked);
  }
  // Peak without recomputation: t = 9 holds x, target, r, y, ones, g.
  EXPECT_EQ(keep.peak_memory_bytes, params + 4 * 8192 + 2048 + 2);
  // Full: r is freed after y = mm(r, w2) and recomputed when rt = t(r) first reads it (t =
  // 12): t = 9 loses r.
  EXPECT_EQ(full.peak_memory_bytes, params + 4 * 8192 + 2);
  // Selective keeps the matmul outputs: a (read by the recomputed relu) stays instead of r.
  EXPECT_EQ(sel.peak_memory_bytes, params + 4 * 8192 + 2048 + 2);
  // Cost: selective re-runs relu; full re-runs mm, relu and mm (one device: no collectives).
  const double c_mm1 = compute_of(g, 4), c_relu = compute_of(g, 5), c_mm2 = compute_of(g, 6);
  EXPECT_NEAR(sel.objective_us - keep.objective_us, c_relu, 1e-9);
  EXPECT_NEAR(full.objective_us - keep.objective_us, c_mm1 + c_relu + c_mm2, 1e-9);
  EXPECT_NEAR(full.recompute_us, c_mm1 + c_relu + c_mm2, 1e-9);
  EXPECT_NEAR(sel.recompute_us, c_relu, 1e-9);
  ASSERT_EQ(full.layer_recompute.size(), 1u);
  EXPECT_EQ(full.layer_recompute[0].first, "layers.0");
  EXPECT_EQ(full.layer_recompute[0].second, "full");
  EXPECT_EQ(sel.layer_recompute[0].second, "selective");
  EXPECT_EQ(keep.layer_recompute.size(), 0u);
  // What a runtime re-executes: the region's forward ops (selective: not the matmuls).
  const auto name = [&](NodeIdx i) { return g.node(i).name; };
  EXPECT_EQ(full.recomputed_nodes, (std::vector<std::string>{name(4), name(5), name(6)}));
  EXPECT_EQ(sel.recomputed_nodes, (std::vector<std::string>{name(5)}));
  EXPECT_TRUE(keep.recomputed_nodes.empty());
}

TEST(Recompute, AutoRecomputesOnlyWhenMemoryBinds) {
  const Graph g = mlp_block();
  const int64_t params = 2 * testing::kBlockH * testing::kBlockF * 16;
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.recompute = RecomputePolicy::kAuto;
  o.memory_limit_bytes = 0;
  {
    ShardingOptimizer opt(g, one_device(), o);
    Plan p = opt.get_solution();
    ASSERT_TRUE(p.has_solution);
    EXPECT_EQ(p.layer_recompute.at(0).second, "none");
    EXPECT_EQ(p.recompute_us, 0);
  }
  o.memory_limit_bytes = params + 4 * 8192 + 2;  // only full recomputation fits
  ShardingOptimizer opt(g, one_device(), o);
  Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_TRUE(p.checked);
  EXPECT_EQ(p.layer_recompute.at(0).second, "full");
  EXPECT_EQ(p.peak_memory_bytes, o.memory_limit_bytes);
  o.memory_limit_bytes -= 1;
  ShardingOptimizer tight(g, one_device(), o);
  EXPECT_FALSE(tight.get_solution().has_solution);
}

/// A small LLaMA: 2 layers, hidden 64, batch 4 x 64 tokens.
Graph two_layer_llama() {
  return testing::tiny_llama(2);
}

/// A small LLaMA: full recomputation lowers the peak on a 2-device mesh, tied and untied layers
/// give the same plan cost and the independent check agrees; on one device (no sharding to
/// trade) a budget between the two peaks is met only by recomputing.
TEST(RecomputeLarge, SmallLlamaFitsOnlyWithRecomputation) {
  const Graph g = two_layer_llama();
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.memory_limit_bytes = 0;
  o.time_limit_s = 30;
  const Mesh mesh({2}, {"dp"}, *hardware_preset("h100"));
  ShardingOptimizer base(g, mesh, o);
  const Plan free_plan = base.get_solution();
  ASSERT_TRUE(free_plan.has_solution);
  o.recompute = RecomputePolicy::kFull;
  std::vector<double> objectives;
  for (bool cluster : {true, false}) {
    o.cluster = cluster;
    ShardingOptimizer full(g, mesh, o);
    EXPECT_EQ(full.problem().recompute_regions.size(), 4u);  // 2 layers x (attention, mlp)
    const Plan p = full.get_solution();
    ASSERT_TRUE(p.has_solution);
    EXPECT_TRUE(p.checked);
    EXPECT_LT(p.peak_memory_bytes, free_plan.peak_memory_bytes);
    EXPECT_GT(p.recompute_us, 0);
    for (const auto& [layer, mode] : p.layer_recompute) EXPECT_EQ(mode, "full") << layer;
    objectives.push_back(p.objective_us);
  }
  EXPECT_NEAR(objectives[0], objectives[1], 1e-6 * objectives[1]);

  o.cluster = true;
  o.recompute = RecomputePolicy::kNone;
  const Plan keep1 = ShardingOptimizer(g, one_device(), o).get_solution();
  o.recompute = RecomputePolicy::kFull;
  const Plan full1 = ShardingOptimizer(g, one_device(), o).get_solution();
  ASSERT_LT(full1.peak_memory_bytes, keep1.peak_memory_bytes);
  // Selective too saves memory against keeping everything (views alias their base only in
  // the keep model, problem_builder.h: together they made selective need more than keep).
  o.recompute = RecomputePolicy::kSelective;
  const Plan sel1 = ShardingOptimizer(g, one_device(), o).get_solution();
  EXPECT_LT(sel1.peak_memory_bytes, keep1.peak_memory_bytes);
  o.recompute = RecomputePolicy::kAuto;
  o.time_limit_s = 30;  // a feasible plan is what this checks; ASan builds need the room
  o.memory_limit_bytes = (keep1.peak_memory_bytes + full1.peak_memory_bytes) / 2;
  const Plan p = ShardingOptimizer(g, one_device(), o).get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_TRUE(p.checked);
  EXPECT_LE(p.peak_memory_bytes, o.memory_limit_bytes);
  EXPECT_GT(p.recompute_us, 0);
  EXPECT_LE(p.objective_us, full1.objective_us + 1e-9);
}

TEST(Recompute, MlpBlockSelectiveOpRecomputesTheSecondMatmul) {
  // torchtitan's op-level policy on the hand-made block (mm, relu, mm): the second matmul
  // is re-executed too; the peak is selective's (a stays for the recomputed relu, r goes).
  const Graph g = mlp_block();
  const int64_t params = 2 * testing::kBlockH * testing::kBlockF * 16;
  const Plan keep = plan_with(g, RecomputePolicy::kNone);
  const Plan op = plan_with(g, RecomputePolicy::kSelectiveOp);
  ASSERT_TRUE(op.has_solution);
  EXPECT_TRUE(op.checked);
  const double c_relu = compute_of(g, 5), c_mm2 = compute_of(g, 6);
  EXPECT_NEAR(op.objective_us - keep.objective_us, c_relu + c_mm2, 1e-9);
  EXPECT_NEAR(op.recompute_us, c_relu + c_mm2, 1e-9);
  EXPECT_EQ(op.peak_memory_bytes, params + 4 * 8192 + 2048 + 2);
  EXPECT_EQ(op.recomputed_nodes, (std::vector<std::string>{g.node(5).name, g.node(6).name}));
}

TEST(Recompute, SelectiveOpSavesEveryOtherMatmulOfALayer) {
  // torchtitan's op-level policy on a LLaMA layer: of q, k, v, o, w1, w3, w2 (forward order)
  // the 1st, 3rd, 5th and 7th matmul outputs are saved, wk, wo and w3 recomputed; the
  // attention kernel is saved by both selective policies, elementwise ops by neither.
  const Graph g = two_layer_llama();
  const std::vector<char> saved = selective_saves(g);
  std::vector<std::string> op_saved, op_recomputed;
  int attention = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.phase != Phase::kForward ||
        x.module_path.rfind("layers.1.", 0) != 0)
      continue;
    const char flags = saved[static_cast<size_t>(i)];
    if (x.op == "mm") {
      EXPECT_TRUE(flags & kSavedBySaveList) << x.name;
      ((flags & kSavedByOpPolicy) ? op_saved : op_recomputed).push_back(x.module_path);
    }
    if (x.op.find("attention") != std::string::npos) {
      ++attention;
      EXPECT_EQ(flags, kSavedBySaveList | kSavedByOpPolicy) << x.name;
    }
    if (x.op == "add" || x.op == "mul") {
      EXPECT_EQ(flags, 0) << x.name;
    }
  }
  EXPECT_EQ(op_saved, (std::vector<std::string>{"layers.1.attention.wq", "layers.1.attention.wv",
                                                "layers.1.feed_forward.w1", "layers.1.feed_forward.w2"}));
  EXPECT_EQ(op_recomputed, (std::vector<std::string>{"layers.1.attention.wk", "layers.1.attention.wo",
                                                     "layers.1.feed_forward.w3"}));
  EXPECT_GT(attention, 0);
}

TEST(Recompute, PolicyNames) {
  for (auto p : {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull,
                 RecomputePolicy::kAuto, RecomputePolicy::kSelectiveOp})
    EXPECT_EQ(parse_recompute_policy(recompute_policy_name(p)), p);
  EXPECT_FALSE(parse_recompute_policy("some"));
}

/// With a limit that binds but lets every activation stay, the default policy never ends above
/// the recompute-none plan: after planning with recomputation it solves keep-everything on the
/// problem without recomputation (whose views share their base's memory, so that it can fit
/// where the recomputation model's keep case does not), cut off at the plan it has.
TEST(RecomputeLarge, DefaultNeverEndsAboveKeepingEverything) {
  const Graph g = two_layer_llama();
  const Mesh mesh({2}, {"dp"}, *hardware_preset("h100"));
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.time_limit_s = 20;  // the keep-everything solve gets half of what planning with recomputation leaves
  o.memory_limit_bytes = 0;
  o.recompute = RecomputePolicy::kNone;
  const Plan free_plan = ShardingOptimizer(g, mesh, o).get_solution();
  ASSERT_TRUE(free_plan.has_solution);
  o.memory_limit_bytes = free_plan.peak_memory_bytes * 9 / 10;
  const Plan kept = ShardingOptimizer(g, mesh, o).get_solution();
  o.recompute = RecomputePolicy::kIfNeeded;
  const Plan p = ShardingOptimizer(g, mesh, o).get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_TRUE(p.checked);
  EXPECT_LE(p.peak_memory_bytes, o.memory_limit_bytes);
  // Only a proven p is bound to be no worse: on a loaded machine the keep-everything solve
  // inside it can meet its share of the time limit (seen: 2180 vs 2178.73 us at load 10).
  ASSERT_TRUE(kept.has_solution);
  if (p.status == SolveStatus::kOptimal) {
    EXPECT_LE(p.objective_us, kept.objective_us * (1 + 1e-9));
  } else {
    std::printf("the default plan ended %s (time limit); not compared\n", std::string(solve_status_name(p.status)).c_str());
  }
}

TEST(Recompute, PolicyNamesIncludeIfNeeded) {
  EXPECT_EQ(parse_recompute_policy(recompute_policy_name(RecomputePolicy::kIfNeeded)), RecomputePolicy::kIfNeeded);
  try {
    parse_recompute_policy_or_throw("some", "--recompute");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--recompute: expected none, selective, selective-op, full, auto or if-needed, got 'some'");
  }
}

}  // namespace
}  // namespace autoshard

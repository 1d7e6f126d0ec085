// Mesh search: one candidate per symmetry class, and a known ranking (tensor parallelism
// inside a node beats tensor parallelism across nodes).
#include "planner/mesh_search.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

#include <chrono>
#include <limits>
#include <set>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/recipes.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

using testing::h100;

std::string shape_str(const Mesh& m) {
  std::string s;
  for (int64_t x : m.shape()) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

TEST(MeshSearch, EnumeratesOneMeshPerSymmetryClass) {
  auto meshes = enumerate_meshes(16, 2, h100());
  std::set<std::string> got;
  for (const Mesh& m : meshes) got.insert(shape_str(m));
  // 16 = 16 | 2x8 | 4x4 | 8x2 with 8 GPUs per node: the last dim is inside a node and the
  // first crosses nodes, so no two of them are the same problem.
  EXPECT_EQ(got, (std::set<std::string>{"16", "2x8", "4x4", "8x2"}));
  // On 64 GPUs with 3 dims, (4, 2, 8) and (2, 4, 8) both have two dims across nodes (sizes 2
  // and 4) and one of 8 inside: one class.
  auto m64 = enumerate_meshes(64, 3, h100());
  std::set<std::string> s64;
  for (const Mesh& m : m64) {
    EXPECT_TRUE(s64.insert(shape_str(m)).second) << shape_str(m);
    int64_t n = 1;
    for (int64_t x : m.shape()) n *= x;
    EXPECT_EQ(n, 64);
  }
  EXPECT_TRUE(s64.count("2x4x8"));
  EXPECT_FALSE(s64.count("4x2x8"));
  EXPECT_TRUE(s64.count("8x8"));
  EXPECT_TRUE(s64.count("2x2x16"));  // 16 crosses nodes: two inter dims of 2 and one of 16
  EXPECT_THROW(enumerate_meshes(0, 2, h100()), std::invalid_argument);
}

TEST(MeshSearchLarge, TensorParallelismInsideANodeBeatsItAcrossNodes) {
  // Batch 2 on 16 GPUs: at most 2-way data parallelism, so the other 8 ways must split the
  // layers (tensor / sequence parallelism), which is far cheaper over NVLink.
  ModelOptions mo;
  mo.layers = 1;
  mo.batch = 2;
  mo.seq = 1024;
  mo.hidden = 2048;
  mo.heads = 16;
  mo.kv_heads = 8;
  mo.ffn = 4096;
  mo.vocab = 8192;
  mo.optimizer = false;
  Graph g = build_model("llama3-8b", mo);
  MeshSearchOptions o;
  o.gpus = 16;
  o.max_dims = 2;
  o.hardware = h100();
  o.planner.memory_limit_bytes = 0;
  o.threads = 2;
  o.prune = false;
  MeshSearchResult all = search_meshes(g, o);
  ASSERT_EQ(all.rows.size(), 4u);
  ASSERT_EQ(all.best, 0);
  auto rank_of = [&](const MeshSearchResult& r, const std::string& shape) {
    for (size_t k = 0; k < r.rows.size(); ++k)
      if (shape_str(r.rows[k].mesh) == shape) return static_cast<int>(k);
    return -1;
  };
  const MeshSearchRow& best = all.rows[0];
  EXPECT_EQ(shape_str(best.mesh), "2x8");
  EXPECT_EQ(best.dim_use.at(1), "TP");  // the 8 inside the node split the layers
  EXPECT_LT(rank_of(all, "2x8"), rank_of(all, "8x2"));
  const MeshSearchRow& across = all.rows[static_cast<size_t>(rank_of(all, "8x2"))];
  ASSERT_EQ(across.outcome, MeshSearchRow::Outcome::kPlanned);
  EXPECT_GT(across.plan->objective_us, best.plan->objective_us);
  for (const MeshSearchRow& r : all.rows) {
    ASSERT_EQ(r.outcome, MeshSearchRow::Outcome::kPlanned) << shape_str(r.mesh) << r.message;
    EXPECT_LE(r.bound_us, r.plan->objective_us * (1 + 1e-9)) << shape_str(r.mesh);
  }
  // Pruning keeps the winner and its plan.
  o.prune = true;
  MeshSearchResult pruned = search_meshes(g, o);
  ASSERT_EQ(pruned.best, 0);
  EXPECT_EQ(shape_str(pruned.rows[0].mesh), "2x8");
  EXPECT_DOUBLE_EQ(pruned.rows[0].plan->objective_us, best.plan->objective_us);
}

TEST(MeshSearchLarge, CutoffStopsA3DMeshThatCannotWin) {
  // llama3-8b on 2x4x8 (about 128 ms) cannot beat a cutoff of 100 ms: the solve stops soon
  // instead of at its limit, with a bound at or above the cutoff -- proven optimal by message
  // passing (its memory cannot bind), or cut off by the search's bound.
  Graph g = build_model("llama3-8b", ModelOptions{});
  Mesh mesh({2, 4, 8}, {"d0", "d1", "tp"}, h100());
  PlannerOptions po;
  po.objective = Objective::kAdditive;  // these tests pin the additive formulation
  po.time_limit_s = 60;
  po.cutoff_us = 100'000;
  ShardingOptimizer so(g, mesh, po);
  const auto t0 = std::chrono::steady_clock::now();
  const Plan plan = so.get_solution();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 40);
  EXPECT_GE(plan.lower_bound_us, po.cutoff_us);
  if (plan.status == SolveStatus::kOptimal) {
    EXPECT_GE(plan.objective_us, po.cutoff_us);
  }
  // Without the cutoff the same mesh plans above that bound.
  po.cutoff_us = std::numeric_limits<double>::infinity();
  po.time_limit_s = 20;
  ShardingOptimizer full(g, mesh, po);
  const Plan best = full.get_solution();
  ASSERT_TRUE(best.has_solution);
  EXPECT_GE(best.objective_us, plan.lower_bound_us * (1 - 1e-9));
}

TEST(MeshSearchLarge, CutoffUnderBindingMemoryLeavesOnlyTheBound) {
  // When memory binds and even the memory-free optimum cannot beat the cutoff, the planner
  // stops with no plan (the memory-free choice does not fit) and the bound, and does not fail
  // its own check on the non-fitting choice.
  ModelOptions mo;
  mo.layers = 2;
  mo.batch = 4;
  mo.seq = 256;
  mo.hidden = 512;
  mo.heads = 8;
  mo.kv_heads = 4;
  mo.vocab = 2048;
  Graph g = build_model("llama3-8b", mo);
  Mesh mesh({2, 2}, {"dp", "tp"}, h100());
  PlannerOptions po;
  po.objective = Objective::kAdditive;  // these tests pin the additive formulation
  po.memory_limit_bytes = 0;
  po.time_limit_s = 20;
  const Plan free = ShardingOptimizer(g, mesh, po).get_solution();
  ASSERT_TRUE(free.has_solution);
  po.memory_limit_bytes = free.peak_memory_bytes - 1;  // the memory-free optimum no longer fits
  po.cutoff_us = free.objective_us * (1 - 1e-6);      // and cannot beat this
  const Plan cut = ShardingOptimizer(g, mesh, po).get_solution();
  EXPECT_FALSE(cut.has_solution);
  EXPECT_GE(cut.lower_bound_us, po.cutoff_us * (1 - 1e-9));
  // The mesh search's view of it: pruned by the bound, no error.
  const RecipeResult rr = plan_recipe(Recipe::kAlpa, g, mesh, po);
  EXPECT_FALSE(rr.plan.has_value());
  EXPECT_GE(rr.lower_bound_us, po.cutoff_us * (1 - 1e-9));
}

}  // namespace
}  // namespace autoshard

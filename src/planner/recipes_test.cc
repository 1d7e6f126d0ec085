// Named recipes (DDP, FSDP, Megatron, FSDP+TP, HSDP) as pinned plans of the planner's own
// problem: textbook placements parameter by parameter, and the optimum never worse.
#include "planner/recipes.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

#include <map>
#include <string>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/parallelism.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

using testing::h100;

/// A 4-layer LLaMA small enough to plan in well under a second per recipe.
Graph small_llama(bool optimizer = true) {
  ModelOptions mo;
  mo.layers = 4;
  mo.batch = 8;
  mo.seq = 128;
  mo.hidden = 256;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.ffn = 512;
  mo.vocab = 1024;
  mo.optimizer = optimizer;
  return build_model("llama3-8b", mo);
}

PlannerOptions no_limit() {
  PlannerOptions po;
  po.objective = Objective::kAdditive;  // these tests pin the additive formulation
  po.memory_limit_bytes = 0;
  return po;
}

std::string placement_of(const Graph& g, const Plan& p, const std::string& name) {
  auto i = g.find(name);
  if (!i) return "<no node " + name + ">";
  const auto& np = p.nodes[static_cast<size_t>(*i)];
  return np ? np->chosen.outputs[0].to_string() : "<none>";
}

const std::vector<std::string> kColumn = {"attention.wq", "attention.wk", "attention.wv",
                                          "feed_forward.w1", "feed_forward.w3"};
const std::vector<std::string> kRow = {"attention.wo", "feed_forward.w2"};
const std::vector<std::string> kNorms = {"attention_norm", "ffn_norm"};

/// Expected placement of each LLaMA parameter under a recipe, as DTensor strings on (dp=2, tp=4).
/// fsdp+tp is FSDP2 over TP: where both split dim 0, tp cuts first (`_S(0,4)S(0)`).
std::map<std::string, std::string> textbook(Recipe r, int layers) {
  std::map<std::string, std::string> want;
  auto put = [&](const std::string& name, const char* ddp, const char* fsdp, const char* meg,
                 const char* fsdptp, const char* hsdp) {
    switch (r) {
      case Recipe::kDdp: want[name] = ddp; break;
      case Recipe::kFsdp: want[name] = fsdp; break;
      case Recipe::kMegatron: want[name] = meg; break;
      case Recipe::kFsdpTp: want[name] = fsdptp; break;
      case Recipe::kHsdp: want[name] = hsdp; break;
      case Recipe::kAlpa:
      case Recipe::kEp:
      case Recipe::kCpFsdp: break;
    }
  };
  for (int l = 0; l < layers; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    for (const std::string& w : kColumn)
      put(pre + w + ".weight", "RR", "S(0)S(0)", "RS(0)", "_S(0,4)S(0)", "RS(0)");
    for (const std::string& w : kRow)
      put(pre + w + ".weight", "RR", "S(0)S(0)", "RS(1)", "S(0)S(1)", "RS(0)");
    for (const std::string& w : kNorms)
      put(pre + w + ".weight", "RR", "S(0)S(0)", "RR", "S(0)R", "RS(0)");
  }
  put("tok_embeddings.weight", "RR", "S(0)S(0)", "RS(0)", "_S(0,4)S(0)", "RS(0)");  // vocab-parallel
  put("output.weight", "RR", "S(0)S(0)", "RS(0)", "_S(0,4)S(0)", "RS(0)");          // column head
  put("norm.weight", "RR", "S(0)S(0)", "RR", "S(0)R", "RS(0)");
  return want;
}

TEST(Recipes, NamesRoundTrip) {
  for (Recipe r : all_recipes()) EXPECT_EQ(parse_recipe(recipe_name(r)), r);
  EXPECT_EQ(parse_recipe("zero3"), Recipe::kFsdp);
  EXPECT_FALSE(parse_recipe("pipeline"));
}

TEST(Recipes, MegatronLayoutFromTheGraph) {
  Graph g = small_llama(false);
  auto layout = tensor_parallel_layout(g);
  auto role = [&](const std::string& n) { return layout[static_cast<size_t>(*g.find(n))]; };
  for (const std::string& w : kColumn) {
    EXPECT_EQ(role("layers.2." + w + ".weight").role, TpRole::kColumn) << w;
    EXPECT_EQ(role("layers.2." + w + ".weight").dim, 0) << w;
  }
  for (const std::string& w : kRow) {
    EXPECT_EQ(role("layers.2." + w + ".weight").role, TpRole::kRow) << w;
    EXPECT_EQ(role("layers.2." + w + ".weight").dim, 1) << w;
  }
  EXPECT_EQ(role("tok_embeddings.weight").role, TpRole::kVocab);
  EXPECT_EQ(role("output.weight").role, TpRole::kColumn);
  EXPECT_EQ(role("norm.weight").role, TpRole::kReplicated);
  EXPECT_EQ(role("layers.0.attention_norm.weight").role, TpRole::kReplicated);
}

TEST(RecipesLarge, TextbookPlacementsAndTheOptimumIsNeverWorse) {
  Graph g = small_llama();
  Mesh mesh({2, 4}, {"dp", "tp"}, h100());
  auto results = compare_recipes(g, mesh, no_limit(), {}, {}, 2);
  ASSERT_EQ(results.size(), all_recipes().size());
  ASSERT_EQ(results[0].recipe, Recipe::kAlpa);
  ASSERT_TRUE(results[0].plan) << results[0].error;
  const Plan& best = *results[0].plan;
  EXPECT_EQ(best.status, SolveStatus::kOptimal);
  for (const RecipeResult& r : results) {
    const std::string name(recipe_name(r.recipe));
    ASSERT_TRUE(r.not_applicable.empty()) << name << ": " << r.not_applicable;
    ASSERT_TRUE(r.plan) << name << ": " << r.error;
    EXPECT_TRUE(r.fits);
    EXPECT_TRUE(r.plan->checked) << name;
    EXPECT_EQ(r.plan->status, SolveStatus::kOptimal) << name;
    EXPECT_LE(best.objective_us, r.plan->objective_us * (1 + 1e-9)) << name;
    if (r.recipe == Recipe::kAlpa) continue;
    for (const auto& [param, want] : textbook(r.recipe, 4)) {
      EXPECT_EQ(placement_of(g, *r.plan, param), want) << name << " " << param;
      // Optimizer state and the update follow the parameter.
      EXPECT_EQ(placement_of(g, *r.plan, param + ".exp_avg"), want) << name << " " << param;
      EXPECT_EQ(placement_of(g, *r.plan, param + ".master"), want) << name << " " << param;
    }
    // The batch is split on every data-parallel dim.
    const std::string batch = r.recipe == Recipe::kMegatron || r.recipe == Recipe::kFsdpTp
                                  ? "S(0)R" : "S(0)S(0)";
    EXPECT_EQ(placement_of(g, *r.plan, "tokens"), batch) << name;
    // And the free nodes realize the recipe: how each dim uses the weights.
    const NodeIdx wq = *g.find("layers.1.attention.wq.weight");
    const NodeIdx wo = *g.find("layers.1.attention.wo.weight");
    switch (r.recipe) {
      case Recipe::kDdp:
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wq), "dp: DP, tp: DP");
        break;
      case Recipe::kFsdp:
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wq), "dp: FSDP, tp: FSDP");
        break;
      case Recipe::kMegatron:
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wq), "dp: DP, tp: TP column");
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wo), "dp: DP, tp: TP row");
        break;
      case Recipe::kFsdpTp:
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wq), "dp: FSDP, tp: TP column");
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wo), "dp: FSDP, tp: TP row");
        break;
      case Recipe::kHsdp:
        EXPECT_EQ(describe_parallelism(g, mesh, *r.plan, wq), "dp: DP, tp: FSDP");
        break;
      case Recipe::kAlpa:
      case Recipe::kEp:
      case Recipe::kCpFsdp: break;
    }
  }
}

TEST(Recipes, SaysWhyARecipeDoesNotApply) {
  Graph g = small_llama(false);
  Mesh flat({8}, {"dp"}, h100());
  RecipePins h = recipe_pins(Recipe::kHsdp, g, flat);
  EXPECT_NE(h.not_applicable.find("hsdp needs a mesh of at least 2 dims"), std::string::npos)
      << h.not_applicable;
  RecipePins m = recipe_pins(Recipe::kMegatron, g, flat);
  EXPECT_NE(m.not_applicable.find("named tp"), std::string::npos) << m.not_applicable;
  RecipeResult r = plan_recipe(Recipe::kFsdpTp, g, flat, no_limit());
  EXPECT_FALSE(r.plan);
  EXPECT_FALSE(r.not_applicable.empty());
  // Batch 8 cannot split over 16 data-parallel devices.
  Mesh wide({4, 4}, {"a", "b"}, h100());
  RecipePins d = recipe_pins(Recipe::kDdp, g, wide);
  EXPECT_NE(d.not_applicable.find("does not split over the 16 data-parallel devices"),
            std::string::npos)
      << d.not_applicable;
}

// With shard orders, fsdp+tp stores column-parallel weights as FSDP2 over TP does: tp cuts
// first (_S(0,4)S(0) on (dp=2, tp=4)); row-parallel weights (dim 1 on tp) are unchanged; the
// optimum, offered the same orders, is never worse.
TEST(RecipesLarge, FsdpTpWithShardOrdersUsesFsdp2Layout) {
  Graph g = small_llama();
  Mesh mesh({2, 4}, {"dp", "tp"}, h100());
  PlannerOptions po = no_limit();
  po.shard_orders = true;
  auto results = compare_recipes(g, mesh, po, {}, {Recipe::kAlpa, Recipe::kFsdpTp}, 2);
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].plan && results[1].plan) << results[0].error << results[1].error;
  const Plan& tp = *results[1].plan;
  for (const std::string& w : kColumn) {
    const std::string name = "layers.1." + w + ".weight";
    EXPECT_EQ(placement_of(g, tp, name), "_S(0,4)S(0)") << name;
    EXPECT_EQ(placement_of(g, tp, name + ".exp_avg"), "_S(0,4)S(0)") << name;
  }
  for (const std::string& w : kRow)
    EXPECT_EQ(placement_of(g, tp, "layers.1." + w + ".weight"), "S(0)S(1)") << w;
  EXPECT_LE(results[0].plan->objective_us, tp.objective_us * (1 + 1e-9));
  // Without orders the recipe keeps DTensor's default order.
  RecipePins plain = recipe_pins(Recipe::kFsdpTp, g, mesh);
  int checked = 0;
  for (const Constraint& c : plain.constraints) {
    if (c.node != "layers.1.feed_forward.w1.weight") continue;
    EXPECT_EQ(placements_to_string(c.output), "S(0)S(0)");
    ++checked;
  }
  EXPECT_EQ(checked, 1);
}

// fsdp+tp is FSDP2 over TP without being asked for shard orders (plan_recipe offers them to
// its problem); fsdp and hsdp keep DTensor's default order, which is FSDP2's flattened layout.
TEST(RecipesLarge, FsdpTpUsesFsdp2LayoutByDefault) {
  Graph g = small_llama(false);
  Mesh mesh({2, 4}, {"dp", "tp"}, h100());
  EXPECT_TRUE(recipe_uses_shard_orders(Recipe::kFsdpTp, mesh));
  EXPECT_TRUE(recipe_uses_shard_orders(Recipe::kCpFsdp, Mesh({2, 2, 2}, {"dp", "cp", "tp"}, h100())));
  EXPECT_FALSE(recipe_uses_shard_orders(Recipe::kCpFsdp, Mesh({2, 4}, {"dp", "cp"}, h100())));
  for (Recipe r : {Recipe::kFsdp, Recipe::kHsdp, Recipe::kMegatron, Recipe::kDdp})
    EXPECT_FALSE(recipe_uses_shard_orders(r, mesh)) << recipe_name(r);
  RecipeResult tp = plan_recipe(Recipe::kFsdpTp, g, mesh, no_limit());
  ASSERT_TRUE(tp.plan) << tp.error << tp.not_applicable;
  EXPECT_EQ(placement_of(g, *tp.plan, "layers.1.feed_forward.w1.weight"), "_S(0,4)S(0)");
  EXPECT_EQ(placement_of(g, *tp.plan, "layers.1.feed_forward.w2.weight"), "S(0)S(1)");
  RecipeResult fsdp = plan_recipe(Recipe::kFsdp, g, mesh, no_limit());
  ASSERT_TRUE(fsdp.plan) << fsdp.error;
  EXPECT_EQ(placement_of(g, *fsdp.plan, "layers.1.feed_forward.w1.weight"), "S(0)S(0)");
  // cp+fsdp with tp: tp cuts first, then FSDP over dp and cp in mesh order.
  Mesh cp({2, 2, 2}, {"dp", "cp", "tp"}, h100());
  RecipePins pins = recipe_pins(Recipe::kCpFsdp, g, cp, false, true);
  ASSERT_TRUE(pins.not_applicable.empty()) << pins.not_applicable;
  int checked = 0;
  for (const Constraint& c : pins.constraints)
    if (c.node == "layers.1.feed_forward.w1.weight") {
      EXPECT_EQ(placements_to_string(c.output), "_S(0,2)_S(0,2)S(0)");
      ++checked;
    }
  EXPECT_EQ(checked, 1);
}

TEST(RecipesLarge, OverBudgetRecipesStillShowTheirNeeds) {
  Graph g = small_llama();
  Mesh mesh({2, 4}, {"dp", "tp"}, h100());
  PlannerOptions po = no_limit();
  // What the recipes need as they are: the default policy would recompute to fit the budget.
  po.recompute = RecomputePolicy::kNone;
  RecipeResult fsdp = plan_recipe(Recipe::kFsdp, g, mesh, po);
  RecipeResult ddp = plan_recipe(Recipe::kDdp, g, mesh, po);
  ASSERT_TRUE(fsdp.plan && ddp.plan);
  ASSERT_LT(fsdp.plan->peak_memory_bytes, ddp.plan->peak_memory_bytes);
  // Any DDP plan holds the whole parameter state (16 bytes per parameter with the graph's
  // mixed-precision Adam) for the whole step: a budget just below that cannot fit, and the
  // recipe still reports the plan it would need.
  po.memory_limit_bytes = 16 * g.parameter_count() - 1;
  RecipeResult ddp2 = plan_recipe(Recipe::kDdp, g, mesh, po);
  ASSERT_TRUE(ddp2.plan) << ddp2.error;
  EXPECT_FALSE(ddp2.fits);
  EXPECT_EQ(ddp2.memory_limit_bytes, po.memory_limit_bytes);
  EXPECT_GT(ddp2.plan->peak_memory_bytes, po.memory_limit_bytes);
  EXPECT_EQ(ddp2.plan->objective_us, ddp.plan->objective_us);
  // Asked only for a plan that fits, the same recipe has none (and no second solve).
  RecipeResult ddp3 = plan_recipe_that_fits(Recipe::kDdp, g, mesh, po);
  EXPECT_FALSE(ddp3.plan);
  EXPECT_FALSE(ddp3.fits);
  EXPECT_FALSE(ddp3.error.empty());
  // FSDP at exactly its own peak fits.
  po.memory_limit_bytes = fsdp.plan->peak_memory_bytes;
  RecipeResult fsdp2 = plan_recipe(Recipe::kFsdp, g, mesh, po);
  ASSERT_TRUE(fsdp2.plan) << fsdp2.error;
  EXPECT_TRUE(fsdp2.fits);
  EXPECT_LE(fsdp2.plan->peak_memory_bytes, po.memory_limit_bytes);
  RecipeResult fsdp3 = plan_recipe_that_fits(Recipe::kFsdp, g, mesh, po);
  ASSERT_TRUE(fsdp3.plan) << fsdp3.error;
  EXPECT_TRUE(fsdp3.fits);
  EXPECT_EQ(fsdp3.plan->objective_us, fsdp2.plan->objective_us);
}

}  // namespace
}  // namespace autoshard

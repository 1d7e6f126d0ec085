// Stacked expert weights found from the graph, and the ep recipe's pins on them.
#include "planner/experts.h"

#include <gtest/gtest.h>

#include "mesh/hardware.h"
#include "planner/recipes.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

NodeIdx param(Graph& g, const std::string& name, std::vector<int64_t> shape) {
  Node n;
  n.name = name;
  n.kind = NodeKind::kParameter;
  n.outputs.push_back({std::move(shape), DType::kF32});
  return g.add(std::move(n));
}

NodeIdx input(Graph& g, const std::string& name, std::vector<int64_t> shape) {
  Node n;
  n.name = name;
  n.kind = NodeKind::kInput;
  n.outputs.push_back({std::move(shape), DType::kF32});
  return g.add(std::move(n));
}

/// A batched expert (x [E=4, 16, 8] @ w.transpose(1, 2) with w [4, 32, 8]), a jagged one
/// (rows [64, 8] x [4, 8, 32] with offs) and a dense weight permuted off its dim 0.
Graph moe_graph() {
  Graph g;
  const NodeIdx x = input(g, "x", {4, 16, 8});
  const NodeIdx rows = input(g, "rows", {64, 8});
  const NodeIdx w = param(g, "w", {4, 32, 8});
  const NodeIdx v = param(g, "v", {4, 8, 32});
  const NodeIdx d = param(g, "d", {4, 8, 8});
  const NodeIdx wt = g.add_op("wt", "aten.transpose.int", {{w, 0}}, {{4, 8, 32}, DType::kF32},
                              Phase::kForward, {{"dim0", int64_t{-2}}, {"dim1", int64_t{-1}}});
  g.add_op("batched", "aten._grouped_mm.default", {{x, 0}, {wt, 0}}, {{4, 16, 32}, DType::kF32});
  Node offs;
  offs.name = "offs";
  offs.kind = NodeKind::kInput;
  offs.outputs.push_back({{4}, DType::kI32});
  const NodeIdx o = g.add(std::move(offs));
  g.add_op("jagged", "aten._grouped_mm.default", {{rows, 0}, {v, 0}, {o, 0}}, {{64, 32}, DType::kF32});
  const NodeIdx dp = g.add_op("dp", "aten.permute.default", {{d, 0}}, {{8, 4, 8}, DType::kF32},
                              Phase::kForward, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  g.add_op("other", "aten.bmm.default", {{dp, 0}, {dp, 0}}, {{8, 4, 8}, DType::kF32});
  return g;
}

TEST(Experts, FindsStackedWeightsAndTheirMatmuls) {
  Graph g = moe_graph();
  ExpertAnalysis ea = expert_analysis(g);
  EXPECT_EQ(ea.n_params, 2);
  EXPECT_TRUE(ea.expert_param[static_cast<size_t>(*g.find("w"))]);
  EXPECT_TRUE(ea.expert_param[static_cast<size_t>(*g.find("v"))]);
  EXPECT_FALSE(ea.expert_param[static_cast<size_t>(*g.find("d"))]);  // dim 0 permuted away
  ASSERT_EQ(ea.batched.size(), 1u);
  EXPECT_EQ(g.node(ea.batched[0]).name, "batched");
  EXPECT_EQ(ea.jagged, 1);
}

TEST(Experts, EpDimByName) {
  EXPECT_EQ(expert_parallel_dim(Mesh({2, 4}, {"dp", "ep"}, h100())), 1);
  EXPECT_EQ(expert_parallel_dim(Mesh({2, 4}, {"dp", "tp"}, h100())), -1);
}

TEST(Experts, EpRecipePinsExpertsOnEpAndTheirMatmul) {
  Graph g = moe_graph();
  Mesh mesh({2, 2}, {"dp", "ep"}, h100());
  RecipePins pins = recipe_pins(Recipe::kEp, g, mesh);
  ASSERT_TRUE(pins.not_applicable.empty()) << pins.not_applicable;
  auto pinned = [&](const std::vector<Constraint>& cs, const std::string& node) {
    for (const Constraint& c : cs)
      if (c.node == node) return placements_to_string(c.output);
    return std::string("<none>");
  };
  EXPECT_EQ(pinned(pins.constraints, "w"), "S(1)S(0)");  // experts on ep, FSDP on dp
  EXPECT_EQ(pinned(pins.constraints, "d"), "S(0)S(0)");  // a dense weight: FSDP everywhere
  EXPECT_EQ(pinned(pins.constraints, "x"), "S(0)S(0)");  // the batch over every dim
  EXPECT_EQ(pinned(pins.use_constraints, "batched"), "S(1)S(0)");
  // Jagged experts only: not applicable, with the reason.
  Graph j = moe_graph();
  j.node(*j.find("batched")).outputs[0].shape = {64, 32};
  RecipePins none = recipe_pins(Recipe::kEp, j, mesh);
  EXPECT_NE(none.not_applicable.find("group token rows jaggedly"), std::string::npos)
      << none.not_applicable;
  EXPECT_EQ(parse_recipe("ep"), Recipe::kEp);
}

}  // namespace
}  // namespace autoshard

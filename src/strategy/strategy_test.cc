#include "strategy/strategy.h"

#include <gtest/gtest.h>

#include "strategy/rule.h"
#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

TEST(OpName, StripsNamespaceOverloadAndInplace) {
  OpName a = parse_op_name("aten.add_.Tensor");
  EXPECT_EQ(a.base, "add");
  EXPECT_EQ(a.overload, "Tensor");
  EXPECT_TRUE(a.inplace);
  OpName b = parse_op_name("sum.dim_IntList");
  EXPECT_EQ(b.base, "sum");
  EXPECT_EQ(b.overload, "dim_IntList");
  EXPECT_FALSE(b.inplace);
  EXPECT_EQ(parse_op_name("aten::mm.default").overload, "");
  EXPECT_FALSE(parse_op_name("_to_copy").inplace);
  EXPECT_FALSE(parse_op_name("__and__.Tensor").inplace);
  EXPECT_TRUE(parse_op_name("_fused_adam_").inplace);
}

TEST(HasRule, AcceptsEverySpelling) {
  for (const char* op : {"add.Tensor", "add", "aten.add.Tensor", "add_.Tensor", "mul_",
                         "copy_", "sum.dim_IntList", "torch.ops.aten.mm.default", "_fused_adam",
                         "_fused_adam_", "native_layer_norm", "view"})
    EXPECT_TRUE(has_rule(op)) << op;
  EXPECT_FALSE(has_rule("my_custom_op"));
  EXPECT_FALSE(has_rule("nonzero_static_typo"));
  EXPECT_TRUE(has_rule("nonzero"));  // data-dependent output shape: replicated only
  EXPECT_GT(covered_ops().size(), 150u);
}

TEST(Placeholder, EveryReplicateOrShardCombination) {
  Graph g;
  auto x = input(g, {8, 2});
  EXPECT_EQ(names(g, x.node, mesh1()), (V{"R", "S(0)"}));  // dim 1 too small for 4 shards
  EXPECT_EQ(names(g, x.node, mesh2()),
            (V{"RR", "RS(0)", "RS(1)", "S(0)R", "S(0)S(0)", "S(0)S(1)", "S(1)R", "S(1)S(0)"}));
  StrategyOptions div;
  div.require_divisible = true;
  Graph g2;
  auto y = input(g2, {6, 4});
  EXPECT_EQ(names(g2, y.node, mesh1(), div), (V{"R", "S(1)"}));
}

TEST(Placeholder, ParametersAndScalars) {
  Graph g;
  Node p;
  p.name = "w";
  p.kind = NodeKind::kParameter;
  p.outputs.push_back(T({16}));
  NodeIdx w = g.add(p);
  EXPECT_EQ(names(g, w, mesh1()), (V{"R", "S(0)"}));
  auto s = input(g, {});
  EXPECT_EQ(names(g, s.node, mesh2()), (V{"RR"}));
}

TEST(Output, SingleStrategyAcceptingAnyInput) {
  Graph g;
  auto x = input(g, {8, 8});
  Node o;
  o.name = "output";
  o.kind = NodeKind::kOutput;
  o.inputs = {x};
  NodeIdx n = g.add(o);
  NodeStrategies ns = enumerate_strategies(g, n, mesh2());
  EXPECT_TRUE(ns.any_input);
  EXPECT_FALSE(ns.fallback);
  ASSERT_EQ(ns.strategies.size(), 1u);
  EXPECT_TRUE(ns.strategies[0].outputs.empty());
  EXPECT_EQ(ns.strategies[0].name(), "<- RR");
}

TEST(Fallback, UnknownOpIsReplicated) {
  Graph g;
  auto x = input(g, {8, 8});
  NodeIdx n = op(g, "my_custom_op", {x, x}, {T({8}), T({4})});
  NodeStrategies ns = enumerate_strategies(g, n, mesh2());
  EXPECT_TRUE(ns.fallback);
  EXPECT_EQ(names(ns), (V{"RR, RR <- RR, RR"}));
  EXPECT_EQ(ns.strategies[0].inputs[0].meta.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(ns.strategies[0].outputs[1].meta.shape, (std::vector<int64_t>{4}));
}

TEST(Creation, LikePlaceholders) {
  Graph g;
  NodeIdx n = op(g, "arange", {}, {T({8}, DType::kI64)});
  EXPECT_EQ(names(g, n, mesh1()), (V{"R", "S(0)"}));
  NodeIdx z = op(g, "zeros.default", {}, {T({4, 8})});
  EXPECT_EQ(names(g, z, mesh2()).size(), 9u);
  EXPECT_FALSE(enumerate_strategies(g, z, mesh2()).fallback);
}

TEST(Engine, DeterministicAndSpecsCarryMetas) {
  Graph g;
  auto a = input(g, {8, 16}, DType::kBF16);
  auto b = input(g, {16, 32}, DType::kBF16);
  NodeIdx n = g.add_op("mm", "mm", {a, b}, T({8, 32}, DType::kBF16));
  NodeStrategies x = enumerate_strategies(g, n, mesh2());
  NodeStrategies y = enumerate_strategies(g, n, mesh2());
  EXPECT_EQ(names(x), names(y));
  for (const auto& s : x.strategies) {
    ASSERT_EQ(s.outputs.size(), 1u);
    ASSERT_EQ(s.inputs.size(), 2u);
    EXPECT_EQ(s.inputs[1].meta, g.meta(b));
    EXPECT_EQ(s.outputs[0].meta.dtype, DType::kBF16);
    EXPECT_TRUE(s.outputs[0].valid(mesh2()));
  }
}

TEST(Engine, ThreeDimMesh) {
  Graph g;
  auto a = input(g, {8, 16});
  auto b = input(g, {16, 32});
  NodeIdx n = g.add_op("mm", "mm", {a, b}, T({8, 32}));
  Mesh m({2, 2, 2}, {"pp", "dp", "tp"}, *hardware_preset("h100"));
  V got = names(g, n, m);
  EXPECT_EQ(got.size(), 64u);
  EXPECT_EQ(got.front(), "RRR <- RRR, RRR");
  EXPECT_EQ(got.back(), "S(1)S(1)S(1) <- RRR, S(1)S(1)S(1)");
}

}  // namespace
}  // namespace autoshard

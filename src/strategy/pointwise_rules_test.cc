#include <gtest/gtest.h>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

TEST(Pointwise, AddTensorBroadcastsAndKeepsAllPartial) {
  Graph g;
  auto a = input(g, {4, 8});
  auto b = input(g, {8});
  NodeIdx n = g.add_op("add", "aten.add.Tensor", {a, b}, T({4, 8}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), R", "S(1) <- S(1), S(0)",
               "P(sum) <- P(sum), P(sum)"}));
}

TEST(Pointwise, BroadcastFromSizeOneStaysReplicated) {
  Graph g;
  auto a = input(g, {4, 8});
  auto b = input(g, {4, 1});
  NodeIdx n = g.add_op("sub", "sub.Tensor", {a, b}, T({4, 8}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), S(0)", "S(1) <- S(1), R", "P(sum) <- P(sum), P(sum)"}));
}

TEST(Pointwise, ScalarVariants) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx add = g.add_op("adds", "add.Scalar", {a}, T({4, 8}));
  EXPECT_EQ(names(g, add, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)"}));
  NodeIdx mul = g.add_op("muls", "mul.Scalar", {a}, T({4, 8}));
  EXPECT_EQ(names(g, mul, mesh1()),
            (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)", "P(sum) <- P(sum)"}));
}

TEST(Pointwise, MulAndDivPartialByReplicated) {
  Graph g;
  auto a = input(g, {4, 8});
  auto s = input(g, {});
  NodeIdx mul = g.add_op("mul", "mul.Tensor", {a, s}, T({4, 8}));
  EXPECT_EQ(names(g, mul, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), R", "S(1) <- S(1), R", "P(sum) <- P(sum), R",
               "P(sum) <- R, P(sum)"}));
  NodeIdx div = g.add_op("div", "div.Tensor", {a, s}, T({4, 8}));
  EXPECT_EQ(names(g, div, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), R", "S(1) <- S(1), R", "P(sum) <- P(sum), R"}));
}

TEST(Pointwise, NonLinearUnaryHasNoPartial) {
  Graph g;
  auto a = input(g, {4, 8});
  for (const char* op : {"silu", "gelu", "rsqrt", "pow.Tensor_Scalar", "exp", "relu"}) {
    NodeIdx n = g.add_op(std::string("n_") + op, op, {a}, T({4, 8}));
    EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)"})) << op;
  }
  for (const char* op : {"neg", "_to_copy", "clone"}) {
    NodeIdx n = g.add_op(std::string("l_") + op, op, {a}, T({4, 8}, DType::kBF16));
    EXPECT_EQ(names(g, n, mesh1()).back(), "P(sum) <- P(sum)") << op;
  }
}

TEST(Pointwise, WhereThreeWayBroadcast) {
  Graph g;
  auto c = input(g, {1, 8}, DType::kBool);
  auto a = input(g, {4, 8});
  auto b = input(g, {});
  NodeIdx n = g.add_op("where", "where.self", {c, a, b}, T({4, 8}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R, R", "S(0) <- R, S(0), R", "S(1) <- S(1), S(1), R"}));
}

TEST(Pointwise, InplaceAndBackwardOps) {
  Graph g;
  auto a = input(g, {4, 8});
  auto b = input(g, {4, 8});
  NodeIdx n = g.add_op("add_", "add_.Tensor", {a, b}, T({4, 8}));
  EXPECT_EQ(names(g, n, mesh1()).size(), 4u);
  NodeIdx tb = g.add_op("tb", "threshold_backward", {a, b}, T({4, 8}));
  EXPECT_EQ(names(g, tb, mesh1()), (V{"R <- R, R", "S(0) <- S(0), S(0)", "S(1) <- S(1), S(1)"}));
  NodeIdx cp = g.add_op("cp", "copy_", {a, b}, T({4, 8}));
  EXPECT_EQ(names(g, cp, mesh1()).back(), "P(sum) <- P(sum), P(sum)");
}

TEST(Pointwise, TwoDimMeshProduct) {
  Graph g;
  auto a = input(g, {4, 8});
  auto b = input(g, {8});
  NodeIdx n = g.add_op("mul", "mul.Tensor", {a, b}, T({4, 8}));
  V got = names(g, n, mesh2());
  // rows per mesh dim: R, S0, S1, P|R, R|P -> 25 combos, all valid on 2x2
  EXPECT_EQ(got.size(), 25u);
  EXPECT_EQ(got[6], "S(0)S(0) <- S(0)S(0), RR");
  EXPECT_EQ(got[8], "S(0)P(sum) <- S(0)P(sum), RR");
  EXPECT_EQ(got[9], "S(0)P(sum) <- S(0)R, RP(sum)");
  EXPECT_EQ(got[12], "S(1)S(1) <- S(1)S(1), S(0)S(0)");
}

TEST(Pointwise, DropoutTwoOutputs) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx n = op(g, "native_dropout", {a}, {T({4, 8}), T({4, 8}, DType::kBool)});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R <- R", "S(0), S(0) <- S(0)", "S(1), S(1) <- S(1)"}));
}

TEST(Pointwise, InplaceRandomFillsFollowSelf) {
  // PhiMoE's router jitter samples with uniform_ / exponential_ (DTensor: _random_ops.py).
  Graph g;
  auto a = input(g, {4, 8});
  for (const char* op : {"uniform_", "exponential_", "normal_", "bernoulli_.float"}) {
    NodeIdx n = g.add_op(std::string("n_") + op, op, {a}, T({4, 8}));
    EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)"})) << op;
  }
}

}  // namespace
}  // namespace autoshard

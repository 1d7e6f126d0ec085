#include <gtest/gtest.h>

#include <string>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

/// The rotary tensors of a (batch, seq, heads, head_dim / 2) attention.
constexpr DType kC64 = DType::kC64;

TEST(Complex, ViewAsComplexCannotShardThePairDim) {
  Graph g;
  auto x = input(g, {2, 8, 4, 16, 2});
  NodeIdx n = g.add_op("vc", "view_as_complex", {x}, T({2, 8, 4, 16}, kC64));
  // DTensor: dims 0..3 map 1:1, P(sum) passes, the last (pair) dim has no shard.
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)",
                                      "S(1) <- S(1)", "S(2) <- S(2)", "S(3) <- S(3)"}));
  for (const std::string& s : names(g, n, mesh2()))
    EXPECT_EQ(s.find("S(4)"), std::string::npos) << s;
}

TEST(Complex, ViewAsRealKeepsEveryDimAndNeverShardsThePair) {
  Graph g;
  auto z = input(g, {2, 8, 4, 16}, kC64);
  NodeIdx n = g.add_op("vr", "view_as_real", {z}, T({2, 8, 4, 16, 2}));
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)",
                                      "S(1) <- S(1)", "S(2) <- S(2)", "S(3) <- S(3)"}));
}

TEST(Complex, ViewsOfARankOneTensor) {
  Graph g;
  auto x = input(g, {2});
  NodeIdx vc = g.add_op("vc", "view_as_complex", {x}, T({}, kC64));
  EXPECT_EQ(names(g, vc, mesh1(2)), (V{"R <- R", "P(sum) <- P(sum)"}));
  auto z = input(g, {}, kC64);
  NodeIdx vr = g.add_op("vr", "view_as_real", {z}, T({2}));
  EXPECT_EQ(names(g, vr, mesh1(2)), (V{"R <- R", "P(sum) <- P(sum)"}));
}

TEST(Complex, PolarIsPointwiseWithoutPartial) {
  Graph g;
  auto mag = input(g, {8, 16});
  auto ang = input(g, {16});  // broadcast over the rows
  NodeIdx n = g.add_op("p", "polar", {mag, ang}, T({8, 16}, kC64));
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R <- R, R", "S(0) <- S(0), R", "S(1) <- S(1), S(0)"}));
}

TEST(Complex, ComplexMulIsTheRealPointwiseRule) {
  // Rotary: x (b, s, h, d/2) times the table (1, s, 1, d/2); DTensor's mul keeps P x R -> P.
  Graph g;
  auto x = input(g, {2, 8, 4, 16}, kC64);
  auto f = input(g, {1, 8, 1, 16}, kC64);
  NodeIdx n = g.add_op("m", "mul.Tensor", {x, f}, T({2, 8, 4, 16}, kC64));
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R <- R, R", "S(0) <- S(0), R", "S(1) <- S(1), S(1)", "S(2) <- S(2), R",
               "S(3) <- S(3), S(3)", "P(sum) <- P(sum), R", "P(sum) <- R, P(sum)"}));
}

TEST(Complex, ConjHasNoPartialAsInDTensor) {
  Graph g;
  auto z = input(g, {1, 8, 1, 4}, kC64);
  NodeIdx n = g.add_op("c", "_conj", {z}, T({1, 8, 1, 4}, kC64));
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R <- R", "S(1) <- S(1)", "S(3) <- S(3)"}));
}

TEST(Complex, BadShapesFailWithTheNodeName) {
  Graph g;
  auto x = input(g, {2, 8, 3});
  NodeIdx n = g.add_op("vc", "view_as_complex", {x}, T({2, 8}, kC64));
  try {
    enumerate_strategies(g, n, mesh1(2));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "node 'vc' (view_as_complex): view_as_complex needs a last dim of size 2, got "
              "shape [2, 8, 3]");
  }
  auto z = input(g, {2, 8}, kC64);
  NodeIdx r = g.add_op("vr", "view_as_real", {z}, T({2, 8, 3}));
  EXPECT_THROW(enumerate_strategies(g, r, mesh1(2)), std::invalid_argument);
  auto a = input(g, {8});
  NodeIdx p = g.add_op("p", "polar", {a}, T({8}, kC64));
  EXPECT_THROW(enumerate_strategies(g, p, mesh1(2)), std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

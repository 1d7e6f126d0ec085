#include <gtest/gtest.h>

#include "strategy/einsum_rules.h"
#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

TEST(Einsum, MmOn1DMesh) {
  Graph g;
  auto a = input(g, {8, 16});
  auto b = input(g, {16, 32});
  NodeIdx n = g.add_op("mm", "aten.mm.default", {a, b}, T({8, 32}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "P(sum) <- S(1), S(0)", "S(0) <- S(0), R", "S(1) <- R, S(1)"}));
}

TEST(Einsum, MmOn2DMeshIsTheProductMinusInvalid) {
  Graph g;
  auto a = input(g, {2, 16});  // m = 2: cannot be split 4 ways
  auto b = input(g, {16, 32});
  NodeIdx n = g.add_op("mm", "mm", {a, b}, T({2, 32}));
  V got = names(g, n, mesh2());
  EXPECT_EQ(got.size(), 15u);  // 16 combinations minus S(0)S(0) on m = 2
  EXPECT_EQ(got[0], "RR <- RR, RR");
  EXPECT_EQ(got[1], "RP(sum) <- RS(1), RS(0)");
  EXPECT_EQ(got[5], "P(sum)P(sum) <- S(1)S(1), S(0)S(0)");
  EXPECT_EQ(std::count(got.begin(), got.end(), "S(0)S(0) <- S(0)S(0), RR"), 0);
  EXPECT_EQ(std::count(got.begin(), got.end(), "S(0)S(1) <- S(0)R, RS(1)"), 1);
  // With m = 4 every combination is valid.
  Graph g2;
  auto a2 = input(g2, {4, 16});
  auto b2 = input(g2, {16, 32});
  NodeIdx n2 = g2.add_op("mm", "mm", {a2, b2}, T({4, 32}));
  EXPECT_EQ(names(g2, n2, mesh2()).size(), 16u);
}

TEST(Einsum, BmmAddsBatchRule) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  auto b = input(g, {4, 16, 32});
  NodeIdx n = g.add_op("bmm", "bmm", {a, b}, T({4, 8, 32}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), S(0)", "P(sum) <- S(2), S(1)", "S(1) <- S(1), R",
               "S(2) <- R, S(2)"}));
}

TEST(Einsum, AddmmBiasFollowsOutputThroughBroadcast) {
  Graph g;
  auto bias = input(g, {32});
  auto a = input(g, {8, 16});
  auto b = input(g, {16, 32});
  NodeIdx n = g.add_op("addmm", "addmm", {bias, a, b}, T({8, 32}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R, R", "P(sum) <- P(sum), S(1), S(0)", "S(0) <- R, S(0), R",
               "S(1) <- S(0), R, S(1)"}));
}

TEST(Einsum, BaddbmmBias) {
  Graph g;
  auto bias = input(g, {4, 1, 32});
  auto a = input(g, {4, 8, 16});
  auto b = input(g, {4, 16, 32});
  NodeIdx n = g.add_op("baddbmm", "baddbmm.default", {bias, a, b}, T({4, 8, 32}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R, R", "S(0) <- S(0), S(0), S(0)", "P(sum) <- P(sum), S(2), S(1)",
               "S(1) <- R, S(1), R", "S(2) <- S(2), R, S(2)"}));
}

TEST(Einsum, LinearWithBias) {
  Graph g;
  auto x = input(g, {2, 8, 16});
  auto w = input(g, {32, 16});
  auto bias = input(g, {32});
  NodeIdx n = g.add_op("lin", "linear", {x, w, bias}, T({2, 8, 32}));
  // batch-like leading dims are free dims of the input
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R <- R, R, R", "P(sum) <- S(2), S(1), P(sum)", "S(0) <- S(0), R, R",
               "S(1) <- S(1), R, R", "S(2) <- R, S(0), S(0)"}));
}

TEST(Einsum, MatmulBroadcastsBatch) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  auto b = input(g, {16, 32});
  NodeIdx n = g.add_op("mm", "matmul", {a, b}, T({4, 8, 32}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "P(sum) <- S(2), S(0)", "S(0) <- S(0), R", "S(1) <- S(1), R",
               "S(2) <- R, S(1)"}));
}

TEST(Einsum, GenericEquation) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  auto b = input(g, {4, 16});
  NodeIdx n = g.add_op("e", "einsum", {a, b}, T({4, 8}), Phase::kForward,
                       {{"equation", std::string("bij,bj->bi")}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), S(0)", "P(sum) <- S(2), S(1)", "S(1) <- S(1), R"}));
}

TEST(Einsum, ParseEllipsisAndImplicitOutput) {
  EinsumSpec s = parse_einsum("...ij,jk", {4, 2});
  ASSERT_EQ(s.inputs.size(), 2u);
  EXPECT_EQ(s.inputs[0].size(), 4u);
  EXPECT_EQ(s.inputs[1], "jk");
  EXPECT_EQ(s.output.size(), 4u);  // two ellipsis dims, then i, k
  EXPECT_EQ(s.output.substr(2), "ik");
  EXPECT_THROW(parse_einsum("ij,jk->ik", {3, 2}), std::invalid_argument);
}

TEST(Einsum, BadEquationNamesNode) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx n = g.add_op("bad", "einsum", {a}, T({4}), Phase::kForward,
                       {{"equation", std::string("ijk->i")}});
  try {
    enumerate_strategies(g, n, mesh1());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos);
  }
}

}  // namespace
}  // namespace autoshard

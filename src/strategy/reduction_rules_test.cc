#include <gtest/gtest.h>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;
using Ints = std::vector<int64_t>;

TEST(Reduction, SumDimReindexesAndGivesPartial) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx n = g.add_op("s", "sum.dim_IntList", {a}, T({4, 16}), Phase::kForward,
                       {{"dim", Ints{1}}, {"keepdim", false}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R", "S(0) <- S(0)", "P(sum) <- S(1)", "S(1) <- S(2)", "P(sum) <- P(sum)"}));
}

TEST(Reduction, KeepdimAndNegativeDims) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx n = g.add_op("s", "amax", {a}, T({4, 8, 1}), Phase::kForward,
                       {{"dim", Ints{-1}}, {"keepdim", true}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)", "P(max) <- S(2)"}));
}

TEST(Reduction, FullSumToScalar) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx n = g.add_op("s", "sum", {a}, T({}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R", "P(sum) <- S(0)", "P(sum) <- S(1)", "P(sum) <- P(sum)"}));
  V two = names(g, n, mesh2());
  EXPECT_EQ(two.size(), 16u);
  EXPECT_EQ(two[5], "P(sum)P(sum) <- S(0)S(0)");
}

TEST(Reduction, MeanIsPartialAvgOnlyWhenEven) {
  Graph g;
  auto a = input(g, {6, 8});
  NodeIdx n = g.add_op("m", "mean.dim", {a}, T({8}), Phase::kForward,
                       {{"dim", Ints{0}}, {"keepdim", false}});
  // 6 rows over 4 shards is uneven: the P(avg) strategy is dropped.
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(1)", "P(sum) <- P(sum)"}));
  Graph g2;
  auto b = input(g2, {8, 8});
  NodeIdx m = g2.add_op("m", "mean.dim", {b}, T({8}), Phase::kForward,
                        {{"dim", Ints{0}}, {"keepdim", false}});
  EXPECT_EQ(names(g2, m, mesh1()),
            (V{"R <- R", "P(avg) <- S(0)", "S(0) <- S(1)", "P(sum) <- P(sum)"}));
}

TEST(Reduction, VarAndMaxDimKeepOnlyNonReducedShards) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx v = g.add_op("v", "var.correction", {a}, T({4, 1}), Phase::kForward,
                       {{"dim", Ints{1}}, {"keepdim", true}});
  EXPECT_EQ(names(g, v, mesh1()), (V{"R <- R", "S(0) <- S(0)"}));
  NodeIdx m = op(g, "max.dim", {a}, {T({4}), T({4}, DType::kI64)},
                 {{"dim", int64_t{1}}, {"keepdim", false}});
  EXPECT_EQ(names(g, m, mesh1()), (V{"R, R <- R", "S(0), S(0) <- S(0)"}));
  NodeIdx full = g.add_op("mx", "max", {a}, T({}));
  EXPECT_EQ(names(g, full, mesh1()), (V{"R <- R", "P(max) <- S(0)", "P(max) <- S(1)"}));
}

TEST(Softmax, DimNeverSharded) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx n = g.add_op("sm", "_softmax", {a}, T({4, 8, 16}), Phase::kForward,
                       {{"dim", int64_t{-1}}, {"half_to_float", false}});
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)"}));
  auto go = input(g, {4, 8, 16});
  NodeIdx b = g.add_op("smb", "_log_softmax_backward_data", {go, {n, 0}}, T({4, 8, 16}),
                       Phase::kBackward, {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, b, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), S(0)", "S(2) <- S(2), S(2)"}));
}

TEST(Reduction, CumsumPassesPartial) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx n = g.add_op("c", "cumsum", {a}, T({4, 8}), Phase::kForward, {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(0)", "P(sum) <- P(sum)"}));
}

TEST(Reduction, DimOutOfRangeThrows) {
  Graph g;
  auto a = input(g, {4, 8});
  NodeIdx n = g.add_op("bad_sum", "sum.dim_IntList", {a}, T({4}), Phase::kForward,
                       {{"dim", Ints{2}}});
  EXPECT_THROW(enumerate_strategies(g, n, mesh1()), std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

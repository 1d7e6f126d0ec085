#include <gtest/gtest.h>

#include <algorithm>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;
using Ints = std::vector<int64_t>;

TEST(LayerNorm, ForwardShardsLeadingDims) {
  Graph g;
  auto x = input(g, {4, 8, 16});
  auto w = input(g, {16});
  auto b = input(g, {16});
  NodeIdx n = op(g, "native_layer_norm", {x, w, b}, {T({4, 8, 16}), T({4, 8, 1}), T({4, 8, 1})},
                 {{"normalized_shape", Ints{16}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R, R <- R, R, R", "S(0), S(0), S(0) <- S(0), R, R",
               "S(1), S(1), S(1) <- S(1), R, R"}));
}

TEST(LayerNorm, BackwardGivesPartialWeightGrads) {
  Graph g;
  auto go = input(g, {4, 16});
  auto x = input(g, {4, 16});
  auto mean = input(g, {4, 1});
  auto rstd = input(g, {4, 1});
  auto w = input(g, {16});
  auto b = input(g, {16});
  NodeIdx n = op(g, "native_layer_norm_backward", {go, x, mean, rstd, w, b},
                 {T({4, 16}), T({16}), T({16})}, {{"normalized_shape", Ints{16}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R, R <- R, R, R, R, R, R",
               "S(0), P(sum), P(sum) <- S(0), S(0), S(0), S(0), R, R"}));
}

TEST(RmsNorm, FusedForwardAndBackward) {
  Graph g;
  auto x = input(g, {2, 8, 16});
  auto w = input(g, {16});
  NodeIdx f = op(g, "_fused_rms_norm", {x, w}, {T({2, 8, 16}), T({2, 8, 1})},
                 {{"normalized_shape", Ints{16}}});
  EXPECT_EQ(names(g, f, mesh1(2)),
            (V{"R, R <- R, R", "S(0), S(0) <- S(0), R", "S(1), S(1) <- S(1), R"}));
  auto go = input(g, {2, 8, 16});
  NodeIdx b = op(g, "_fused_rms_norm_backward", {go, x, {f, 1}, w}, {T({2, 8, 16}), T({16})},
                 {{"normalized_shape", Ints{16}}});
  EXPECT_EQ(names(g, b, mesh1(2)),
            (V{"R, R <- R, R, R, R", "S(0), P(sum) <- S(0), S(0), S(0), R",
               "S(1), P(sum) <- S(1), S(1), S(1), R"}));
}

TEST(BatchNorm, TrainingChannelAndLocalBatch) {
  Graph g;
  auto x = input(g, {8, 4, 6, 6});
  auto w = input(g, {4});
  auto b = input(g, {4});
  auto rm = input(g, {4});
  auto rv = input(g, {4});
  NodeIdx n = op(g, "native_batch_norm", {x, w, b, rm, rv}, {T({8, 4, 6, 6}), T({4}), T({4})},
                 {{"training", true}});
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R <- R, R, R, R, R", "S(1), S(0), S(0) <- S(1), S(0), S(0), S(0), S(0)",
               "S(0), P(avg), P(avg) <- S(0), R, R, R, R"}));
  StrategyOptions exact;
  exact.batch_norm_local_stats = false;
  EXPECT_EQ(names(g, n, mesh1(2), exact).size(), 2u);
}

TEST(BatchNorm, EvalBatchShardingIsExact) {
  Graph g;
  auto x = input(g, {8, 4, 6, 6});
  auto w = input(g, {4});
  auto b = input(g, {4});
  auto rm = input(g, {4});
  auto rv = input(g, {4});
  NodeIdx n = op(g, "_native_batch_norm_legit_no_training", {x, w, b, rm, rv},
                 {T({8, 4, 6, 6}), T({0}), T({0})});
  StrategyOptions exact;
  exact.batch_norm_local_stats = false;
  EXPECT_EQ(names(g, n, mesh1(2), exact),
            (V{"R, R, R <- R, R, R, R, R", "S(1), R, R <- S(1), S(0), S(0), S(0), S(0)",
               "S(0), R, R <- S(0), R, R, R, R"}));
}

TEST(BatchNorm, Backward) {
  Graph g;
  auto go = input(g, {8, 4, 6, 6});
  auto x = input(g, {8, 4, 6, 6});
  auto w = input(g, {4});
  auto rm = input(g, {4});
  auto rv = input(g, {4});
  auto sm = input(g, {4});
  auto si = input(g, {4});
  NodeIdx n = op(g, "native_batch_norm_backward", {go, x, w, rm, rv, sm, si},
                 {T({8, 4, 6, 6}), T({4}), T({4})}, {{"train", true}});
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R <- R, R, R, R, R, R, R",
               "S(1), S(0), S(0) <- S(1), S(1), S(0), S(0), S(0), S(0), S(0)",
               "S(0), P(sum), P(sum) <- S(0), S(0), R, R, R, P(avg), P(avg)"}));
}

TEST(GroupNorm, ForwardBatchAndWholeGroupChannels) {
  Graph g;
  auto x = input(g, {8, 8, 6, 6});
  auto w = input(g, {8});
  auto b = input(g, {8});
  Attrs a{{"N", int64_t{8}}, {"C", int64_t{8}}, {"HxW", int64_t{36}}, {"group", int64_t{4}},
          {"eps", 1e-5}};
  NodeIdx n = op(g, "native_group_norm", {x, w, b}, {T({8, 8, 6, 6}), T({8, 4}), T({8, 4})}, a);
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R <- R, R, R", "S(0), S(0), S(0) <- S(0), R, R",
               "S(1), S(1), S(1) <- S(1), S(0), S(0)"}));
  // 4 groups over 4 shards: one group each; over 2x2 channel shards (S(1)S(1)) too.
  EXPECT_EQ(names(g, n, mesh1(4)).size(), 3u);
  auto both = names(g, n, mesh2(2, 2));
  EXPECT_NE(std::find(both.begin(), both.end(), "S(1)S(1), S(1)S(1), S(1)S(1) <- S(1)S(1), "
                                                "S(0)S(0), S(0)S(0)"),
            both.end());
  EXPECT_EQ(both.size(), 9u);
}

TEST(GroupNorm, ChannelShardsMustHoldWholeGroups) {
  Graph g;
  auto x = input(g, {8, 10, 6, 6});
  auto w = input(g, {10});
  auto b = input(g, {10});
  // 5 groups of 2 channels: 2 shards of 5 channels would cut the third group in half (the
  // specs alone are valid: 10 and 5 split into 5+5 and 3+2 without an empty shard).
  NodeIdx n = op(g, "native_group_norm", {x, w, b}, {T({8, 10, 6, 6}), T({8, 5}), T({8, 5})},
                 {{"N", int64_t{8}}, {"C", int64_t{10}}, {"HxW", int64_t{36}},
                  {"group", int64_t{5}}, {"eps", 1e-5}});
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R, R, R <- R, R, R", "S(0), S(0), S(0) <- S(0), R, R"}));
  // over 5 shards each holds one whole group (and batch 8 would leave the fifth one empty)
  EXPECT_EQ(names(g, n, mesh1(5)),
            (V{"R, R, R <- R, R, R", "S(1), S(1), S(1) <- S(1), S(0), S(0)"}));
  // a single group (layer-norm-like over C and HxW): batch only
  auto x1 = input(g, {8, 4, 6});
  NodeIdx one = op(g, "native_group_norm", {x1}, {T({8, 4, 6}), T({8, 1}), T({8, 1})},
                   {{"group", int64_t{1}}});
  EXPECT_EQ(names(g, one, mesh1(2)), (V{"R, R, R <- R", "S(0), S(0), S(0) <- S(0)"}));
}

TEST(GroupNorm, Backward) {
  Graph g;
  auto go = input(g, {8, 8, 6, 6});
  auto x = input(g, {8, 8, 6, 6});
  auto mean = input(g, {8, 4});
  auto rstd = input(g, {8, 4});
  auto w = input(g, {8});
  Attrs a{{"N", int64_t{8}}, {"C", int64_t{8}}, {"HxW", int64_t{36}}, {"group", int64_t{4}}};
  NodeIdx n = op(g, "native_group_norm_backward", {go, x, mean, rstd, w},
                 {T({8, 8, 6, 6}), T({8}), T({8})}, a);
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R <- R, R, R, R, R", "S(0), P(sum), P(sum) <- S(0), S(0), S(0), S(0), R",
               "S(1), S(0), S(0) <- S(1), S(1), S(1), S(1), S(0)"}));
  // 2-D input ([N, C], HxW 1): the stats have the input's rank, slots stay positional; with
  // grad_weight masked off (shape [0]) it is replicated.
  auto go2 = input(g, {8, 8});
  auto x2 = input(g, {8, 8});
  NodeIdx n2 = op(g, "native_group_norm_backward", {go2, x2, mean, rstd},
                  {T({8, 8}), T({0}), T({8})}, a);
  EXPECT_EQ(names(g, n2, mesh1(2)),
            (V{"R, R, R <- R, R, R, R", "S(0), R, P(sum) <- S(0), S(0), S(0), S(0)",
               "S(1), R, S(0) <- S(1), S(1), S(1), S(1)"}));
  EXPECT_EQ(names(g, n2, mesh1(8)).size(), 2u);  // 4 groups do not split over 8
  // 5 groups of 2 over 2 shards: the backward checks whole groups as the forward does
  auto go5 = input(g, {8, 10, 6});
  auto x5 = input(g, {8, 10, 6});
  auto m5 = input(g, {8, 5});
  auto r5 = input(g, {8, 5});
  NodeIdx n5 = op(g, "native_group_norm_backward", {go5, x5, m5, r5, input(g, {10})},
                  {T({8, 10, 6}), T({10}), T({10})}, {{"group", int64_t{5}}});
  EXPECT_EQ(names(g, n5, mesh1(2)),
            (V{"R, R, R <- R, R, R, R, R",
               "S(0), P(sum), P(sum) <- S(0), S(0), S(0), S(0), R"}));
}

TEST(WeightNorm, ShardsOnlyTheKeptDim) {
  Graph g;
  auto v = input(g, {8, 3, 3, 3});
  auto gg = input(g, {8, 1, 1, 1});
  NodeIdx n = op(g, "_weight_norm_interface", {v, gg}, {T({8, 3, 3, 3}), T({8, 1, 1, 1})},
                 {{"dim", int64_t{0}}});
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R, R <- R, R", "S(0), S(0) <- S(0), S(0)"}));
  // dim = last (the other layout the fused kernel takes): [in, out] linear weight
  auto v2 = input(g, {16, 8});
  auto g2 = input(g, {1, 8});
  NodeIdx last = op(g, "_weight_norm_interface", {v2, g2}, {T({16, 8}), T({1, 8})},
                    {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, last, mesh1(2)), (V{"R, R <- R, R", "S(1), S(1) <- S(1), S(1)"}));
}

TEST(WeightNorm, BackwardShardsKeptDimOrPassesPartial) {
  Graph g;
  auto gw = input(g, {8, 3, 3, 3});
  auto v = input(g, {8, 3, 3, 3});
  auto gg = input(g, {8, 1, 1, 1});
  auto norm = input(g, {8, 1, 1, 1});
  NodeIdx n = op(g, "_weight_norm_interface_backward", {gw, v, gg, norm},
                 {T({8, 3, 3, 3}), T({8, 1, 1, 1})}, {{"dim", int64_t{0}}});
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R <- R, R, R, R", "S(0), S(0) <- S(0), S(0), S(0), S(0)",
               "P(sum), P(sum) <- P(sum), R, R, R"}));
  EXPECT_TRUE(has_rule("aten._weight_norm_interface_backward.default"));
}

}  // namespace
}  // namespace autoshard

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace autoshard

#include <gtest/gtest.h>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

TEST(Embedding, FourRules) {
  Graph g;
  auto w = input(g, {32, 16});
  auto idx = input(g, {4, 8}, DType::kI64);
  NodeIdx n = g.add_op("emb", "embedding", {w, idx}, T({4, 8, 16}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(2) <- S(1), R", "P(sum) <- S(0), R", "S(0) <- R, S(0)",
               "S(1) <- R, S(1)"}));
}

TEST(Embedding, DenseBackward) {
  Graph g;
  auto go = input(g, {4, 8, 16});
  auto idx = input(g, {4, 8}, DType::kI64);
  NodeIdx n = g.add_op("eb", "embedding_dense_backward", {go, idx}, T({32, 16}),
                       Phase::kBackward, {{"num_weights", int64_t{32}}, {"padding_idx", int64_t{-1}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R", "S(1) <- S(2), R", "P(sum) <- S(0), S(0)", "P(sum) <- S(1), S(1)",
               "P(sum) <- P(sum), R"}));
}

TEST(Loss, NllForwardMeanSumNone) {
  Graph g;
  auto x = input(g, {8, 10});
  auto t = input(g, {8}, DType::kI64);
  NodeIdx mean = op(g, "nll_loss_forward", {x, t}, {T({}), T({})}, {{"reduction", int64_t{1}}});
  EXPECT_EQ(names(g, mean, mesh1()), (V{"R, R <- R, R", "P(avg), P(sum) <- S(0), S(0)"}));
  NodeIdx sum = op(g, "nll_loss_forward", {x, t}, {T({}), T({})}, {{"reduction", int64_t{2}}});
  EXPECT_EQ(names(g, sum, mesh1()), (V{"R, R <- R, R", "P(sum), P(sum) <- S(0), S(0)"}));
  NodeIdx none = op(g, "nll_loss_forward", {x, t}, {T({8}), T({})}, {{"reduction", int64_t{0}}});
  EXPECT_EQ(names(g, none, mesh1()), (V{"R, R <- R, R", "S(0), R <- S(0), S(0)"}));
  Graph g2;  // uneven batch: no P(avg) mean
  auto x2 = input(g2, {6, 10});
  auto t2 = input(g2, {6}, DType::kI64);
  NodeIdx m2 = op(g2, "nll_loss_forward", {x2, t2}, {T({}), T({})});
  EXPECT_EQ(names(g2, m2, mesh1()), (V{"R, R <- R, R"}));
}

TEST(Loss, CtcBatchSplit) {
  Graph g;  // T=12, N=4, C=6, S=5: log_alpha [4, 12, 2*5+1]
  auto lp = input(g, {12, 4, 6});
  auto tg = input(g, {4, 5}, DType::kI64);
  auto il = input(g, {4}, DType::kI64);
  auto tl = input(g, {4}, DType::kI64);
  NodeIdx f = op(g, "_ctc_loss.Tensor", {lp, tg, il, tl}, {T({4}), T({4, 12, 11})});
  EXPECT_EQ(names(g, f, mesh1(2)),
            (V{"R, R <- R, R, R, R", "S(0), S(0) <- S(1), S(0), S(0), S(0)"}));
  auto go = input(g, {4});
  auto nll = input(g, {4});
  auto la = input(g, {4, 12, 11});
  NodeIdx b = g.add_op("cb", "_ctc_loss_backward.Tensor", {go, lp, tg, il, tl, nll, la},
                       T({12, 4, 6}), Phase::kBackward, {{"blank", int64_t{0}}});
  EXPECT_EQ(names(g, b, mesh1(2)), (V{"R <- R, R, R, R, R, R, R",
                                      "S(1) <- S(0), S(1), S(0), S(0), S(0), S(0), S(0)"}));
  // int-list lengths (attrs of the global batch) and concatenated 1-D targets: replicated.
  NodeIdx lists = op(g, "_ctc_loss", {lp, tg}, {T({4}), T({4, 12, 11})});
  EXPECT_EQ(names(g, lists, mesh1(2)), (V{"R, R <- R, R"}));
  auto flat = input(g, {14}, DType::kI64);
  NodeIdx concat = op(g, "_ctc_loss.Tensor", {lp, flat, il, tl}, {T({4}), T({4, 12, 29})});
  EXPECT_EQ(names(g, concat, mesh1(2)), (V{"R, R <- R, R, R, R"}));
}

TEST(Loss, NllBackwardAnd2d) {
  Graph g;
  auto go = input(g, {});
  auto x = input(g, {8, 10});
  auto t = input(g, {8}, DType::kI64);
  auto tw = input(g, {});
  NodeIdx n = g.add_op("nb", "nll_loss_backward", {go, x, t, tw}, T({8, 10}), Phase::kBackward,
                       {{"reduction", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R, R, R, R", "S(0) <- R, S(0), S(0), R"}));
  auto x4 = input(g, {4, 10, 8, 8});
  auto t3 = input(g, {4, 8, 8}, DType::kI64);
  NodeIdx f = op(g, "nll_loss2d_forward", {x4, t3}, {T({4, 8, 8}), T({})},
                 {{"reduction", int64_t{0}}});
  EXPECT_EQ(names(g, f, mesh1()),
            (V{"R, R <- R, R", "S(0), R <- S(0), S(0)", "S(1), R <- S(2), S(1)",
               "S(2), R <- S(3), S(2)"}));
}

TEST(Loss, MseForwardAndBackward) {
  Graph g;
  auto x = input(g, {8, 7});
  auto t = input(g, {8, 7});
  NodeIdx mean = op(g, "mse_loss", {x, t}, {T({})}, {{"reduction", int64_t{1}}});
  // Mean needs an even split: dim 1 (7) does not split evenly over 4.
  EXPECT_EQ(names(g, mean, mesh1()), (V{"R <- R, R", "P(avg) <- S(0), S(0)"}));
  NodeIdx sum = op(g, "mse_loss", {x, t}, {T({})}, {{"reduction", int64_t{2}}});
  EXPECT_EQ(names(g, sum, mesh1()),
            (V{"R <- R, R", "P(sum) <- S(0), S(0)", "P(sum) <- S(1), S(1)"}));
  NodeIdx none = op(g, "mse_loss", {x, t}, {T({8, 7})}, {{"reduction", int64_t{0}}});
  EXPECT_EQ(names(g, none, mesh1()),
            (V{"R <- R, R", "S(0) <- S(0), S(0)", "S(1) <- S(1), S(1)"}));
  auto go = input(g, {});
  NodeIdx b = g.add_op("mb", "mse_loss_backward", {go, x, t}, T({8, 7}), Phase::kBackward,
                       {{"reduction", int64_t{1}}});
  EXPECT_EQ(names(g, b, mesh1()),
            (V{"R <- R, R, R", "S(0) <- R, S(0), S(0)", "S(1) <- R, S(1), S(1)"}));
  auto go_none = input(g, {8, 7});
  NodeIdx bn = g.add_op("mbn", "mse_loss_backward", {go_none, x, t}, T({8, 7}),
                        Phase::kBackward, {{"reduction", int64_t{0}}});
  EXPECT_EQ(names(g, bn, mesh1()),
            (V{"R <- R, R, R", "S(0) <- S(0), S(0), S(0)", "S(1) <- S(1), S(1), S(1)"}));
  EXPECT_TRUE(has_rule("mse_loss"));
  EXPECT_TRUE(has_rule("aten.mse_loss_backward.default"));
}

TEST(Conv, ForwardBatchOutAndInChannels) {
  Graph g;
  auto x = input(g, {4, 8, 6, 6});
  auto w = input(g, {16, 8, 3, 3});
  auto b = input(g, {16});
  NodeIdx n = g.add_op("c", "convolution", {x, w, b}, T({4, 16, 4, 4}), Phase::kForward,
                       {{"transposed", false}, {"groups", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R, R", "S(0) <- S(0), R, R", "S(1) <- R, S(0), S(0)",
               "P(sum) <- S(1), S(1), P(sum)"}));
  NodeIdx dw = g.add_op("dw", "convolution", {x, input(g, {8, 1, 3, 3})}, T({4, 8, 4, 4}),
                        Phase::kForward, {{"groups", int64_t{8}}});
  EXPECT_EQ(names(g, dw, mesh1()), (V{"R <- R, R", "S(0) <- S(0), R"}));
}

TEST(Conv, Backward) {
  Graph g;
  auto go = input(g, {4, 16, 4, 4});
  auto x = input(g, {4, 8, 6, 6});
  auto w = input(g, {16, 8, 3, 3});
  NodeIdx n = op(g, "convolution_backward", {go, x, w},
                 {T({4, 8, 6, 6}), T({16, 8, 3, 3}), T({16})}, {{"groups", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R, R <- R, R, R", "S(0), P(sum), P(sum) <- S(0), S(0), R",
               "P(sum), S(0), S(0) <- S(1), R, S(0)", "S(1), S(1), R <- R, S(1), S(1)"}));
}

TEST(Conv, BackwardWithAbsentGradBias) {
  Graph g;
  auto go = input(g, {4, 16, 4, 4});
  auto x = input(g, {4, 8, 6, 6});
  auto w = input(g, {16, 8, 3, 3});
  NodeIdx n = op(g, "convolution_backward", {go, x, w},
                 {T({4, 8, 6, 6}), T({16, 8, 3, 3}), T({0})}, {{"groups", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R, R <- R, R, R", "S(0), P(sum), R <- S(0), S(0), R",
               "P(sum), S(0), R <- S(1), R, S(0)", "S(1), S(1), R <- R, S(1), S(1)"}));
}

TEST(Pool, MaxPoolWithIndicesAndBackward) {
  Graph g;
  auto x = input(g, {4, 8, 6, 6});
  NodeIdx n = op(g, "max_pool2d_with_indices", {x}, {T({4, 8, 3, 3}), T({4, 8, 3, 3}, DType::kI64)});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R <- R", "S(0), S(0) <- S(0)", "S(1), S(1) <- S(1)"}));
  auto go = input(g, {4, 8, 3, 3});
  NodeIdx b = g.add_op("mpb", "max_pool2d_with_indices_backward", {go, x, {n, 1}}, T({4, 8, 6, 6}));
  EXPECT_EQ(names(g, b, mesh1()),
            (V{"R <- R, R, R", "S(0) <- S(0), S(0), S(0)", "S(1) <- S(1), S(1), S(1)"}));
  NodeIdx a = g.add_op("ap", "_adaptive_avg_pool2d", {x}, T({4, 8, 1, 1}));
  EXPECT_EQ(names(g, a, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)"}));
}

TEST(Pool, TriuKeepsTheMatrixWhole) {
  Graph g;
  auto m = input(g, {4, 64, 64});
  NodeIdx n = g.add_op("tu", "triu", {m}, T({4, 64, 64}), Phase::kForward,
                       {{"diagonal", int64_t{1}}});
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "S(0) <- S(0)"}));
}

TEST(Upsample, BatchChannelAndPartialForEverySpatialRank) {
  Graph g;
  // bicubic 2d forward and backward: [N, C, H, W]
  auto x = input(g, {4, 8, 6, 6});
  NodeIdx up = g.add_op("bc", "upsample_bicubic2d", {x}, T({4, 8, 12, 12}), Phase::kForward,
                        {{"align_corners", false}});
  const V four{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)", "P(sum) <- P(sum)"};
  EXPECT_EQ(names(g, up, mesh1()), four);
  auto go = input(g, {4, 8, 12, 12});
  NodeIdx bw = g.add_op("bcb", "upsample_bicubic2d_backward", {go}, T({4, 8, 6, 6}),
                        Phase::kBackward);
  EXPECT_EQ(names(g, bw, mesh1()), four);
  // 1d ([N, C, L]) and 3d ([N, C, D, H, W]): the trailing 1 / 3 dims stay whole
  auto x1 = input(g, {4, 8, 6});
  for (const char* op1 : {"upsample_nearest1d", "upsample_linear1d"})
    EXPECT_EQ(names(g, g.add_op(op1, op1, {x1}, T({4, 8, 12})), mesh1()), four) << op1;
  auto x3 = input(g, {4, 8, 4, 6, 6});
  for (const char* op3 : {"upsample_nearest3d_backward", "upsample_trilinear3d"})
    EXPECT_EQ(names(g, g.add_op(op3, op3, {x3}, T({4, 8, 4, 6, 6})), mesh1()), four) << op3;
  // the 2d ops of the first table gained the Partial row too; a 1-element channel dim is not
  // split
  auto xc = input(g, {4, 1, 6, 6});
  NodeIdx near = g.add_op("n2", "upsample_nearest2d.vec", {xc}, T({4, 1, 12, 12}));
  EXPECT_EQ(names(g, near, mesh1()), (V{"R <- R", "S(0) <- S(0)", "P(sum) <- P(sum)"}));
  for (const char* op : {"aten.upsample_trilinear3d_backward.default",
                         "aten.upsample_linear1d_backward.default",
                         "aten.upsample_nearest1d_backward.default",
                         "aten._upsample_bicubic2d_aa_backward.default",
                         "aten._upsample_nearest_exact3d.default"})
    EXPECT_TRUE(has_rule(op)) << op;
}

TEST(Optimizer, FusedAdamSharesOnePlacement) {
  Graph g;
  auto p = input(g, {8, 4});
  auto gr = input(g, {8, 4});
  auto m = input(g, {8, 4});
  auto ea = input(g, {8, 4});
  auto es = input(g, {8, 4});
  NodeIdx n = op(g, "_fused_adam", {p, gr, m, ea, es}, {T({8, 4}), T({8, 4}), T({8, 4}), T({8, 4})});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R, R, R, R <- R, R, R, R, R", "S(0), S(0), S(0), S(0) <- S(0), S(0), S(0), S(0), S(0)",
               "S(1), S(1), S(1), S(1) <- S(1), S(1), S(1), S(1), S(1)"}));
}

}  // namespace
}  // namespace autoshard

// Mixture-of-Experts op rules (moe_rules.cc), against DTensor's grouped_mm_strategy
// (torch/distributed/tensor/_ops/_matrix_ops.py) on a 1-D mesh of 4, and the routing ops MoE
// layers use (topk, sort, histc, bincount, gather, scatter_add, index_add, index_put).
#include <gtest/gtest.h>

#include <algorithm>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

bool listed(const V& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(MoeRules, GroupedMmJaggedRowsNeverSplitRowsOrExperts) {
  // HF / torchtitan experts: tokens sorted by expert [M=32, K=16] x stacked [G=4, K, N=8].
  Graph g;
  auto a = input(g, {32, 16});
  auto b = input(g, {4, 16, 8});
  auto offs = input(g, {4}, DType::kI32);
  NodeIdx n = op(g, "_grouped_mm", {a, b, offs}, {T({32, 8})});
  V s = names(g, n, mesh1());
  EXPECT_EQ(s, (V{"R <- R, R, R", "P(sum) <- P(sum), R, R", "P(sum) <- R, P(sum), R",
                  "S(1) <- R, S(2), R", "P(sum) <- S(1), S(1), R"}));
  EXPECT_FALSE(listed(s, "S(0) <- S(0), R, R"));     // a jagged row split is not a placement
  EXPECT_FALSE(listed(s, "P(sum) <- R, S(0), R"));   // nor experts without moving tokens
  EXPECT_FALSE(enumerate_strategies(g, n, mesh1()).fallback);
}

TEST(MoeRules, GroupedMmWeightGradientAndThreeByTwo) {
  Graph g;
  auto at = input(g, {16, 32});  // a^T of the forward: [K, M]
  auto dy = input(g, {32, 8});   // output gradient [M, N]
  auto offs = input(g, {4}, DType::kI32);
  NodeIdx gw = op(g, "_grouped_mm", {at, dy, offs}, {T({4, 16, 8})});
  V s = names(g, gw, mesh1());
  EXPECT_TRUE(listed(s, "S(1) <- S(0), R, R"));
  EXPECT_TRUE(listed(s, "S(2) <- R, S(1), R"));
  EXPECT_FALSE(listed(s, "P(sum) <- S(1), S(0), R"));  // the grouped contraction stays whole
  auto a3 = input(g, {4, 32, 16});
  auto b2 = input(g, {16, 8});
  NodeIdx n32 = op(g, "_grouped_mm", {a3, b2, offs}, {T({32, 8})});
  V s32 = names(g, n32, mesh1());
  EXPECT_TRUE(listed(s32, "P(sum) <- S(2), S(0), R"));
  EXPECT_TRUE(listed(s32, "S(0) <- S(1), R, R"));
}

TEST(MoeRules, GroupedMmBatchedSplitsExperts) {
  // Capacity-padded experts: [E=4, C=8, D=16] x [E, D, H=12] -> [E, C, H], no offs.
  Graph g;
  auto x = input(g, {4, 8, 16});
  auto w = input(g, {4, 16, 12});
  NodeIdx n = op(g, "_grouped_mm", {x, w}, {T({4, 8, 12})});
  V s = names(g, n, mesh1());
  EXPECT_TRUE(listed(s, "S(0) <- S(0), S(0)"));  // expert parallelism
  EXPECT_TRUE(listed(s, "S(1) <- S(1), R"));
  EXPECT_TRUE(listed(s, "S(2) <- R, S(2)"));
  EXPECT_TRUE(listed(s, "P(sum) <- S(2), S(1)"));
  // On 2x2, experts split on one dim and the hidden dim on the other (EP x TP).
  EXPECT_TRUE(listed(names(g, n, mesh2()), "S(0)S(2) <- S(0)R, S(0)S(2)"));
}

TEST(MoeRules, BincountAndHistcCountPartially) {
  Graph g;
  auto ids = input(g, {64}, DType::kI64);
  NodeIdx bc = op(g, "bincount", {ids}, {T({8}, DType::kI64)}, {{"minlength", int64_t{8}}});
  EXPECT_EQ(names(g, bc, mesh1()), (V{"R <- R", "P(sum) <- S(0)"}));
  auto f = input(g, {64});
  NodeIdx hc = op(g, "histc", {f}, {T({8})},
                  {{"bins", int64_t{8}}, {"min", 0.0}, {"max", 7.0}});
  EXPECT_TRUE(listed(names(g, hc, mesh1()), "P(sum) <- S(0)"));
  // Without a bin range each shard would bin over its own data's range: replicated only.
  NodeIdx hd = op(g, "histc", {f}, {T({8})}, {{"bins", int64_t{8}}});
  EXPECT_EQ(names(g, hd, mesh1()), (V{"R <- R"}));
}

TEST(MoeRules, RoutingOpsHaveRules) {
  for (const char* o : {"topk", "sort.stable", "cumsum", "histc", "bincount", "gather",
                        "scatter.src", "scatter_add", "index_add", "index.Tensor", "index_put",
                        "_grouped_mm", "eq.Tensor", "floor_divide"})
    EXPECT_TRUE(has_rule(o)) << o;
  // topk along the expert dim: tokens split, the expert scores of a token whole.
  Graph g;
  auto probs = input(g, {32, 8});
  NodeIdx tk = op(g, "topk", {probs}, {T({32, 2}), T({32, 2}, DType::kI64)},
                  {{"k", int64_t{2}}, {"dim", int64_t{-1}}});
  V s = names(g, tk, mesh1());
  EXPECT_TRUE(listed(s, "S(0), S(0) <- S(0)"));
  EXPECT_FALSE(listed(s, "S(1), S(1) <- S(1)"));
}

}  // namespace
}  // namespace autoshard

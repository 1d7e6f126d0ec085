#include <gtest/gtest.h>

#include <algorithm>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;

TEST(Sdpa, FlashForwardBatchHeadAndSequence) {
  Graph g;
  auto q = input(g, {2, 4, 8, 16});
  auto k = input(g, {2, 4, 8, 16});
  auto v = input(g, {2, 4, 8, 16});
  NodeIdx n = op(g, "_scaled_dot_product_flash_attention", {q, k, v},
                 {T({2, 4, 8, 16}), T({2, 4, 8}), T({0}), T({0}), T({}, DType::kI64),
                  T({}, DType::kI64)});
  // Not causal: context parallel without the head-tail layout.
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R, R, R, R <- R, R, R", "S(0), S(0), R, R, R, R <- S(0), S(0), S(0)",
               "S(1), S(1), R, R, R, R <- S(1), S(1), S(1)",
               "S(2), S(2), R, R, R, R <- S(2), S(2), S(2) | cp:ring@0",
               "S(2), S(2), R, R, R, R <- S(2), S(2), S(2) | cp:allgather@0"}));
  // On 2x4 the sequence splits over one mesh dim at a time: over dim 0 with dim 1 R or S(1)
  // (batch 2 does not split 4 ways), over dim 1 with dim 0 R, S(0) or S(1); two kinds each.
  const V two = names(g, n, mesh2(2, 4));
  EXPECT_EQ(std::count_if(two.begin(), two.end(), [](const std::string& s) { return s.find("| cp:") != s.npos; }),
            10);
}

TEST(Sdpa, EfficientBackwardWithBroadcastBias) {
  Graph g;
  auto go = input(g, {2, 4, 8, 16});
  auto q = input(g, {2, 4, 8, 16});
  auto k = input(g, {2, 4, 8, 16});
  auto v = input(g, {2, 4, 8, 16});
  auto bias = input(g, {1, 4, 8, 8});
  auto o = input(g, {2, 4, 8, 16});
  auto lse = input(g, {2, 4, 32});
  auto seed = input(g, {}, DType::kI64);
  auto off = input(g, {}, DType::kI64);
  NodeIdx n = op(g, "_scaled_dot_product_efficient_attention_backward",
                 {go, q, k, v, bias, o, lse, seed, off},
                 {T({2, 4, 8, 16}), T({2, 4, 8, 16}), T({2, 4, 8, 16}), T({1, 4, 8, 8})});
  // A bias (mask) and a padded logsumexp: no context parallelism.
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R, R, R, R <- R, R, R, R, R, R, R, R, R",
               "S(0), S(0), S(0), R <- S(0), S(0), S(0), S(0), R, S(0), S(0), R, R",
               "S(1), S(1), S(1), S(1) <- S(1), S(1), S(1), S(1), S(1), S(1), S(1), R, R"}));
}

TEST(Sdpa, GroupedQueryHeadsMustSplitEvenly) {
  Graph g;
  auto q = input(g, {2, 6, 8, 16});
  auto k = input(g, {2, 3, 8, 16});
  auto v = input(g, {2, 3, 8, 16});
  NodeIdx n = g.add_op("a", "scaled_dot_product_attention", {q, k, v}, T({2, 6, 8, 16}));
  // 3 kv heads over 2 ranks would split query groups: no head sharding; the sequence splits.
  EXPECT_EQ(names(g, n, mesh1(2)),
            (V{"R <- R, R, R", "S(0) <- S(0), S(0), S(0)", "S(2) <- S(2), S(2), S(2) | cp:ring@0",
               "S(2) <- S(2), S(2), S(2) | cp:allgather@0"}));
  Graph g2;
  auto q2 = input(g2, {2, 8, 8, 16});
  auto k2 = input(g2, {2, 2, 8, 16});
  NodeIdx m = g2.add_op("a", "scaled_dot_product_attention", {q2, k2, k2}, T({2, 8, 8, 16}));
  EXPECT_EQ(names(g2, m, mesh1(2))[2], "S(1) <- S(1), S(1), S(1)");
}

/// The causal efficient-attention pair of the built-in LLaMA (models/layers.cc).
struct CausalPair {
  Graph g;
  NodeIdx fwd = kNoNode, bwd = kNoNode;
  explicit CausalPair(int64_t s) {
    auto q = input(g, {1, 4, s, 16}, DType::kBF16);
    auto k = input(g, {1, 4, s, 16}, DType::kBF16);
    auto v = input(g, {1, 4, s, 16}, DType::kBF16);
    Attrs a{{"compute_log_sumexp", true}, {"is_causal", true}};
    fwd = op(g, "_scaled_dot_product_efficient_attention", {q, k, v},
             {T({1, 4, s, 16}, DType::kBF16), T({1, 4, s}), T({}, DType::kI64), T({}, DType::kI64)}, a);
    auto go = input(g, {1, 4, s, 16}, DType::kBF16);
    bwd = op(g, "_scaled_dot_product_efficient_attention_backward",
             {go, q, k, v, {fwd, 0}, {fwd, 1}, {fwd, 2}, {fwd, 3}},
             {T({1, 4, s, 16}, DType::kBF16), T({1, 4, s, 16}, DType::kBF16), T({1, 4, s, 16}, DType::kBF16)},
             Attrs{{"is_causal", true}});
  }
};

TEST(Sdpa, CausalContextParallelIsLoadBalanced) {
  CausalPair p(64);
  const Mesh m({2, 2}, {"cp", "tp"}, *hardware_preset("h100"));
  const V f = names(p.g, p.fwd, m);
  // Sequence over cp, heads over tp: what a runtime sees on the forward and backward.
  EXPECT_NE(std::find(f.begin(), f.end(),
                      "S(2)S(1), S(2)S(1), RR, RR <- S(2)S(1), S(2)S(1), S(2)S(1) | cp:ring@0 lb"),
            f.end());
  EXPECT_NE(std::find(f.begin(), f.end(),
                      "S(2)S(1), S(2)S(1), RR, RR <- S(2)S(1), S(2)S(1), S(2)S(1) | cp:allgather@0 lb"),
            f.end());
  const V b = names(p.g, p.bwd, m);
  EXPECT_NE(std::find(b.begin(), b.end(),
                      "S(2)S(1), S(2)S(1), S(2)S(1) <- S(2)S(1), S(2)S(1), S(2)S(1), S(2)S(1), "
                      "S(2)S(1), S(2)S(1), RR, RR | cp:ring@0 lb"),
            b.end());
  const NodeStrategies ns = enumerate_strategies(p.g, p.fwd, m);
  for (const Strategy& s : ns.strategies)
    if (s.cp.active()) {
      EXPECT_TRUE(s.cp.load_balance);
      EXPECT_EQ(s.outputs[0].placements[static_cast<size_t>(s.cp.mesh_dim)], Placement::shard(2));
    }
}

TEST(Sdpa, ContextParallelNeedsTwoChunksPerRank) {
  // 6 positions over 4 ranks cannot make 8 head-tail chunks; over 3 ranks it can.
  CausalPair p(6);
  for (const std::string& s : names(p.g, p.fwd, mesh1(4))) EXPECT_EQ(s.find("cp:"), s.npos) << s;
  const V three = names(p.g, p.fwd, mesh1(3));
  EXPECT_EQ(std::count_if(three.begin(), three.end(), [](const std::string& s) { return s.find("cp:") != s.npos; }),
            2);
}

}  // namespace
}  // namespace autoshard

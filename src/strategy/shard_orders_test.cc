#include "strategy/shard_orders.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using ::testing::Contains;
using ::testing::Not;
using testing::input;
using testing::mesh2;
using testing::names;
using testing::op;
using testing::T;

StrategyOptions ordered() {
  StrategyOptions o;
  o.shard_orders = true;
  return o;
}

// A leaf gets the FSDP2-over-TP layout beside the default one; without the option nothing
// changes.
TEST(ShardOrders, LeafGetsStridedVariant) {
  Graph g;
  const NodeIdx w = input(g, {16, 8}).node;
  const auto plain = names(g, w, mesh2(4, 2));
  const auto with = names(g, w, mesh2(4, 2), ordered());
  EXPECT_THAT(plain, Contains("S(0)S(0)"));
  EXPECT_THAT(plain, Not(Contains("_S(0,2)S(0)")));
  EXPECT_THAT(with, Contains("_S(0,2)S(0)"));
  // S(0)S(0) and S(1)S(1) (8 in 8) cut one dim twice: one more order each.
  EXPECT_THAT(with, Contains("_S(1,2)S(1)"));
  EXPECT_EQ(with.size(), plain.size() + 2);
  // The original list comes first, unchanged.
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with.begin()));
}

// Three mesh dims cutting one dim: each of them first, the others after it in mesh order
// (TP or EP first, FSDP over the flattened rest); the other permutations are not offered.
TEST(ShardOrders, ThreeDimSetsOfferRotations) {
  Graph g;
  const NodeIdx w = input(g, {16}).node;
  const Mesh m({2, 2, 2}, {"dp", "cp", "tp"}, *hardware_preset("h100"));
  const auto with = names(g, w, m, ordered());
  EXPECT_THAT(with, Contains("S(0)S(0)S(0)"));
  EXPECT_THAT(with, Contains("_S(0,2)S(0)S(0)"));      // cp, dp, tp
  EXPECT_THAT(with, Contains("_S(0,2)_S(0,2)S(0)"));   // tp, dp, cp
  EXPECT_THAT(with, Not(Contains("S(0)_S(0,2)S(0)")));    // dp, tp, cp
  EXPECT_THAT(with, Not(Contains("_S(0,4)S(0)S(0)")));    // cp, tp, dp
  EXPECT_THAT(with, Not(Contains("_S(0,4)_S(0,2)S(0)")));  // tp, cp, dp
}

// An order that leaves an empty shard is not offered: on (2, 4), 14 cut by 4 first gives
// 4,4,4,2 and then 2,2 / 1,1 (no empty shard); 6 cut by 4 first gives 2,2,2,0.
TEST(ShardOrders, InvalidOrdersAreDropped) {
  Graph g;
  const NodeIdx w = input(g, {14}).node;
  const NodeIdx v = input(g, {6}).node;
  EXPECT_THAT(names(g, w, mesh2(2, 4), ordered()), Contains("_S(0,4)S(0)"));
  const auto six = names(g, v, mesh2(2, 4), ordered());
  EXPECT_THAT(six, Not(Contains("_S(0,4)S(0)")));
  EXPECT_THAT(six, Not(Contains("S(0)S(0)")));  // 6 -> 3,3 -> 1,1,1,0: empty too
}

// A same-shape op (the elementwise add of a gradient accumulation) keeps one layout across
// its tensors: the ordered variant reorders all three the same way; ops that change shapes get
// none.
TEST(ShardOrders, SameShapeOpsReorderEveryTensor) {
  Graph g;
  const TensorRef a = input(g, {16, 8});
  const TensorRef b = input(g, {16, 8});
  const NodeIdx add = op(g, "add.Tensor", {a, b}, {T({16, 8})});
  const auto with = names(g, add, mesh2(4, 2), ordered());
  EXPECT_THAT(with, Contains("_S(0,2)S(0) <- _S(0,2)S(0), _S(0,2)S(0)"));
  EXPECT_THAT(with, Not(Contains("_S(0,2)S(0) <- S(0)S(0), S(0)S(0)")));
  const TensorRef x = input(g, {16, 8});
  const TensorRef w = input(g, {8, 4});
  const NodeIdx mm = op(g, "mm", {x, w}, {T({16, 4})});
  EXPECT_EQ(names(g, mm, mesh2(4, 2), ordered()), names(g, mm, mesh2(4, 2)));
}

// A transposed weight keeps its order: the rows cut tp-first become columns cut tp-first.
TEST(ShardOrders, TransposeCarriesTheOrder) {
  Graph g;
  const TensorRef w = input(g, {16, 8});
  const NodeIdx t = op(g, "t", {w}, {T({8, 16})});
  const auto with = names(g, t, mesh2(4, 2), ordered());
  EXPECT_THAT(with, Contains("_S(1,2)S(1) <- _S(0,2)S(0)"));
  EXPECT_THAT(with, Not(Contains("_S(1,2)S(1) <- S(0)S(0)")));
}

TEST(ShardOrders, KeepsLayout) {
  Graph g;
  const TensorRef a = input(g, {16, 8});
  const NodeIdx relu = op(g, "relu", {a}, {T({16, 8})});
  const NodeIdx t = op(g, "t", {a}, {T({8, 16})});
  EXPECT_TRUE(keeps_layout(g, g.node(a.node)));
  EXPECT_TRUE(keeps_layout(g, g.node(relu)));
  EXPECT_TRUE(keeps_layout(g, g.node(t)));  // a permutation moves cuts with their dims
  const NodeIdx flat = op(g, "view", {a}, {T({128})});
  EXPECT_FALSE(keeps_layout(g, g.node(flat)));
  const TensorRef step = input(g, {});
  const NodeIdx upd = op(g, "mul.Tensor", {a, step}, {T({16, 8})});
  EXPECT_TRUE(keeps_layout(g, g.node(upd)));  // a scalar does not count
  const NodeIdx s2 = op(g, "mul.Tensor", {step, step}, {T({})});
  EXPECT_FALSE(keeps_layout(g, g.node(s2)));  // nothing to order
}

// The parameter's chain: its cast and transpose, the gradient's transpose into the update and
// the optimizer state; not the activations (joined to it only through the matmul), nor a
// same-shape op on them.
TEST(ShardOrders, ParameterChainNodes) {
  Graph g;
  Node w;
  w.name = "w";
  w.kind = NodeKind::kParameter;
  w.outputs.push_back(T({8, 16}));
  const TensorRef wr{g.add(std::move(w)), 0};
  const TensorRef x = input(g, {32, 16});
  const NodeIdx cast = op(g, "_to_copy", {wr}, {T({8, 16}, DType::kBF16)});
  const NodeIdx wt = op(g, "t", {{cast, 0}}, {T({16, 8}, DType::kBF16)});
  const NodeIdx mm = op(g, "mm", {x, {wt, 0}}, {T({32, 8})});
  const NodeIdx act = op(g, "relu", {{mm, 0}}, {T({32, 8})});
  const NodeIdx grad = op(g, "mm", {{act, 0}, x}, {T({16, 8})});  // a weight gradient, [in, out]
  const NodeIdx gt = op(g, "t", {{grad, 0}}, {T({8, 16})});
  Node st;
  st.name = "w.exp_avg";
  st.kind = NodeKind::kBuffer;
  st.outputs.push_back(T({8, 16}));
  const TensorRef state{g.add(std::move(st)), 0};
  const NodeIdx upd = op(g, "_fused_adam", {wr, {gt, 0}, state}, {T({8, 16})});
  // Without an optimizer in the graph, the gradient that grad_pairs ties to the parameter
  // joins its chain, and the cast feeding it.
  Node v;
  v.name = "v";
  v.kind = NodeKind::kParameter;
  v.outputs.push_back(T({16, 8}));
  const TensorRef vr{g.add(std::move(v)), 0};
  const NodeIdx vgrad = op(g, "mm", {x, {act, 0}}, {T({16, 8}, DType::kBF16)});
  const NodeIdx vcast = op(g, "_to_copy", {{vgrad, 0}}, {T({16, 8})});
  g.grad_pairs.push_back({vr.node, {vcast, 0}});
  const std::vector<char> chain = parameter_chain_nodes(g);
  for (NodeIdx i : {wr.node, cast, wt, gt, state.node, upd, vr.node, vcast})
    EXPECT_TRUE(chain[static_cast<size_t>(i)]) << i;
  for (NodeIdx i : {x.node, mm, act, grad, vgrad}) EXPECT_FALSE(chain[static_cast<size_t>(i)]) << i;
}

}  // namespace
}  // namespace autoshard

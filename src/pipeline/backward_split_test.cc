// The backward split of a hand-made stage: one linear layer y = x w between two stages.
#include "pipeline/backward_split.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace autoshard {
namespace {

Node make(std::string name, NodeKind kind, Phase phase, std::string op, std::vector<TensorRef> in,
          std::vector<int64_t> shape) {
  Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.phase = phase;
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = {TensorMeta{std::move(shape), DType::kF32}};
  return n;
}

/// A middle stage: receives x [4, 8] and, in the backward, gy [4, 8]; sends y forward and gx
/// back; gw = x^T gy is the weight gradient, w's update reads it.
StageGraph linear_stage() {
  StageGraph sg;
  Graph& g = sg.graph;
  g.nodes = {
      make("x", NodeKind::kInput, Phase::kForward, "", {}, {4, 8}),                          // 0
      make("w", NodeKind::kParameter, Phase::kForward, "", {}, {8, 8}),                      // 1
      make("y", NodeKind::kOp, Phase::kForward, "aten.mm.default", {{0, 0}, {1, 0}}, {4, 8}),  // 2
      make("gy", NodeKind::kInput, Phase::kBackward, "", {}, {4, 8}),                        // 3
      make("wt", NodeKind::kOp, Phase::kBackward, "aten.t.default", {{1, 0}}, {8, 8}),        // 4
      make("gx", NodeKind::kOp, Phase::kBackward, "aten.mm.default", {{3, 0}, {4, 0}}, {4, 8}),  // 5
      make("xt", NodeKind::kOp, Phase::kBackward, "aten.t.default", {{0, 0}}, {8, 4}),        // 6
      make("gw", NodeKind::kOp, Phase::kBackward, "aten.mm.default", {{6, 0}, {3, 0}}, {8, 8}),  // 7
      make("upd", NodeKind::kOp, Phase::kOptimizer, "aten.sub.Tensor", {{1, 0}, {7, 0}}, {8, 8}),  // 8
  };
  sg.origin = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  sg.received = {1, 0, 0, 1, 0, 0, 0, 0, 0};
  sg.sent = {{2, 0}, {5, 0}};
  return sg;
}

TEST(BackwardSplit, InputGradientsAreWhatTheSentGradientNeeds) {
  const StageGraph sg = linear_stage();
  const std::vector<StepPart> p = step_parts(sg);
  using P = StepPart;
  EXPECT_EQ(p, (std::vector<P>{P::kForward, P::kForward, P::kForward, P::kInputGrad, P::kInputGrad,
                               P::kInputGrad, P::kWeightGrad, P::kWeightGrad, P::kOptimizer}));
  // The first stage sends no gradient back: its whole backward is W.
  StageGraph first = sg;
  first.sent = {{2, 0}};
  for (size_t i : {3u, 4u, 5u, 6u, 7u}) EXPECT_EQ(step_parts(first)[i], P::kWeightGrad) << i;
}

TEST(BackwardSplit, TimesByPartAndTheGradientKeptForW) {
  const StageGraph sg = linear_stage();
  const Mesh mesh({2}, {"dp"}, testing::h100());
  Plan plan;
  plan.nodes.resize(sg.graph.nodes.size());
  for (NodeIdx i = 0; i < sg.graph.size(); ++i) {
    NodePlan np;
    np.node = i;
    np.compute_us = 1.0 + i;  // node i costs 1 + i (+ 0.5 comm on gw)
    np.comm_us = i == 7 ? 0.5 : 0.0;
    const Node& n = sg.graph.node(i);
    np.chosen.outputs = {ShardingSpec{{i == 1 || i == 4 ? Placement::replicate() : Placement::shard(0)},
                                      n.outputs[0]}};
    plan.nodes[static_cast<size_t>(i)] = np;
  }
  const PartTimes t = part_times(sg, plan, mesh);
  EXPECT_DOUBLE_EQ(t.forward_us, 1 + 2 + 3);        // x, w, y
  EXPECT_DOUBLE_EQ(t.input_grad_us, 4 + 5 + 6);     // gy, wt, gx
  EXPECT_DOUBLE_EQ(t.weight_grad_us, 7 + 8 + 0.5);  // xt, gw (the optimizer is apart)
  // W reads gy (received in the backward: B's input, kept until W), 4 x 8 f32 sharded on 2.
  EXPECT_EQ(t.kept_for_w_bytes, 4 * 8 * 4 / 2);
}

}  // namespace
}  // namespace autoshard

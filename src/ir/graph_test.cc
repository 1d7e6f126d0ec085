#include "ir/graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace autoshard {
namespace {

using ::testing::HasSubstr;

Node leaf(std::string name, NodeKind kind, std::vector<int64_t> shape, DType t = DType::kBF16) {
  Node n;
  n.name = std::move(name);
  n.kind = kind;
  n.outputs.push_back({std::move(shape), t});
  return n;
}

/// x[4,8] @ w[8,16] -> y; layer norm with three outputs; loss; output node; grad of w.
Graph small_graph() {
  Graph g;
  g.name = "small";
  NodeIdx x = g.add(leaf("x", NodeKind::kInput, {4, 8}));
  NodeIdx w = g.add(leaf("w", NodeKind::kParameter, {8, 16}));
  NodeIdx y = g.add_op("y", "mm", {{x, 0}, {w, 0}}, {{4, 16}, DType::kBF16});
  Node ln;
  ln.name = "ln";
  ln.op = "native_layer_norm";
  ln.inputs = {{y, 0}};
  ln.outputs = {{{4, 16}, DType::kBF16}, {{4, 1}, DType::kF32}, {{4, 1}, DType::kF32}};
  ln.attrs["normalized_shape"] = std::vector<int64_t>{16};
  ln.attrs["eps"] = 1e-5;
  NodeIdx l = g.add(std::move(ln));
  NodeIdx loss = g.add_op("loss", "sum", {{l, 0}}, {{}, DType::kF32});
  NodeIdx gw = g.add_op("gw", "mm", {{x, 0}, {l, 1}}, {{8, 16}, DType::kBF16}, Phase::kBackward);
  Node out;
  out.name = "out";
  out.kind = NodeKind::kOutput;
  out.inputs = {{loss, 0}, {gw, 0}};
  g.add(std::move(out));
  g.grad_pairs.push_back({w, {gw, 0}});
  g.loss = TensorRef{loss, 0};
  return g;
}

TEST(Graph, BuildAndQuery) {
  Graph g = small_graph();
  EXPECT_EQ(g.validate(), "");
  EXPECT_EQ(g.size(), 7);
  EXPECT_EQ(g.find("ln"), 3);
  EXPECT_FALSE(g.find("nope"));
  EXPECT_EQ(g.node(2).op, "mm");
  EXPECT_EQ(g.node(2).kind, NodeKind::kOp);
  EXPECT_EQ(g.node(5).phase, Phase::kBackward);
  EXPECT_EQ(g.meta({3, 1}).shape, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(g.meta({3, 1}).dtype, DType::kF32);
  EXPECT_EQ(g.parameter_count(), 8 * 16);
  EXPECT_THROW(g.node(3).out(3), std::out_of_range);
}

TEST(Graph, TensorMeta) {
  TensorMeta m{{4, 8, 2}, DType::kBF16};
  EXPECT_EQ(m.rank(), 3);
  EXPECT_EQ(m.numel(), 64);
  EXPECT_EQ(m.bytes(), 128);
  TensorMeta scalar{{}, DType::kF32};
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.bytes(), 4);
  TensorMeta empty{{3, 0}, DType::kF32};
  EXPECT_EQ(empty.numel(), 0);
  TensorMeta rotary{{8, 32}, DType::kC64};  // a rotary table: 8 bytes per complex number
  EXPECT_EQ(rotary.bytes(), 8 * 32 * 8);
  EXPECT_EQ((TensorMeta{{8, 32}, DType::kC128}.bytes()), 8 * 32 * 16);
}

TEST(Graph, Uses) {
  Graph g = small_graph();
  auto uses = g.uses();
  ASSERT_EQ(uses.size(), 7u);
  // x feeds y (slot 0) and gw (slot 0).
  ASSERT_EQ(uses[0].size(), 2u);
  EXPECT_EQ(uses[0][0].consumer, 2);
  EXPECT_EQ(uses[0][0].slot, 0);
  EXPECT_EQ(uses[0][1].consumer, 5);
  // w feeds y at slot 1.
  ASSERT_EQ(uses[1].size(), 1u);
  EXPECT_EQ(uses[1][0].consumer, 2);
  EXPECT_EQ(uses[1][0].slot, 1);
  EXPECT_EQ(uses[1][0].output, 0);
  // ln: output 0 to loss, output 1 to gw.
  ASSERT_EQ(uses[3].size(), 2u);
  EXPECT_EQ(uses[3][0].consumer, 4);
  EXPECT_EQ(uses[3][0].output, 0);
  EXPECT_EQ(uses[3][1].consumer, 5);
  EXPECT_EQ(uses[3][1].slot, 1);
  EXPECT_EQ(uses[3][1].output, 1);
  EXPECT_TRUE(uses[6].empty());
}

TEST(Graph, UsesToleratesBadReferences) {
  Graph g = small_graph();
  g.node(2).inputs[0].node = 42;
  auto uses = g.uses();  // must not crash; validate() reports the problem
  EXPECT_EQ(uses[0].size(), 1u);
  EXPECT_NE(g.validate(), "");
}

TEST(Graph, Attrs) {
  Node n;
  n.attrs["dim"] = std::vector<int64_t>{1};
  n.attrs["dims"] = std::vector<int64_t>{0, 2};
  n.attrs["keepdim"] = true;
  n.attrs["eps"] = 1e-5;
  n.attrs["count"] = int64_t{3};
  n.attrs["reduce"] = std::string("mean");
  EXPECT_TRUE(n.has_attr("dim"));
  EXPECT_FALSE(n.has_attr("missing"));
  EXPECT_EQ(n.attr_int("dim", -1), 1);  // one-element list reads as an int
  EXPECT_EQ(n.attr_int("dims", -1), -1);
  EXPECT_EQ(n.attr_int("count", -1), 3);
  EXPECT_EQ(n.attr_int("keepdim", -1), 1);
  EXPECT_EQ(n.attr_int("missing", 7), 7);
  EXPECT_EQ(n.attr_int("reduce", 7), 7);
  EXPECT_DOUBLE_EQ(n.attr_double("eps", 0), 1e-5);
  EXPECT_DOUBLE_EQ(n.attr_double("count", 0), 3.0);
  EXPECT_DOUBLE_EQ(n.attr_double("reduce", 0.5), 0.5);
  EXPECT_TRUE(n.attr_bool("keepdim", false));
  EXPECT_TRUE(n.attr_bool("count", false));
  EXPECT_FALSE(n.attr_bool("missing", false));
  EXPECT_EQ(n.attr_string("reduce", ""), "mean");
  EXPECT_EQ(n.attr_string("eps", "x"), "x");
  EXPECT_EQ(n.attr_ints("dims"), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(n.attr_ints("count"), (std::vector<int64_t>{3}));
  EXPECT_TRUE(n.attr_ints("missing").empty());
}

TEST(Graph, KindAndPhaseNames) {
  for (NodeKind k : {NodeKind::kInput, NodeKind::kParameter, NodeKind::kBuffer, NodeKind::kOp,
                     NodeKind::kOutput})
    EXPECT_EQ(parse_node_kind(node_kind_name(k)), k);
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer})
    EXPECT_EQ(parse_phase(phase_name(p)), p);
  EXPECT_FALSE(parse_node_kind("placeholder"));
  EXPECT_FALSE(parse_phase("fwd"));
}

TEST(GraphValidate, DuplicateName) {
  Graph g = small_graph();
  g.node(4).name = "y";
  EXPECT_THAT(g.validate(), HasSubstr("'y': duplicate name"));
}

TEST(GraphValidate, EmptyName) {
  Graph g = small_graph();
  g.node(2).name = "";
  EXPECT_THAT(g.validate(), HasSubstr("node #2: empty name"));
}

TEST(GraphValidate, OpWithoutOp) {
  Graph g = small_graph();
  g.node(2).op = "";
  EXPECT_THAT(g.validate(), HasSubstr("'y': op node without an op"));
}

TEST(GraphValidate, NoOutputs) {
  Graph g = small_graph();
  g.node(2).outputs.clear();
  EXPECT_THAT(g.validate(), HasSubstr("'y': produces no tensor"));
}

TEST(GraphValidate, OutputNodeWithTensors) {
  Graph g = small_graph();
  g.node(6).outputs.push_back({{1}, DType::kF32});
  EXPECT_THAT(g.validate(), HasSubstr("'out': an output node produces no tensors"));
}

TEST(GraphValidate, LeafWithInputs) {
  Graph g = small_graph();
  g.node(1).inputs.push_back({0, 0});
  EXPECT_THAT(g.validate(), HasSubstr("'w': a parameter takes no inputs"));
}

TEST(GraphValidate, NegativeDimension) {
  Graph g = small_graph();
  g.node(0).outputs[0].shape[1] = -8;
  EXPECT_THAT(g.validate(), HasSubstr("'x': negative dimension -8"));
}

TEST(GraphValidate, ForwardReference) {
  Graph g = small_graph();
  g.node(2).inputs[0] = {4, 0};
  EXPECT_THAT(g.validate(), HasSubstr("'y': input 0 refers to node #4 which is not earlier"));
  g.node(2).inputs[0] = {2, 0};
  EXPECT_THAT(g.validate(), HasSubstr("not earlier"));
  g.node(2).inputs[0] = {-1, 0};
  EXPECT_THAT(g.validate(), HasSubstr("not earlier"));
}

TEST(GraphValidate, BadOutputIndex) {
  Graph g = small_graph();
  g.node(5).inputs[1] = {3, 3};
  EXPECT_THAT(g.validate(), HasSubstr("'gw': input 1 refers to output 3 of 'ln' which has 3"));
  g.node(5).inputs[1] = {3, -1};
  EXPECT_THAT(g.validate(), HasSubstr("output -1"));
}

TEST(GraphValidate, GradPairs) {
  Graph g = small_graph();
  g.grad_pairs[0].param = 0;
  EXPECT_THAT(g.validate(), HasSubstr("'x' is not a parameter (kind input)"));
  g.grad_pairs[0].param = 99;
  EXPECT_THAT(g.validate(), HasSubstr("does not exist"));
  g.grad_pairs[0].param = 1;
  g.grad_pairs[0].grad = {3, 5};
  EXPECT_THAT(g.validate(), HasSubstr("gradient pair of 'w': bad gradient reference"));
  g.grad_pairs[0].grad = {3, -1};
  EXPECT_THAT(g.validate(), HasSubstr("bad gradient reference"));
  g.grad_pairs[0].grad = {2, 0};  // y is [4,16], w is [8,16]
  EXPECT_THAT(g.validate(), HasSubstr("gradient 'y' output 0 has shape [4, 16], parameter has "
                                      "[8, 16]"));
}

TEST(GraphValidate, Loss) {
  Graph g = small_graph();
  g.loss = TensorRef{99, 0};
  EXPECT_THAT(g.validate(), HasSubstr("loss refers to a missing tensor"));
  g.loss = TensorRef{4, 1};
  EXPECT_THAT(g.validate(), HasSubstr("loss refers to a missing tensor"));
}

}  // namespace
}  // namespace autoshard

#include "models/builder.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace autoshard {
namespace {

TEST(Broadcast, FollowsPyTorchRules) {
  EXPECT_EQ(broadcast_shapes({8, 16, 32}, {32}), (Shape{8, 16, 32}));
  EXPECT_EQ(broadcast_shapes({8, 1, 32}, {4, 1}), (Shape{8, 4, 32}));
  EXPECT_EQ(broadcast_shapes({}, {3}), (Shape{3}));
  EXPECT_THROW(broadcast_shapes({8, 3}, {4}), std::logic_error);
  EXPECT_EQ(promote_types(DType::kBF16, DType::kF32), DType::kF32);
  EXPECT_EQ(promote_types(DType::kI64, DType::kBF16), DType::kBF16);
  EXPECT_EQ(wrap_dim(-1, 3), 2);
  EXPECT_THROW(wrap_dim(3, 3), std::logic_error);
}

TEST(GraphBuilder, NamesAreFxLikeAndStampPhaseAndModule) {
  GraphBuilder b("g");
  TensorRef x = b.input("x", {{4, 8}, DType::kBF16});
  TensorRef w = b.parameter("fc.weight", "fc", {{16, 8}, DType::kBF16});
  b.set_module("fc");
  TensorRef y = b.mm(x, b.t(w));
  b.set_phase(Phase::kBackward);
  TensorRef z = b.mm(b.t(y), x);
  const Graph& g = b.graph();
  EXPECT_EQ(g.node(y.node).name, "mm");
  EXPECT_EQ(g.node(z.node).name, "mm_1");
  EXPECT_EQ(g.node(z.node).inputs[0].node, z.node - 1);
  EXPECT_EQ(g.node(z.node - 1).name, "t_1");
  EXPECT_EQ(g.node(y.node).module_path, "fc");
  EXPECT_EQ(g.node(y.node).phase, Phase::kForward);
  EXPECT_EQ(g.node(z.node).phase, Phase::kBackward);
  EXPECT_EQ(b.shape(y), (Shape{4, 16}));
  EXPECT_EQ(b.shape(z), (Shape{16, 8}));
  // Overloads are stripped from names: add.Tensor -> add.
  TensorRef s = b.add_scalar(x, 1.0);
  EXPECT_EQ(g.node(s.node).name, "add");
  EXPECT_EQ(g.node(s.node).op, "add.Tensor");
  EXPECT_DOUBLE_EQ(g.node(s.node).attr_double("other", 0), 1.0);
}

TEST(GraphBuilder, RejectsBadShapes) {
  GraphBuilder b("g");
  TensorRef x = b.input("x", {{4, 8}, DType::kF32});
  TensorRef y = b.input("y", {{4, 8}, DType::kF32});
  EXPECT_THROW(b.mm(x, y), std::logic_error);
  EXPECT_THROW(b.view(x, {5, 6}), std::logic_error);
  EXPECT_THROW(b.expand(x, {4, 9}), std::logic_error);
  EXPECT_THROW(b.squeeze_dim(x, 0), std::logic_error);
  EXPECT_THROW(b.slice(x, 1, 4, 9), std::logic_error);
  EXPECT_THROW(b.t(b.unsqueeze(x, 0)), std::logic_error);
  EXPECT_THROW(b.expect_shape(x, {8, 4}, "test"), std::logic_error);
  EXPECT_THROW(b.cat({x, b.t(y)}, 0), std::logic_error);
}

TEST(GraphBuilder, ViewAndDataMovementShapes) {
  GraphBuilder b("g");
  TensorRef x = b.input("x", {{2, 6, 8}, DType::kBF16});
  EXPECT_EQ(b.shape(b.view(x, {12, 8})), (Shape{12, 8}));
  EXPECT_EQ(b.shape(b.transpose(x, 1, 2)), (Shape{2, 8, 6}));
  EXPECT_EQ(b.shape(b.unsqueeze(x, 1)), (Shape{2, 1, 6, 8}));
  EXPECT_EQ(b.shape(b.unsqueeze(x, -1)), (Shape{2, 6, 8, 1}));
  EXPECT_EQ(b.shape(b.expand(b.unsqueeze(x, 1), {2, 3, 6, 8})), (Shape{2, 3, 6, 8}));
  EXPECT_EQ(b.shape(b.slice(x, 2, 4, 8)), (Shape{2, 6, 4}));
  EXPECT_EQ(b.shape(b.slice_backward(b.slice(x, 2, 0, 4), {2, 6, 8}, 2, 0, 4)), (Shape{2, 6, 8}));
  EXPECT_EQ(b.shape(b.cat({x, x}, -1)), (Shape{2, 6, 16}));
  EXPECT_EQ(b.shape(b.sum_dim(x, {0, 1}, true)), (Shape{1, 1, 8}));
  EXPECT_EQ(b.shape(b.mean_dim(x, {-1}, false)), (Shape{2, 6}));
  std::vector<TensorRef> parts = b.split(x, 3, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].output, 1);
  EXPECT_EQ(b.shape(parts[1]), (Shape{2, 3, 8}));
  TensorRef c = b.to_copy(x, DType::kF32);
  EXPECT_EQ(b.dtype(c), DType::kF32);
  EXPECT_EQ(b.dtype(b.mul(c, x)), DType::kF32);
  TensorRef bias = b.input("bias", {{5}, DType::kBF16});
  TensorRef w = b.input("w", {{8, 5}, DType::kBF16});
  EXPECT_EQ(b.shape(b.addmm(bias, b.view(x, {12, 8}), w)), (Shape{12, 5}));
  EXPECT_TRUE(b.finish().validate().empty());
}

}  // namespace
}  // namespace autoshard

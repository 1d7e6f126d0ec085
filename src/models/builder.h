#pragma once
/// GraphBuilder: appends ATen-level nodes to a Graph the way make_fx would record them.
///
/// Every typed helper applies the op's shape rule (broadcasting, mm inner dims, view numel,
/// expand, slicing...) and throws std::logic_error when the operands do not fit, so a model
/// builder cannot silently emit a wrong shape.  Node names are FX-like and deterministic: the
/// op's base name with a per-base counter ("mm", "mm_1", "mm_2", ...).  Op nodes get the
/// builder's current phase and module path.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace autoshard {

using Shape = std::vector<int64_t>;

/// "[8, 2048, 4096]" for error messages.
std::string shape_str(const Shape& s);
/// PyTorch broadcasting of two shapes; throws std::logic_error when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Result type of a binary op on two tensors (the wider floating type wins).
DType promote_types(DType a, DType b);
/// Wraps a possibly negative dim into [0, rank); throws std::logic_error when out of range.
int64_t wrap_dim(int64_t dim, int64_t rank);

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string graph_name);

  /// Phase and module path stamped on the op nodes added next.
  void set_phase(Phase p) { phase_ = p; }
  Phase phase() const { return phase_; }
  void set_module(std::string path) { module_ = std::move(path); }
  const std::string& module() const { return module_; }

  // Placeholders (no inputs).
  TensorRef input(std::string name, TensorMeta meta);
  TensorRef parameter(std::string name, std::string module_path, TensorMeta meta);
  TensorRef buffer(std::string name, std::string module_path, TensorMeta meta,
                   Phase phase = Phase::kForward);

  const Graph& graph() const { return g_; }
  Graph& graph() { return g_; }
  const TensorMeta& meta(TensorRef r) const { return g_.meta(r); }
  const Shape& shape(TensorRef r) const { return g_.meta(r).shape; }
  DType dtype(TensorRef r) const { return g_.meta(r).dtype; }
  /// Throws std::logic_error unless `r` has exactly the shape `expected`.
  void expect_shape(TensorRef r, const Shape& expected, std::string_view what) const;

  /// Generic op with caller-computed outputs (used for ops with bespoke shape rules, which the
  /// caller checks with expect_shape).  Returns the node index.
  NodeIdx op(std::string_view aten, std::vector<TensorRef> inputs, Attrs attrs,
             std::vector<TensorMeta> outs);
  TensorRef op1(std::string_view aten, std::vector<TensorRef> inputs, Attrs attrs, TensorMeta out) {
    return {op(aten, std::move(inputs), std::move(attrs), {std::move(out)}), 0};
  }

  // Element-wise.
  TensorRef add(TensorRef a, TensorRef b);             ///< add.Tensor
  TensorRef add_scalar(TensorRef a, double other);     ///< add.Tensor with a Python scalar
  TensorRef mul(TensorRef a, TensorRef b);             ///< mul.Tensor
  TensorRef mul_scalar(TensorRef a, double other);     ///< mul.Scalar
  TensorRef div_scalar(TensorRef a, double other);     ///< div.Scalar
  TensorRef pow_scalar(TensorRef a, double exponent);  ///< pow.Tensor_Scalar
  /// Same-shape, same-dtype unary op: rsqrt, neg, silu, relu, detach, gelu, clone, ones_like.
  TensorRef unary(std::string_view aten, TensorRef a, Attrs attrs = {});
  /// Pointwise backward op (grad_output, saved) -> grad with the saved tensor's shape:
  /// silu_backward, gelu_backward, threshold_backward.
  TensorRef pointwise_backward(std::string_view aten, TensorRef grad, TensorRef saved,
                               Attrs attrs = {});
  TensorRef to_copy(TensorRef a, DType dtype);  ///< _to_copy
  /// Tensor.to(dtype): a _to_copy, or `a` itself when it already has that dtype (PyTorch
  /// returns self and nothing is traced).
  TensorRef cast(TensorRef a, DType dtype) {
    return this->dtype(a) == dtype ? a : to_copy(a, dtype);
  }

  // Reductions.
  TensorRef sum_dim(TensorRef a, std::vector<int64_t> dims, bool keepdim);   ///< sum.dim_IntList
  TensorRef mean_dim(TensorRef a, std::vector<int64_t> dims, bool keepdim);  ///< mean.dim

  // Views and data movement.
  TensorRef view(TensorRef a, Shape size);                       ///< view
  TensorRef unsafe_view(TensorRef a, Shape size);                ///< _unsafe_view
  TensorRef t(TensorRef a);                                      ///< t (2-D transpose)
  TensorRef transpose(TensorRef a, int64_t dim0, int64_t dim1);  ///< transpose.int
  TensorRef unsqueeze(TensorRef a, int64_t dim);
  TensorRef squeeze_dim(TensorRef a, int64_t dim);  ///< squeeze.dim (the dim must have size 1)
  TensorRef expand(TensorRef a, Shape size);
  TensorRef clone_contiguous(TensorRef a);  ///< clone(memory_format=contiguous_format)
  TensorRef slice(TensorRef a, int64_t dim, int64_t start, int64_t end);  ///< slice.Tensor
  TensorRef slice_backward(TensorRef grad, Shape input_sizes, int64_t dim, int64_t start,
                           int64_t end);
  TensorRef cat(const std::vector<TensorRef>& xs, int64_t dim);
  std::vector<TensorRef> split(TensorRef a, int64_t split_size, int64_t dim);  ///< split.Tensor

  // Matrix products.
  TensorRef mm(TensorRef a, TensorRef b);
  TensorRef addmm(TensorRef bias, TensorRef a, TensorRef b);

  /// Validates the graph (Graph::validate) and hands it over; throws std::logic_error on error.
  Graph finish();

 private:
  std::string next_name(std::string_view aten);
  TensorRef reshape_like(std::string_view aten, TensorRef a, Shape size);
  TensorRef binary(std::string_view aten, TensorRef a, TensorRef b);
  TensorRef with_scalar(std::string_view aten, std::string_view key, TensorRef a, double v);
  TensorRef reduce(std::string_view aten, TensorRef a, std::vector<int64_t> dims, bool keepdim);

  Graph g_;
  Phase phase_ = Phase::kForward;
  std::string module_;
  std::unordered_map<std::string, int64_t> counters_;
};

}  // namespace autoshard

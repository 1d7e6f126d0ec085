#include "models/builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace autoshard {

namespace {

[[noreturn]] void shape_error(std::string_view op, const std::string& msg) {
  throw std::logic_error(fmt::format("models/builder: {}: {}", op, msg));
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      shape_error("broadcast",
                  fmt::format("{} and {} do not broadcast", shape_str(a), shape_str(b)));
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  return dtype_size(b) > dtype_size(a) ? b : a;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    shape_error("wrap_dim", fmt::format("dim {} out of range for rank {}", dim, rank));
  return d;
}

GraphBuilder::GraphBuilder(std::string graph_name) {
  g_.name = std::move(graph_name);
  g_.nodes.reserve(4096);
}

std::string GraphBuilder::next_name(std::string_view aten) {
  std::string base(aten.substr(0, aten.find('.')));
  int64_t& n = counters_[base];
  std::string name = n == 0 ? base : fmt::format("{}_{}", base, n);
  ++n;
  return name;
}

TensorRef GraphBuilder::input(std::string name, TensorMeta meta) {
  Node n;
  n.name = std::move(name);
  n.kind = NodeKind::kInput;
  n.outputs.push_back(std::move(meta));
  return {g_.add(std::move(n)), 0};
}

TensorRef GraphBuilder::parameter(std::string name, std::string module_path, TensorMeta meta) {
  Node n;
  n.name = std::move(name);
  n.kind = NodeKind::kParameter;
  n.module_path = std::move(module_path);
  n.outputs.push_back(std::move(meta));
  return {g_.add(std::move(n)), 0};
}

TensorRef GraphBuilder::buffer(std::string name, std::string module_path, TensorMeta meta,
                               Phase phase) {
  Node n;
  n.name = std::move(name);
  n.kind = NodeKind::kBuffer;
  n.phase = phase;
  n.module_path = std::move(module_path);
  n.outputs.push_back(std::move(meta));
  return {g_.add(std::move(n)), 0};
}

void GraphBuilder::expect_shape(TensorRef r, const Shape& expected, std::string_view what) const {
  if (shape(r) != expected)
    shape_error(what, fmt::format("'{}' has shape {}, expected {}", g_.node(r.node).name,
                                  shape_str(shape(r)), shape_str(expected)));
}

NodeIdx GraphBuilder::op(std::string_view aten, std::vector<TensorRef> inputs, Attrs attrs,
                         std::vector<TensorMeta> outs) {
  Node n;
  n.name = next_name(aten);
  n.kind = NodeKind::kOp;
  n.op = std::string(aten);
  n.phase = phase_;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  n.module_path = module_;
  return g_.add(std::move(n));
}

TensorRef GraphBuilder::binary(std::string_view aten, TensorRef a, TensorRef b) {
  TensorMeta out{broadcast_shapes(shape(a), shape(b)), promote_types(dtype(a), dtype(b))};
  return op1(aten, {a, b}, {}, std::move(out));
}

TensorRef GraphBuilder::with_scalar(std::string_view aten, std::string_view key, TensorRef a,
                                    double v) {
  Attrs attrs;
  attrs.emplace(std::string(key), v);
  return op1(aten, {a}, std::move(attrs), meta(a));
}

TensorRef GraphBuilder::add(TensorRef a, TensorRef b) { return binary("add.Tensor", a, b); }
TensorRef GraphBuilder::mul(TensorRef a, TensorRef b) { return binary("mul.Tensor", a, b); }
TensorRef GraphBuilder::add_scalar(TensorRef a, double other) {
  return with_scalar("add.Tensor", "other", a, other);
}
TensorRef GraphBuilder::mul_scalar(TensorRef a, double other) {
  return with_scalar("mul.Scalar", "other", a, other);
}
TensorRef GraphBuilder::div_scalar(TensorRef a, double other) {
  return with_scalar("div.Scalar", "other", a, other);
}
TensorRef GraphBuilder::pow_scalar(TensorRef a, double exponent) {
  return with_scalar("pow.Tensor_Scalar", "exponent", a, exponent);
}

TensorRef GraphBuilder::unary(std::string_view aten, TensorRef a, Attrs attrs) {
  return op1(aten, {a}, std::move(attrs), meta(a));
}

TensorRef GraphBuilder::pointwise_backward(std::string_view aten, TensorRef grad, TensorRef saved,
                                           Attrs attrs) {
  if (shape(grad) != shape(saved))
    shape_error(
        aten, fmt::format("grad {} vs saved {}", shape_str(shape(grad)), shape_str(shape(saved))));
  return op1(aten, {grad, saved}, std::move(attrs), meta(grad));
}

TensorRef GraphBuilder::to_copy(TensorRef a, DType dtype) {
  Attrs attrs{{"dtype", std::string(dtype_name(dtype))}};
  return op1("_to_copy", {a}, std::move(attrs), TensorMeta{shape(a), dtype});
}

TensorRef GraphBuilder::reduce(std::string_view aten, TensorRef a, std::vector<int64_t> dims,
                               bool keepdim) {
  const Shape& in = shape(a);
  std::vector<bool> reduced(in.size(), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, static_cast<int64_t>(in.size()));
    if (reduced[static_cast<size_t>(w)]) shape_error(aten, "dim listed twice");
    reduced[static_cast<size_t>(w)] = true;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!reduced[i])
      out.push_back(in[i]);
    else if (keepdim)
      out.push_back(1);
  }
  Attrs attrs{{"dim", std::move(dims)}, {"keepdim", keepdim}};
  return op1(aten, {a}, std::move(attrs), TensorMeta{std::move(out), dtype(a)});
}

TensorRef GraphBuilder::sum_dim(TensorRef a, std::vector<int64_t> dims, bool keepdim) {
  return reduce("sum.dim_IntList", a, std::move(dims), keepdim);
}
TensorRef GraphBuilder::mean_dim(TensorRef a, std::vector<int64_t> dims, bool keepdim) {
  return reduce("mean.dim", a, std::move(dims), keepdim);
}

TensorRef GraphBuilder::reshape_like(std::string_view aten, TensorRef a, Shape size) {
  for (int64_t d : size)
    if (d < 0) shape_error(aten, "sizes must be explicit");
  if (numel(size) != numel(shape(a)))
    shape_error(aten, fmt::format("cannot view {} as {}", shape_str(shape(a)), shape_str(size)));
  Attrs attrs{{"size", size}};
  return op1(aten, {a}, std::move(attrs), TensorMeta{std::move(size), dtype(a)});
}

TensorRef GraphBuilder::view(TensorRef a, Shape size) {
  return reshape_like("view", a, std::move(size));
}
TensorRef GraphBuilder::unsafe_view(TensorRef a, Shape size) {
  return reshape_like("_unsafe_view", a, std::move(size));
}

TensorRef GraphBuilder::t(TensorRef a) {
  const Shape& in = shape(a);
  if (in.size() != 2) shape_error("t", fmt::format("needs a 2-D tensor, got {}", shape_str(in)));
  return op1("t", {a}, {}, TensorMeta{{in[1], in[0]}, dtype(a)});
}

TensorRef GraphBuilder::transpose(TensorRef a, int64_t dim0, int64_t dim1) {
  Shape out = shape(a);
  int64_t rank = static_cast<int64_t>(out.size());
  std::swap(out[static_cast<size_t>(wrap_dim(dim0, rank))],
            out[static_cast<size_t>(wrap_dim(dim1, rank))]);
  Attrs attrs{{"dim0", dim0}, {"dim1", dim1}};
  return op1("transpose.int", {a}, std::move(attrs), TensorMeta{std::move(out), dtype(a)});
}

TensorRef GraphBuilder::unsqueeze(TensorRef a, int64_t dim) {
  Shape out = shape(a);
  int64_t d = wrap_dim(dim, static_cast<int64_t>(out.size()) + 1);
  out.insert(out.begin() + d, 1);
  Attrs attrs{{"dim", dim}};
  return op1("unsqueeze", {a}, std::move(attrs), TensorMeta{std::move(out), dtype(a)});
}

TensorRef GraphBuilder::squeeze_dim(TensorRef a, int64_t dim) {
  Shape out = shape(a);
  int64_t d = wrap_dim(dim, static_cast<int64_t>(out.size()));
  if (out[static_cast<size_t>(d)] != 1)
    shape_error("squeeze.dim", fmt::format("dim {} of {} is not 1", dim, shape_str(out)));
  out.erase(out.begin() + d);
  Attrs attrs{{"dim", dim}};
  return op1("squeeze.dim", {a}, std::move(attrs), TensorMeta{std::move(out), dtype(a)});
}

TensorRef GraphBuilder::expand(TensorRef a, Shape size) {
  const Shape& in = shape(a);
  if (size.size() < in.size()) shape_error("expand", "cannot reduce the rank");
  size_t off = size.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != size[off + i] && in[i] != 1)
      shape_error("expand", fmt::format("cannot expand {} to {}", shape_str(in), shape_str(size)));
  Attrs attrs{{"size", size}};
  return op1("expand", {a}, std::move(attrs), TensorMeta{std::move(size), dtype(a)});
}

TensorRef GraphBuilder::clone_contiguous(TensorRef a) {
  return unary("clone", a, Attrs{{"memory_format", std::string("contiguous_format")}});
}

TensorRef GraphBuilder::slice(TensorRef a, int64_t dim, int64_t start, int64_t end) {
  Shape out = shape(a);
  int64_t d = wrap_dim(dim, static_cast<int64_t>(out.size()));
  if (start < 0 || end > out[static_cast<size_t>(d)] || start > end)
    shape_error("slice.Tensor", fmt::format("[{}:{}] out of range for {} (dim {})", start, end,
                                            shape_str(out), dim));
  out[static_cast<size_t>(d)] = end - start;
  Attrs attrs{{"dim", dim}, {"start", start}, {"end", end}, {"step", int64_t{1}}};
  return op1("slice.Tensor", {a}, std::move(attrs), TensorMeta{std::move(out), dtype(a)});
}

TensorRef GraphBuilder::slice_backward(TensorRef grad, Shape input_sizes, int64_t dim,
                                       int64_t start, int64_t end) {
  Shape expect = input_sizes;
  int64_t d = wrap_dim(dim, static_cast<int64_t>(expect.size()));
  if (start < 0 || end > expect[static_cast<size_t>(d)] || start > end)
    shape_error("slice_backward", "range out of bounds");
  expect[static_cast<size_t>(d)] = end - start;
  expect_shape(grad, expect, "slice_backward");
  Attrs attrs{{"input_sizes", input_sizes},
              {"dim", dim},
              {"start", start},
              {"end", end},
              {"step", int64_t{1}}};
  return op1("slice_backward", {grad}, std::move(attrs),
             TensorMeta{std::move(input_sizes), dtype(grad)});
}

TensorRef GraphBuilder::cat(const std::vector<TensorRef>& xs, int64_t dim) {
  if (xs.empty()) shape_error("cat", "no tensors");
  Shape out = shape(xs[0]);
  int64_t d = wrap_dim(dim, static_cast<int64_t>(out.size()));
  for (size_t i = 1; i < xs.size(); ++i) {
    const Shape& s = shape(xs[i]);
    if (s.size() != out.size()) shape_error("cat", "ranks differ");
    for (size_t j = 0; j < s.size(); ++j)
      if (static_cast<int64_t>(j) != d && s[j] != out[j])
        shape_error("cat", fmt::format("{} vs {} off dim {}", shape_str(s), shape_str(out), dim));
    out[static_cast<size_t>(d)] += s[static_cast<size_t>(d)];
  }
  Attrs attrs{{"dim", dim}};
  return op1("cat", xs, std::move(attrs), TensorMeta{std::move(out), dtype(xs[0])});
}

std::vector<TensorRef> GraphBuilder::split(TensorRef a, int64_t split_size, int64_t dim) {
  const Shape& in = shape(a);
  int64_t d = wrap_dim(dim, static_cast<int64_t>(in.size()));
  int64_t total = in[static_cast<size_t>(d)];
  if (split_size <= 0) shape_error("split.Tensor", "split_size must be positive");
  std::vector<TensorMeta> outs;
  for (int64_t start = 0; start < total; start += split_size) {
    Shape s = in;
    s[static_cast<size_t>(d)] = std::min(split_size, total - start);
    outs.push_back(TensorMeta{std::move(s), dtype(a)});
  }
  Attrs attrs{{"split_size", split_size}, {"dim", dim}};
  NodeIdx n = op("split.Tensor", {a}, std::move(attrs), std::move(outs));
  std::vector<TensorRef> refs;
  for (int32_t i = 0; i < static_cast<int32_t>(g_.node(n).outputs.size()); ++i)
    refs.push_back({n, i});
  return refs;
}

TensorRef GraphBuilder::mm(TensorRef a, TensorRef b) {
  const Shape& x = shape(a);
  const Shape& y = shape(b);
  if (x.size() != 2 || y.size() != 2 || x[1] != y[0])
    shape_error("mm", fmt::format("{} x {}", shape_str(x), shape_str(y)));
  return op1("mm", {a, b}, {}, TensorMeta{{x[0], y[1]}, promote_types(dtype(a), dtype(b))});
}

TensorRef GraphBuilder::addmm(TensorRef bias, TensorRef a, TensorRef b) {
  const Shape& x = shape(a);
  const Shape& y = shape(b);
  if (x.size() != 2 || y.size() != 2 || x[1] != y[0])
    shape_error("addmm", fmt::format("{} x {}", shape_str(x), shape_str(y)));
  Shape out{x[0], y[1]};
  if (broadcast_shapes(shape(bias), out) != out)
    shape_error("addmm", fmt::format("bias {} does not broadcast to {}", shape_str(shape(bias)),
                                     shape_str(out)));
  return op1("addmm", {bias, a, b}, {}, TensorMeta{std::move(out), dtype(a)});
}

Graph GraphBuilder::finish() {
  std::string err = g_.validate();
  if (!err.empty()) throw std::logic_error("models/builder: invalid graph: " + err);
  return std::move(g_);
}

}  // namespace autoshard

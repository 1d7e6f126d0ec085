#include "cost/compute.h"

#include <algorithm>
#include <unordered_map>

namespace autoshard {

namespace {

enum class OpClass : uint8_t {
  kPointwise,  ///< default: 1 FLOP per output element (complex: complex_flops_factor)
  kView,       ///< alias/view, no kernel
  kFree,       ///< no compute kernel (uninitialised allocation, collectives, waits)
  kCopy,       ///< pure data movement
  kGather,     ///< indexed reads: embedding, index_select...
  kMm,
  kAddmm,
  kBmm,
  kBaddbmm,
  kMatmul,  ///< matmul / linear composites: 2 * out elements * k
  kGroupedMm,  ///< _grouped_mm: Mixture-of-Experts expert matmuls (grouped_mm_flops)
  kConv,
  kConvTransposed,
  kConvBackward,
  kSdpa,
  kSdpaBackward,
  kFlashForward,  ///< _flash/_efficient_attention_forward, [b, s, h, d]
  kNorm,
  kReduction,
};

/// Per-element FLOPs of norms and softmax (our convention: mean, variance, normalise, scale).
constexpr double kNormFlopsPerElement = 5.0;

const std::unordered_map<std::string_view, OpClass>& op_table() {
  static const std::unordered_map<std::string_view, OpClass> table = [] {
    std::unordered_map<std::string_view, OpClass> t;
    for (std::string_view op :
         {"view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute",
          "expand", "expand_as", "squeeze", "unsqueeze", "slice", "select", "alias", "detach",
          "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "unbind",
          "as_strided", "view_as", "flatten", "unflatten", "narrow", "chunk", "movedim",
          "numpy_T", "T", "mT", "diagonal", "view_as_real", "view_as_complex", "unfold",
          "lift_fresh", "sym_size", "sym_numel", "sym_stride", "size", "dim", "getitem",
          "_unsafe_index_put_view"})
      t.emplace(op, OpClass::kView);
    for (std::string_view op : {"empty", "empty_like", "empty_strided", "new_empty",
                                "new_empty_strided", "wait_tensor", "_assert_async",
                                "_assert_scalar", "sym_constrain_range_for_size"})
      t.emplace(op, OpClass::kFree);
    for (std::string_view op : {"clone", "contiguous", "copy", "copy_", "_copy_from",
                                "lift_fresh_copy"})
      t.emplace(op, OpClass::kCopy);
    for (std::string_view op : {"embedding", "index_select", "index", "gather", "take",
                                "_unsafe_index"})
      t.emplace(op, OpClass::kGather);
    t.emplace("mm", OpClass::kMm);
    t.emplace("_scaled_mm", OpClass::kMm);
    t.emplace("addmm", OpClass::kAddmm);
    t.emplace("bmm", OpClass::kBmm);
    t.emplace("baddbmm", OpClass::kBaddbmm);
    t.emplace("matmul", OpClass::kMatmul);
    t.emplace("_grouped_mm", OpClass::kGroupedMm);
    t.emplace("linear", OpClass::kMatmul);
    for (std::string_view op : {"convolution", "_convolution", "conv1d", "conv2d", "conv3d"})
      t.emplace(op, OpClass::kConv);
    for (std::string_view op : {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
      t.emplace(op, OpClass::kConvTransposed);
    t.emplace("convolution_backward", OpClass::kConvBackward);
    for (std::string_view op : {"scaled_dot_product_attention",
                                "_scaled_dot_product_flash_attention",
                                "_scaled_dot_product_efficient_attention",
                                "_scaled_dot_product_cudnn_attention",
                                "_scaled_dot_product_flash_attention_for_cpu"})
      t.emplace(op, OpClass::kSdpa);
    for (std::string_view op : {"_scaled_dot_product_flash_attention_backward",
                                "_scaled_dot_product_efficient_attention_backward",
                                "_scaled_dot_product_cudnn_attention_backward",
                                "_scaled_dot_product_flash_attention_for_cpu_backward"})
      t.emplace(op, OpClass::kSdpaBackward);
    t.emplace("_flash_attention_forward", OpClass::kFlashForward);
    t.emplace("_efficient_attention_forward", OpClass::kFlashForward);
    for (std::string_view op :
         {"native_layer_norm", "layer_norm", "native_layer_norm_backward", "rms_norm",
          "_fused_rms_norm", "_fused_rms_norm_backward", "native_batch_norm",
          "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
          "_native_batch_norm_legit_no_training", "native_batch_norm_backward", "batch_norm",
          "group_norm", "native_group_norm", "native_group_norm_backward", "_softmax",
          "softmax", "_log_softmax", "log_softmax", "_safe_softmax", "_softmax_backward_data",
          "_log_softmax_backward_data", "logsumexp"})
      t.emplace(op, OpClass::kNorm);
    for (std::string_view op :
         {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean",
          "std_mean", "argmax", "argmin", "norm", "linalg_vector_norm", "cumsum", "cumprod",
          "any", "all", "nll_loss_forward", "nll_loss2d_forward", "nll_loss", "cross_entropy",
          "cross_entropy_loss", "mse_loss"})
      t.emplace(op, OpClass::kReduction);
    return t;
  }();
  return table;
}

OpClass classify(std::string_view op) {
  // Collectives traced into the graph are costed by the communication model, not here.
  for (std::string_view ns : {"_c10d_functional.", "c10d_functional.", "c10d.",
                              "_c10d_functional::", "c10d::"})
    if (op.starts_with(ns)) return OpClass::kFree;
  const auto& table = op_table();
  auto it = table.find(aten_packet(op));
  return it == table.end() ? OpClass::kPointwise : it->second;
}

double numel(const TensorMeta& m) { return static_cast<double>(m.numel()); }

double prod(const std::vector<int64_t>& shape, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to && i < shape.size(); ++i) p *= static_cast<double>(shape[i]);
  return p;
}

const TensorMeta* at(const std::vector<TensorMeta>& v, size_t i) {
  return i < v.size() ? &v[i] : nullptr;
}

/// 2 * out elements * k: the matmul family's count (flop_counter's mm/bmm formulas are this).
double matmul_flops(const TensorMeta* a, const TensorMeta* b, const std::vector<TensorMeta>& outs) {
  if (!a || a->shape.empty()) return 0;
  const double k = static_cast<double>(a->shape.back());
  if (!outs.empty()) return 2.0 * numel(outs[0]) * k;
  if (!b || b->shape.empty()) return 0;
  // No output meta: rows of a times columns of b.
  return 2.0 * (numel(*a) / k) * static_cast<double>(b->shape.back()) * k;
}

/// `_grouped_mm(a, b, offs)`: every output element is one dot product over its group's part of
/// the contraction, so 2 * out elements * k, except 2-D x 2-D (the weight gradient, out
/// [G, M, N]) whose G groups share the contraction a.shape[1] among them: 2 * M * N * K.
/// The FLOPs do not depend on how the rows are routed: 2-D x 3-D multiplies each of its M rows
/// (tokens x top_k, however they spread over the experts) by one expert; a capacity-padded
/// 3-D x 3-D computes every slot, empty or not.
double grouped_mm_flops(const TensorMeta* a, const TensorMeta* b,
                        const std::vector<TensorMeta>& outs) {
  if (!a || !b || outs.empty() || a->shape.empty()) return 0;
  const TensorMeta& out = outs[0];
  if (a->rank() == 2 && b->rank() == 2 && out.rank() == 3 && out.shape[0] > 0)
    return 2.0 * numel(out) / static_cast<double>(out.shape[0]) * static_cast<double>(a->shape[1]);
  return 2.0 * numel(out) * static_cast<double>(a->shape.back());
}

/// flop_counter's conv_flop_count: 2 * batch * prod(w) * prod(conv spatial).
double conv_flops(const TensorMeta* x, const TensorMeta* w, const TensorMeta* out,
                  bool transposed) {
  if (!x || !w || x->shape.empty()) return 0;
  const TensorMeta* spatial = transposed ? x : out;
  if (!spatial) return 0;
  return 2.0 * static_cast<double>(x->shape[0]) * numel(*w) *
         prod(spatial->shape, 2, spatial->shape.size());
}

/// Attention over [..., s, d] operands (q: s_q x d_qk, k: s_k x d_qk, v: s_k x d_v).
/// Returns {bh * s_q * s_k, d_qk, d_v}; zeros when shapes are unusable.
struct AttnDims {
  double bh_sq_sk = 0, d_qk = 0, d_v = 0;
};
AttnDims attn_dims_bhsd(const TensorMeta* q, const TensorMeta* k, const TensorMeta* v) {
  if (!q || !k || !v || q->rank() < 2 || k->rank() < 2 || v->rank() < 2) return {};
  const size_t r = q->shape.size();
  const double bh = prod(q->shape, 0, r - 2);
  const double s_q = static_cast<double>(q->shape[r - 2]);
  const double s_k = static_cast<double>(k->shape[k->shape.size() - 2]);
  return {bh * s_q * s_k, static_cast<double>(q->shape.back()),
          static_cast<double>(v->shape.back())};
}
AttnDims attn_dims_bshd(const TensorMeta* q, const TensorMeta* k, const TensorMeta* v) {
  if (!q || !k || !v || q->rank() != 4 || k->rank() != 4 || v->rank() != 4) return {};
  const double bh = static_cast<double>(q->shape[0] * q->shape[2]);
  return {bh * static_cast<double>(q->shape[1]) * static_cast<double>(k->shape[1]),
          static_cast<double>(q->shape[3]), static_cast<double>(v->shape[3])};
}

double sum_bytes(const std::vector<TensorMeta>& v, size_t from = 0) {
  double b = 0;
  for (size_t i = from; i < v.size(); ++i) b += static_cast<double>(v[i].bytes());
  return b;
}

double safe_div(double num, double den) {
  if (num == 0) return 0;
  return num / den;
}

}  // namespace

std::string_view aten_packet(std::string_view op) {
  if (op.starts_with("aten::")) op.remove_prefix(6);
  else if (op.starts_with("aten.")) op.remove_prefix(5);
  const size_t dot = op.find('.');
  return dot == std::string_view::npos ? op : op.substr(0, dot);
}

bool is_view_op(std::string_view op) { return classify(op) == OpClass::kView; }

namespace {

/// Real FLOPs per element of a pointwise op with an output of `dt`: 1 for real types; a
/// complex number is two reals, so 2 (add, conj, casts, ...), and a complex multiply
/// (a + bi)(c + di) takes 4 multiplies and 2 adds: 6 (rotary embeddings' complex mul).
double complex_flops_factor(std::string_view op, DType dt) {
  if (!is_complex(dt)) return 1;
  return aten_packet(op) == "mul" ? 6 : 2;
}

/// A Float8Linear GEMM as torchao runs it with tensorwise dynamic scaling: first the cast of
/// both high-precision operands to FP8 (memory-bound: each element read at its size and written
/// in one byte; the amax reduction that picks the scale taken as fused into the cast), then the
/// GEMM on FP8 operands at the FP8 peak, writing its output in the high precision.  Two
/// kernels, each with the launch floor.  The cast is a memory-bound op that torch.compile
/// generates, so --compile speeds it up like the others.
double float8_gemm_time_us(double flops, bool has_bias_first, const std::vector<TensorMeta>& inputs,
                           const std::vector<TensorMeta>& outputs, const Hardware& hw) {
  double cast_bytes = 0, gemm_bytes = sum_bytes(outputs);
  const size_t first = has_bias_first ? 1 : 0;  // addmm(bias, a, b)
  for (size_t i = first; i < first + 2 && i < inputs.size(); ++i) {
    const TensorMeta& m = inputs[i];
    gemm_bytes += numel(m);
    if (m.dtype != DType::kF8) cast_bytes += numel(m) * static_cast<double>(dtype_size(m.dtype) + 1);
  }
  const double eta = hw.efficiency;
  const double hbm = eta * hw.hbm_gbps * 1e9;
  const double t_gemm = std::max(safe_div(flops, eta * hw.peak_fp8_tflops * 1e12), safe_div(gemm_bytes, hbm)) * 1e6;
  double t_cast = safe_div(cast_bytes, hbm) * 1e6;
  if (hw.kernels.compiled) t_cast /= hw.compile_memory_speedup;
  return std::max(t_gemm, hw.launch_floor_us) + (cast_bytes > 0 ? std::max(t_cast, hw.launch_floor_us) : 0.0);
}

}  // namespace

double op_flops(const Node& node, const std::vector<TensorMeta>& inputs,
                const std::vector<TensorMeta>& outputs) {
  if (node.kind != NodeKind::kOp) return 0;
  switch (classify(node.op)) {
    case OpClass::kView:
    case OpClass::kFree:
    case OpClass::kCopy:
    case OpClass::kGather:
      return 0;
    case OpClass::kMm:
    case OpClass::kBmm:
    case OpClass::kMatmul:
      return matmul_flops(at(inputs, 0), at(inputs, 1), outputs);
    case OpClass::kAddmm:
    case OpClass::kBaddbmm:
      return matmul_flops(at(inputs, 1), at(inputs, 2), outputs);
    case OpClass::kGroupedMm:
      return grouped_mm_flops(at(inputs, 0), at(inputs, 1), outputs);
    case OpClass::kConv:
    case OpClass::kConvTransposed: {
      const bool transposed = classify(node.op) == OpClass::kConvTransposed ||
                              node.attr_bool("transposed", false);
      return conv_flops(at(inputs, 0), at(inputs, 1), at(outputs, 0), transposed);
    }
    case OpClass::kConvBackward: {
      // (grad_output, input, weight): each requested gradient costs one forward conv.
      const bool transposed = node.attr_bool("transposed", false);
      const double fwd = conv_flops(at(inputs, 1), at(inputs, 2), at(inputs, 0), transposed);
      // Which of (grad_input, grad_weight) were requested: the output_mask attr, else the
      // outputs that are present (exporters give masked-off outputs shape [0]).
      const std::vector<int64_t> mask = node.attr_ints("output_mask");
      double n = 0;
      for (size_t i = 0; i < 2; ++i) {
        bool wanted = true;
        if (i < mask.size()) wanted = mask[i] != 0;
        else if (i < outputs.size()) wanted = outputs[i].numel() > 0;
        n += wanted ? 1 : 0;
      }
      return n * fwd;
    }
    case OpClass::kSdpa:
    case OpClass::kFlashForward: {
      const AttnDims a = classify(node.op) == OpClass::kSdpa
                             ? attn_dims_bhsd(at(inputs, 0), at(inputs, 1), at(inputs, 2))
                             : attn_dims_bshd(at(inputs, 0), at(inputs, 1), at(inputs, 2));
      return 2.0 * a.bh_sq_sk * (a.d_qk + a.d_v);
    }
    case OpClass::kSdpaBackward: {
      // (grad_out, query, key, value, ...): recompute scores, then grads of v, probs, q, k.
      const AttnDims a = attn_dims_bhsd(at(inputs, 1), at(inputs, 2), at(inputs, 3));
      return 2.0 * a.bh_sq_sk * (3 * a.d_qk + 2 * a.d_v);
    }
    case OpClass::kNorm: {
      double n = inputs.empty() ? 0 : numel(inputs[0]);
      if (!outputs.empty()) n = std::max(n, numel(outputs[0]));
      return kNormFlopsPerElement * n;
    }
    case OpClass::kReduction:
      return inputs.empty() ? 0 : numel(inputs[0]);
    case OpClass::kPointwise: {
      double n = 0;
      for (const TensorMeta& m : outputs) n += numel(m) * complex_flops_factor(node.op, m.dtype);
      if (outputs.empty() && !inputs.empty()) n = numel(inputs[0]);
      return n;
    }
  }
  return 0;
}

double op_memory_bytes(const Node& node, const std::vector<TensorMeta>& inputs,
                       const std::vector<TensorMeta>& outputs) {
  if (node.kind != NodeKind::kOp) return 0;
  switch (classify(node.op)) {
    case OpClass::kView:
    case OpClass::kFree:
      return 0;
    case OpClass::kGather:
      // The table (input 0) is read only where indexed: read + write the gathered rows.
      return sum_bytes(inputs, 1) + 2 * sum_bytes(outputs);
    default:
      return sum_bytes(inputs) + sum_bytes(outputs);
  }
}

double compute_time_us(const Node& node, const std::vector<TensorMeta>& local_inputs,
                       const std::vector<TensorMeta>& local_outputs, const Hardware& hw) {
  if (node.kind != NodeKind::kOp) return 0;
  const OpClass c = classify(node.op);
  if (c == OpClass::kView || c == OpClass::kFree) return 0;
  // Arithmetic runs in the dtype of the first floating operand.
  DType dt = DType::kF32;
  bool found = false;
  for (const auto* list : {&local_inputs, &local_outputs}) {
    for (const TensorMeta& m : *list)
      if (!found && is_floating(m.dtype)) {
        dt = m.dtype;
        found = true;
      }
  }
  const double flops = op_flops(node, local_inputs, local_outputs);
  if (hw.kernels.float8_linear && hw.peak_fp8_tflops > 0 &&
      is_float8_linear_matmul(node, local_inputs))
    return float8_gemm_time_us(flops, c == OpClass::kAddmm, local_inputs, local_outputs, hw);
  const double bytes = op_memory_bytes(node, local_inputs, local_outputs);
  const double eta = hw.efficiency;
  const double t_compute = safe_div(flops, eta * hw.peak_flops(dt)) * 1e6;
  const double t_memory = safe_div(bytes, eta * hw.hbm_gbps * 1e9) * 1e6;
  double t = std::max(t_compute, t_memory);
  if (hw.kernels.compiled && is_fusible_memory_bound(node)) t /= hw.compile_memory_speedup;
  return std::max(t, hw.launch_floor_us);
}

bool is_float8_linear_matmul(const Node& node, const std::vector<TensorMeta>& inputs) {
  if (node.kind != NodeKind::kOp) return false;
  // torchtitan leaves the output projection in high precision (KernelOptions::float8_linear);
  // "lm_head" is its name in Hugging Face models.
  if (node.module_path == "output" || node.module_path == "lm_head") return false;
  switch (classify(node.op)) {
    case OpClass::kMm:
    case OpClass::kAddmm:
      return true;
    case OpClass::kMatmul: {
      // linear always; matmul only against a 2-D operand (a weight), not attention's
      // batched q @ k^T.
      if (aten_packet(node.op) == "linear") return true;
      const TensorMeta* b = at(inputs, 1);
      return b && b->rank() == 2;
    }
    default:
      return false;
  }
}

bool is_fusible_memory_bound(const Node& node) {
  if (node.kind != NodeKind::kOp) return false;
  switch (classify(node.op)) {
    case OpClass::kPointwise:
    case OpClass::kNorm:
    case OpClass::kReduction:
    case OpClass::kCopy:
      return true;
    default:
      return false;
  }
}

}  // namespace autoshard

#include "models/layers.h"

#include <fmt/format.h>

#include <numeric>
#include <stdexcept>

namespace autoshard {

void GradMap::accumulate(GraphBuilder& b, TensorRef x, TensorRef g) {
  b.expect_shape(g, b.shape(x), "gradient accumulation");
  auto [it, inserted] = grads_.try_emplace(x, g);
  if (!inserted) it->second = b.add(it->second, g);
}

TensorRef GradMap::take(TensorRef x) {
  auto it = grads_.find(x);
  if (it == grads_.end())
    throw std::logic_error(fmt::format("models: no gradient recorded for node #{}", x.node));
  TensorRef g = it->second;
  grads_.erase(it);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Linear

TensorRef linear_forward(GraphBuilder& b, TensorRef x, TensorRef w, std::optional<TensorRef> bias,
                         LinearSaved* saved) {
  const Shape& ws = b.shape(w);
  const Shape xs = b.shape(x);
  if (ws.size() != 2 || xs.empty() || xs.back() != ws[1])
    throw std::logic_error(
        fmt::format("models: linear: input {} vs weight {}", shape_str(xs), shape_str(ws)));
  LinearSaved s;
  s.has_bias = bias.has_value();
  s.wt = b.t(w);
  if (xs.size() == 2) {
    s.x2d = x;
  } else {
    s.lead.assign(xs.begin(), xs.end() - 1);
    int64_t rows = std::accumulate(s.lead.begin(), s.lead.end(), int64_t{1}, std::multiplies<>());
    s.x2d = b.view(x, {rows, xs.back()});
  }
  TensorRef y2 = bias ? b.addmm(*bias, s.x2d, s.wt) : b.mm(s.x2d, s.wt);
  TensorRef y = y2;
  if (!s.lead.empty()) {
    Shape out = s.lead;
    out.push_back(ws[0]);
    // matmul folds the leading dims and restores them with _unsafe_view; linear's addmm
    // path restores them with view.
    y = bias ? b.view(y2, out) : b.unsafe_view(y2, out);
  }
  if (saved) *saved = s;
  return y;
}

LinearGrads linear_backward(GraphBuilder& b, const LinearSaved& s, TensorRef grad,
                            bool need_input_grad, std::optional<TensorRef> accumulate_into) {
  const Shape& wt = b.shape(s.wt);  // [in, out]
  LinearGrads out;
  TensorRef g2 = grad;
  if (!s.lead.empty()) {
    Shape expect = s.lead;
    expect.push_back(wt[1]);
    b.expect_shape(grad, expect, "linear_backward");
    g2 = b.view(grad, {b.shape(s.x2d)[0], wt[1]});
  }
  // mm's derivative as traced: the gradient of t(w) is computed transposed (t(g) @ x, then t)
  // because t(w) is column-major; the parameter's gradient is t of that (t's backward).
  auto input_grad = [&] {
    if (need_input_grad) out.input = b.mm(g2, b.t(s.wt));
  };
  auto weight_grad = [&] { return b.t(b.mm(b.t(g2), s.x2d)); };
  TensorRef gwt;
  if (s.has_bias) {  // addmm: mat1, mat2, then self (the bias)
    input_grad();
    gwt = weight_grad();
    out.bias = b.view(b.sum_dim(g2, {0}, true), {wt[1]});
  } else {  // mm: mat2 first
    gwt = weight_grad();
    input_grad();
  }
  if (out.input && !s.lead.empty()) {
    Shape in = s.lead;
    in.push_back(wt[0]);
    out.input = b.view(*out.input, in);
  }
  if (out.input && accumulate_into) out.input = b.add(*accumulate_into, *out.input);
  out.weight = b.t(gwt);
  return out;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm (HF LlamaRMSNorm)

TensorRef rms_norm_forward(GraphBuilder& b, TensorRef x, TensorRef w, double eps,
                           RmsNormSaved* saved) {
  const Shape xs = b.shape(x);
  b.expect_shape(w, {xs.back()}, "rms_norm weight");
  RmsNormSaved s;
  s.in_dtype = b.dtype(x);
  s.weight = w;
  s.x32 = b.cast(x, DType::kF32);
  TensorRef variance = b.mean_dim(b.pow_scalar(s.x32, 2.0), {-1}, true);
  TensorRef r = b.unary("rsqrt", b.add_scalar(variance, eps));
  s.rsqrt = r;
  s.rsqrt_saved = b.unary("detach", r);
  s.normed = b.cast(b.mul(s.x32, r), s.in_dtype);
  TensorRef out = b.mul(s.normed, w);
  b.expect_shape(out, xs, "rms_norm");
  if (saved) *saved = s;
  return out;
}

NormGrads rms_norm_backward(GraphBuilder& b, const RmsNormSaved& s, TensorRef grad) {
  const Shape xs = b.shape(s.x32);
  b.expect_shape(grad, xs, "rms_norm_backward");
  const int64_t h = xs.back();
  const auto last = static_cast<int64_t>(xs.size()) - 1;
  const TensorRef r = s.rsqrt;
  NormGrads out;
  // out = normed * w: the weight's grad (summed to [h]) first, then normed's.
  TensorRef gw_full = b.mul(grad, s.normed);
  TensorRef g_normed = b.mul(grad, s.weight);
  std::vector<int64_t> lead(xs.size() - 1);
  std::iota(lead.begin(), lead.end(), int64_t{0});
  out.weight = b.view(b.sum_dim(gw_full, lead, true), {h});
  TensorRef g_y = b.cast(g_normed, DType::kF32);
  // y = x32 * r: other (r, summed over the broadcast dim) uses x32, self uses r.
  TensorRef g_r_full = b.mul(g_y, s.x32);
  TensorRef g_x32_direct = b.mul(g_y, r);
  TensorRef g_r = b.sum_dim(g_r_full, {last}, true);
  // r = rsqrt(variance + eps): grad * -0.5 * r^3, with r from the saved result.
  TensorRef r3 = b.pow_scalar(b.unary("detach", s.rsqrt_saved), 3.0);
  TensorRef g_var = b.mul(b.mul_scalar(g_r, -0.5), r3);
  // variance = mean(x32^2, -1): expand / h, times 2 * x32^1.
  TensorRef g_sq = b.div_scalar(b.expand(g_var, xs), static_cast<double>(h));
  TensorRef g_x32_pow = b.mul(g_sq, b.mul_scalar(b.pow_scalar(s.x32, 1.0), 2.0));
  TensorRef g_x32 = b.add(g_x32_direct, g_x32_pow);
  out.input = b.cast(g_x32, s.in_dtype);
  return out;
}

TensorRef silu_backward_decomposed(GraphBuilder& b, TensorRef grad, TensorRef x) {
  b.expect_shape(grad, b.shape(x), "silu_backward");
  TensorRef sig = b.unary("sigmoid", x);
  TensorRef ones = b.unary("fill_.Scalar", b.unary("empty_like", sig), Attrs{{"value", int64_t{1}}});
  TensorRef one_minus = b.op1("sub_.Tensor", {ones, sig}, Attrs{{"alpha", int64_t{1}}}, b.meta(sig));
  TensorRef inner = b.op1("add.Scalar", {b.mul(x, one_minus)},
                          Attrs{{"other", int64_t{1}}, {"alpha", int64_t{1}}}, b.meta(x));
  return b.mul(grad, b.mul(sig, inner));
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

TensorRef layer_norm_forward(GraphBuilder& b, TensorRef x, TensorRef w, TensorRef bias, double eps,
                             LayerNormSaved* saved) {
  const Shape xs = b.shape(x);
  const int64_t h = xs.back();
  b.expect_shape(w, {h}, "layer_norm weight");
  b.expect_shape(bias, {h}, "layer_norm bias");
  Shape stat = xs;
  stat.back() = 1;
  Attrs attrs{{"normalized_shape", std::vector<int64_t>{h}}, {"eps", eps}};
  NodeIdx n = b.op("native_layer_norm", {x, w, bias}, std::move(attrs),
                   {b.meta(x), TensorMeta{stat, DType::kF32}, TensorMeta{stat, DType::kF32}});
  if (saved) *saved = LayerNormSaved{x, {n, 1}, {n, 2}, w, bias};
  return {n, 0};
}

NormGrads layer_norm_backward(GraphBuilder& b, const LayerNormSaved& s, TensorRef grad) {
  b.expect_shape(grad, b.shape(s.x), "native_layer_norm_backward");
  const int64_t h = b.shape(s.x).back();
  Attrs attrs{{"normalized_shape", std::vector<int64_t>{h}},
              {"output_mask", std::vector<int64_t>{1, 1, 1}}};
  NodeIdx n = b.op("native_layer_norm_backward", {grad, s.x, s.mean, s.rstd, s.weight, s.bias},
                   std::move(attrs), {b.meta(s.x), b.meta(s.weight), b.meta(s.bias)});
  return NormGrads{{n, 0}, {n, 1}, TensorRef{n, 2}};
}

// ---------------------------------------------------------------------------------------------
// Scaled dot-product attention (memory-efficient kernel, causal, no dropout)

TensorRef attention_forward(GraphBuilder& b, TensorRef q, TensorRef k, TensorRef v, double scale,
                            AttentionSaved* saved) {
  const Shape qs = b.shape(q);
  if (qs.size() != 4) throw std::logic_error("models: attention: q must be [b, h, s, d]");
  b.expect_shape(k, qs, "attention key");
  b.expect_shape(v, qs, "attention value");
  const int64_t lse_len = (qs[2] + 31) / 32 * 32;  // the kernel pads logsumexp to 32
  Attrs attrs{
      {"compute_log_sumexp", true}, {"dropout_p", 0.0}, {"is_causal", true}, {"scale", scale}};
  NodeIdx n = b.op("_scaled_dot_product_efficient_attention", {q, k, v}, std::move(attrs),
                   {b.meta(q), TensorMeta{{qs[0], qs[1], lse_len}, DType::kF32},
                    TensorMeta{{}, DType::kI64}, TensorMeta{{}, DType::kI64}});
  TensorRef out{n, 0};
  TensorRef out_saved = b.unary("detach", out);
  if (saved) *saved = AttentionSaved{q, k, v, out_saved, {n, 1}, {n, 2}, {n, 3}, scale};
  return out;
}

AttentionGrads attention_backward(GraphBuilder& b, const AttentionSaved& s, TensorRef grad) {
  b.expect_shape(grad, b.shape(s.q), "attention backward");
  TensorRef out = b.unary("detach", s.out);
  Attrs attrs{{"dropout_p", 0.0},
              {"grad_input_mask", std::vector<int64_t>{1, 1, 1, 0}},
              {"is_causal", true},
              {"scale", s.scale}};
  NodeIdx n = b.op("_scaled_dot_product_efficient_attention_backward",
                   {grad, s.q, s.k, s.v, out, s.logsumexp, s.philox_seed, s.philox_offset},
                   std::move(attrs), {b.meta(s.q), b.meta(s.k), b.meta(s.v)});
  return AttentionGrads{{n, 0}, {n, 1}, {n, 2}};
}

// ---------------------------------------------------------------------------------------------
// Loss and embeddings

TensorRef cross_entropy_forward(GraphBuilder& b, TensorRef logits, TensorRef targets,
                                int64_t ignore_index, CrossEntropySaved* saved) {
  const Shape ls = b.shape(logits);
  if (ls.size() != 2) throw std::logic_error("models: cross_entropy: logits must be [N, V]");
  b.expect_shape(targets, {ls[0]}, "cross_entropy targets");
  CrossEntropySaved s;
  s.logits_dtype = b.dtype(logits);
  s.ignore_index = ignore_index;
  s.targets = targets;
  s.log_probs = b.op1("_log_softmax", {logits},
                      Attrs{{"dim", int64_t{1}}, {"half_to_float", false}}, b.meta(logits));
  s.log_probs_saved = b.unary("detach", s.log_probs);
  Attrs attrs{{"reduction", int64_t{1}}, {"ignore_index", ignore_index}};
  TensorMeta scalar{{}, s.logits_dtype};
  NodeIdx n = b.op("nll_loss_forward", {s.log_probs, targets}, std::move(attrs), {scalar, scalar});
  s.total_weight = {n, 1};
  if (saved) *saved = s;
  return {n, 0};
}

TensorRef cross_entropy_backward(GraphBuilder& b, const CrossEntropySaved& s, TensorRef grad_loss) {
  b.expect_shape(grad_loss, {}, "nll_loss_backward grad");
  Attrs attrs{{"reduction", int64_t{1}}, {"ignore_index", s.ignore_index}};
  TensorRef g = b.op1("nll_loss_backward", {grad_loss, s.log_probs, s.targets, s.total_weight},
                      std::move(attrs), b.meta(s.log_probs));
  TensorRef out = b.unary("detach", s.log_probs_saved);
  Attrs sm{{"dim", int64_t{1}}, {"input_dtype", std::string(dtype_name(s.logits_dtype))}};
  return b.op1("_log_softmax_backward_data", {g, out}, std::move(sm), b.meta(s.log_probs));
}

TensorRef embedding_forward(GraphBuilder& b, TensorRef weight, TensorRef indices) {
  const Shape& ws = b.shape(weight);
  if (ws.size() != 2 || b.dtype(indices) != DType::kI64)
    throw std::logic_error("models: embedding: weight must be 2-D and indices i64");
  Shape out = b.shape(indices);
  out.push_back(ws[1]);
  Attrs attrs{{"padding_idx", int64_t{-1}}, {"scale_grad_by_freq", false}, {"sparse", false}};
  return b.op1("embedding", {weight, indices}, std::move(attrs),
               TensorMeta{std::move(out), b.dtype(weight)});
}

TensorRef embedding_backward(GraphBuilder& b, TensorRef grad, TensorRef indices,
                             int64_t num_weights) {
  const Shape gs = b.shape(grad);
  Shape expect = b.shape(indices);
  expect.push_back(gs.back());
  b.expect_shape(grad, expect, "embedding_dense_backward");
  Attrs attrs{
      {"num_weights", num_weights}, {"padding_idx", int64_t{-1}}, {"scale_grad_by_freq", false}};
  return b.op1("embedding_dense_backward", {grad, indices}, std::move(attrs),
               TensorMeta{{num_weights, gs.back()}, b.dtype(grad)});
}

// ---------------------------------------------------------------------------------------------
// Optimizer

std::vector<OptimizerState> add_optimizer_state(GraphBuilder& b, bool with_state) {
  std::vector<TensorRef> params;
  for (NodeIdx i = 0; i < b.graph().size(); ++i)
    if (b.graph().node(i).kind == NodeKind::kParameter) params.push_back({i, 0});
  std::vector<OptimizerState> state;
  state.reserve(params.size());
  for (TensorRef p : params) {
    const Node& n = b.graph().node(p.node);
    std::string name = n.name, path = n.module_path;
    TensorMeta f32{n.out().shape, DType::kF32};
    OptimizerState s;
    s.param = p;
    if (!with_state) {
      state.push_back(s);
      continue;
    }
    s.master = b.buffer(name + ".master", path, f32, Phase::kOptimizer);
    s.exp_avg = b.buffer(name + ".exp_avg", path, f32, Phase::kOptimizer);
    s.exp_avg_sq = b.buffer(name + ".exp_avg_sq", path, f32, Phase::kOptimizer);
    state.push_back(s);
  }
  return state;
}

void add_optimizer_step(GraphBuilder& b, const std::vector<OptimizerState>& state, GradMap& grads,
                        TensorRef loss, bool optimizer, const AdamConfig& cfg) {
  const Phase end_phase = optimizer ? Phase::kOptimizer : Phase::kBackward;
  b.set_phase(Phase::kOptimizer);
  Graph& g = b.graph();
  std::vector<TensorRef> outputs{loss};
  for (const OptimizerState& s : state) {
    TensorRef grad = grads.take(s.param);
    b.expect_shape(grad, b.shape(s.param), "parameter gradient");
    g.grad_pairs.push_back(GradPair{s.param.node, grad});
    if (!optimizer) {
      outputs.push_back(grad);
      continue;
    }
    b.set_module(g.node(s.param.node).module_path);
    Attrs attrs{{"lr", cfg.lr},
                {"beta1", cfg.beta1},
                {"beta2", cfg.beta2},
                {"eps", cfg.eps},
                {"weight_decay", cfg.weight_decay}};
    NodeIdx n =
        b.op("_fused_adam", {s.param, grad, s.master, s.exp_avg, s.exp_avg_sq}, std::move(attrs),
             {b.meta(s.param), b.meta(s.master), b.meta(s.exp_avg), b.meta(s.exp_avg_sq)});
    for (int32_t i = 0; i < 4; ++i) outputs.push_back({n, i});
  }
  g.loss = loss;
  Node out;
  out.name = "output";
  out.kind = NodeKind::kOutput;
  out.phase = end_phase;
  out.inputs = std::move(outputs);
  g.add(std::move(out));
  b.set_module({});
}

}  // namespace autoshard

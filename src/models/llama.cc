/// LLaMA-3 training step, traced the way make_fx records a Hugging Face-style LLaMA with
/// torchtitan parameter names: RMSNorm decomposed, RoPE in real form (rotate_half), GQA through
/// repeat_kv (unsqueeze/expand/clone/_unsafe_view), memory-efficient SDPA, SwiGLU MLP, logits
/// upcast to f32 before the cross entropy.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "models/layers.h"
#include "models/zoo.h"

namespace autoshard {

namespace {

struct Dims {
  int64_t b, s, h, heads, kv_heads, hd, ffn, vocab;
  double eps;
};

struct LayerParams {
  TensorRef wq, wk, wv, wo, w1, w2, w3, attention_norm, ffn_norm;
};

struct LayerSaved {
  TensorRef x, h1;
  RmsNormSaved n1, n2;
  LinearSaved q, k, v, o, w1, w2, w3;
  AttentionSaved attn;
  TensorRef gate, act, up;
};

std::string layer_prefix(int64_t i) { return fmt::format("layers.{}", i); }

// q * cos + rotate_half(q) * sin with rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
TensorRef rope_forward(GraphBuilder& b, TensorRef x, TensorRef cos, TensorRef sin) {
  const int64_t d = b.shape(x).back();
  TensorRef a = b.mul(x, cos);
  TensorRef x1 = b.slice(x, 3, 0, d / 2);
  TensorRef x2 = b.slice(x, 3, d / 2, d);
  TensorRef rotated = b.cat({b.unary("neg", x2), x1}, -1);
  return b.add(a, b.mul(rotated, sin));
}

TensorRef rope_backward(GraphBuilder& b, TensorRef grad, TensorRef cos, TensorRef sin) {
  const Shape shape = b.shape(grad);
  const int64_t d = shape.back();
  TensorRef g_rot = b.mul(grad, sin);
  TensorRef g_neg = b.slice(g_rot, 3, 0, d / 2);  // cat backward narrows each piece
  TensorRef g_x1 = b.slice(g_rot, 3, d / 2, d);
  TensorRef g_x2 = b.unary("neg", g_neg);
  TensorRef acc = b.slice_backward(g_x2, shape, 3, d / 2, d);
  acc = b.add(acc, b.slice_backward(g_x1, shape, 3, 0, d / 2));
  return b.add(acc, b.mul(grad, cos));
}

// repeat_kv: x[:, :, None].expand(b, kv, rep, s, d).reshape(b, kv * rep, s, d)
TensorRef repeat_kv_forward(GraphBuilder& b, TensorRef x, int64_t rep) {
  if (rep == 1) return x;
  Shape s = b.shape(x);
  TensorRef e = b.expand(b.unsqueeze(x, 2), {s[0], s[1], rep, s[2], s[3]});
  return b.unsafe_view(b.clone_contiguous(e), {s[0], s[1] * rep, s[2], s[3]});
}

TensorRef repeat_kv_backward(GraphBuilder& b, TensorRef grad, int64_t rep) {
  if (rep == 1) return grad;
  Shape s = b.shape(grad);
  TensorRef g5 = b.view(grad, {s[0], s[1] / rep, rep, s[2], s[3]});
  return b.squeeze_dim(b.sum_dim(g5, {2}, true), 2);
}

// Backward of proj(x).view(b, s, n, d).transpose(1, 2): the transposed gradient is not
// contiguous, so the view's backward reshape copies (clone + _unsafe_view).
TensorRef heads_backward(GraphBuilder& b, TensorRef grad, const Dims& d) {
  Shape s = b.shape(grad);
  TensorRef g = b.clone_contiguous(b.transpose(grad, 1, 2));
  return b.unsafe_view(g, {d.b, d.s, s[1] * s[3]});
}

TensorRef layer_forward(GraphBuilder& b, const Dims& d, const std::string& pre,
                        const LayerParams& p, TensorRef cos, TensorRef sin, TensorRef x,
                        LayerSaved& sv) {
  sv.x = x;
  b.set_module(pre + ".attention_norm");
  TensorRef n1 = rms_norm_forward(b, x, p.attention_norm, d.eps, &sv.n1);

  const std::string attn = pre + ".attention";
  auto project = [&](TensorRef w, const char* name, int64_t n_heads, LinearSaved* s) {
    b.set_module(attn + "." + name);
    TensorRef y = linear_forward(b, n1, w, std::nullopt, s);
    b.set_module(attn);
    return b.transpose(b.view(y, {d.b, d.s, n_heads, d.hd}), 1, 2);
  };
  TensorRef q = project(p.wq, "wq", d.heads, &sv.q);
  TensorRef k = project(p.wk, "wk", d.kv_heads, &sv.k);
  TensorRef v = project(p.wv, "wv", d.kv_heads, &sv.v);
  q = rope_forward(b, q, cos, sin);
  k = rope_forward(b, k, cos, sin);
  const int64_t rep = d.heads / d.kv_heads;
  k = repeat_kv_forward(b, k, rep);
  v = repeat_kv_forward(b, v, rep);
  TensorRef o = attention_forward(b, q, k, v, 1.0 / std::sqrt(static_cast<double>(d.hd)), &sv.attn);
  o = b.view(b.transpose(o, 1, 2), {d.b, d.s, d.h});
  b.set_module(attn + ".wo");
  TensorRef a = linear_forward(b, o, p.wo, std::nullopt, &sv.o);
  b.set_module(pre);
  sv.h1 = b.add(x, a);

  b.set_module(pre + ".ffn_norm");
  TensorRef n2 = rms_norm_forward(b, sv.h1, p.ffn_norm, d.eps, &sv.n2);
  const std::string ff = pre + ".feed_forward";
  b.set_module(ff + ".w1");
  sv.gate = linear_forward(b, n2, p.w1, std::nullopt, &sv.w1);
  b.set_module(ff);
  sv.act = b.unary("silu", sv.gate);
  b.set_module(ff + ".w3");
  sv.up = linear_forward(b, n2, p.w3, std::nullopt, &sv.w3);
  b.set_module(ff);
  TensorRef m = b.mul(sv.act, sv.up);
  b.set_module(ff + ".w2");
  TensorRef down = linear_forward(b, m, p.w2, std::nullopt, &sv.w2);
  b.set_module(pre);
  TensorRef out = b.add(sv.h1, down);
  b.expect_shape(out, {d.b, d.s, d.h}, "llama layer output");
  return out;
}

/// Returns the gradient of the layer input; parameter gradients go to `grads`.
TensorRef layer_backward(GraphBuilder& b, const Dims& d, const std::string& pre,
                         const LayerParams& p, TensorRef cos, TensorRef sin, const LayerSaved& sv,
                         TensorRef g_out, GradMap& grads) {
  const std::string ff = pre + ".feed_forward";
  b.set_module(ff + ".w2");
  LinearGrads l2 = linear_backward(b, sv.w2, g_out, true);
  grads.accumulate(b, p.w2, l2.weight);
  b.set_module(ff);
  TensorRef g_act = b.mul(*l2.input, sv.up);
  TensorRef g_up = b.mul(*l2.input, sv.act);
  b.set_module(ff + ".w3");
  LinearGrads l3 = linear_backward(b, sv.w3, g_up, true);
  grads.accumulate(b, p.w3, l3.weight);
  b.set_module(ff);
  TensorRef g_gate = b.pointwise_backward("silu_backward", g_act, sv.gate);
  b.set_module(ff + ".w1");
  LinearGrads l1 = linear_backward(b, sv.w1, g_gate, true);
  grads.accumulate(b, p.w1, l1.weight);
  b.set_module(ff);
  TensorRef g_n2 = b.add(*l3.input, *l1.input);
  b.set_module(pre + ".ffn_norm");
  NormGrads n2 = rms_norm_backward(b, sv.n2, g_n2);
  grads.accumulate(b, p.ffn_norm, n2.weight);
  b.set_module(pre);
  TensorRef g_h1 = b.add(g_out, n2.input);

  const std::string attn = pre + ".attention";
  b.set_module(attn + ".wo");
  LinearGrads lo = linear_backward(b, sv.o, g_h1, true);
  grads.accumulate(b, p.wo, lo.weight);
  b.set_module(attn);
  TensorRef g_o = b.transpose(b.view(*lo.input, {d.b, d.s, d.heads, d.hd}), 1, 2);
  AttentionGrads ga = attention_backward(b, sv.attn, g_o);
  const int64_t rep = d.heads / d.kv_heads;
  TensorRef g_v = repeat_kv_backward(b, ga.v, rep);
  TensorRef g_k = rope_backward(b, repeat_kv_backward(b, ga.k, rep), cos, sin);
  TensorRef g_q = rope_backward(b, ga.q, cos, sin);

  auto project_back = [&](TensorRef g, const char* name, const LinearSaved& s, TensorRef w) {
    b.set_module(attn);
    TensorRef g3 = heads_backward(b, g, d);
    b.set_module(attn + "." + name);
    LinearGrads lg = linear_backward(b, s, g3, true);
    grads.accumulate(b, w, lg.weight);
    return *lg.input;
  };
  TensorRef g_n1 = project_back(g_v, "wv", sv.v, p.wv);
  TensorRef g_n1_k = project_back(g_k, "wk", sv.k, p.wk);
  b.set_module(attn);
  g_n1 = b.add(g_n1, g_n1_k);
  TensorRef g_n1_q = project_back(g_q, "wq", sv.q, p.wq);
  b.set_module(attn);
  g_n1 = b.add(g_n1, g_n1_q);
  b.set_module(pre + ".attention_norm");
  NormGrads n1 = rms_norm_backward(b, sv.n1, g_n1);
  grads.accumulate(b, p.attention_norm, n1.weight);
  b.set_module(pre);
  return b.add(g_h1, n1.input);
}

}  // namespace

int64_t llama_parameter_count(const LlamaConfig& c, int64_t layers) {
  const int64_t h = c.hidden, hd = c.hidden / c.heads, kv = c.kv_heads * hd;
  const int64_t per_layer = 2 * h * h + 2 * h * kv + 3 * h * c.ffn + 2 * h;
  return c.vocab * h + layers * per_layer + h + c.vocab * h;
}

Graph build_llama(const std::string& name, const LlamaConfig& c, const ModelOptions& o) {
  if (c.hidden % c.heads != 0 || c.heads % c.kv_heads != 0)
    throw std::logic_error("models: llama: heads must divide hidden and kv_heads heads");
  const DType dt = *o.dtype;
  const Dims d{o.batch, o.seq,   c.hidden,  c.heads, c.kv_heads, c.hidden / c.heads,
               c.ffn,   c.vocab, c.norm_eps};
  const int64_t kv = d.kv_heads * d.hd;
  GraphBuilder b(name);

  // Placeholders.
  TensorRef tokens = b.input("tokens", {{d.b, d.s}, DType::kI64});
  TensorRef labels = b.input("labels", {{d.b, d.s}, DType::kI64});
  auto param = [&](const std::string& path, Shape shape) {
    return b.parameter(path + ".weight", path, {std::move(shape), dt});
  };
  TensorRef embed = param("tok_embeddings", {d.vocab, d.h});
  std::vector<LayerParams> lp(static_cast<size_t>(o.layers));
  for (int64_t i = 0; i < o.layers; ++i) {
    const std::string pre = layer_prefix(i);
    LayerParams& p = lp[static_cast<size_t>(i)];
    p.wq = param(pre + ".attention.wq", {d.h, d.h});
    p.wk = param(pre + ".attention.wk", {kv, d.h});
    p.wv = param(pre + ".attention.wv", {kv, d.h});
    p.wo = param(pre + ".attention.wo", {d.h, d.h});
    p.w1 = param(pre + ".feed_forward.w1", {d.ffn, d.h});
    p.w2 = param(pre + ".feed_forward.w2", {d.h, d.ffn});
    p.w3 = param(pre + ".feed_forward.w3", {d.ffn, d.h});
    p.attention_norm = param(pre + ".attention_norm", {d.h});
    p.ffn_norm = param(pre + ".ffn_norm", {d.h});
  }
  TensorRef norm = param("norm", {d.h});
  TensorRef head = param("output", {d.vocab, d.h});
  TensorRef cos = b.buffer("rope.cos", "rope", {{d.s, d.hd}, dt});
  TensorRef sin = b.buffer("rope.sin", "rope", {{d.s, d.hd}, dt});
  std::vector<OptimizerState> opt = add_optimizer_state(b);

  // Forward.
  b.set_phase(Phase::kForward);
  b.set_module("tok_embeddings");
  TensorRef x = embedding_forward(b, embed, tokens);
  std::vector<LayerSaved> saved(lp.size());
  for (size_t i = 0; i < lp.size(); ++i)
    x = layer_forward(b, d, layer_prefix(static_cast<int64_t>(i)), lp[i], cos, sin, x, saved[i]);
  b.set_module("norm");
  RmsNormSaved final_norm;
  TensorRef nf = rms_norm_forward(b, x, norm, d.eps, &final_norm);
  b.set_module("output");
  LinearSaved head_saved;
  TensorRef logits = linear_forward(b, nf, head, std::nullopt, &head_saved);
  b.set_module("loss");
  TensorRef logits32 = b.view(b.cast(logits, DType::kF32), {d.b * d.s, d.vocab});
  CrossEntropySaved ce;
  TensorRef loss = cross_entropy_forward(b, logits32, b.view(labels, {d.b * d.s}), -100, &ce);

  // Backward.
  b.set_phase(Phase::kBackward);
  GradMap grads;
  TensorRef g = cross_entropy_backward(b, ce, b.unary("ones_like", loss));
  g = b.cast(b.view(g, {d.b, d.s, d.vocab}), dt);
  b.set_module("output");
  LinearGrads hg = linear_backward(b, head_saved, g, true);
  grads.accumulate(b, head, hg.weight);
  b.set_module("norm");
  NormGrads ng = rms_norm_backward(b, final_norm, *hg.input);
  grads.accumulate(b, norm, ng.weight);
  g = ng.input;
  for (size_t i = lp.size(); i-- > 0;)
    g = layer_backward(b, d, layer_prefix(static_cast<int64_t>(i)), lp[i], cos, sin, saved[i], g,
                       grads);
  b.set_module("tok_embeddings");
  grads.accumulate(b, embed, embedding_backward(b, g, tokens, d.vocab));

  add_optimizer_step(b, opt, grads, loss);
  return b.finish();
}

}  // namespace autoshard

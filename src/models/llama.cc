/// LLaMA-3 training step, traced the way make_fx records the torchtitan-style model of
/// python/autoshard_torch/examples/llama.py (parameter names tok_embeddings,
/// layers.N.attention.wq, ...): RMSNorm decomposed (f32 math), RoPE in real form on [b, s, h, d]
/// (split/neg/cat rotate_half, f32 cos/sin tables sliced and cast per use), GQA through
/// x[:, :, :, None, :].expand(...).reshape (slices, unsqueeze, expand, clone, _unsafe_view),
/// memory-efficient SDPA or the explicit math attention, SwiGLU MLP with silu's derivative
/// decomposed, logits upcast to f32 before the cross entropy.  With AttentionImpl::kMath and no
/// optimizer this is node for node the graph PyTorch 1.13 traces for that model, except that
/// 1.13 records contiguous reshapes as `_reshape_alias` where this emits `view` (2.x).
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "models/layers.h"
#include "models/zoo.h"

namespace autoshard {

namespace {

struct LlamaDims {
  int64_t b, s, h, heads, kv_heads, hd, ffn, vocab;
  double eps;
  DType dt;
  bool math;
};

struct LayerParams {
  TensorRef wq, wk, wv, wo, w1, w2, w3, attention_norm, ffn_norm;
};

/// What the math attention saves for its backward (3-D bmm operands).
struct MathSaved {
  TensorRef q3, kt3, probs3, v3;  ///< [b*h, s, d], [b*h, d, s], [b*h, s, s], [b*h, s, d]
  TensorRef probs_saved;          ///< detach(_softmax)
};

struct RopeTables {
  TensorRef cos, sin;  ///< [1, s, 1, d] in the model dtype
};

struct LayerSaved {
  RmsNormSaved n1, n2;
  LinearSaved q, k, v, o, w1, w2, w3;
  RopeTables rope_q, rope_k;
  AttentionSaved attn;
  MathSaved math;
  TensorRef gate, act, up;
};

std::string layer_prefix(int64_t i) { return fmt::format("layers.{}", i); }

// cos[None, :, None, :].to(dtype): unsqueeze, full slice, unsqueeze, full slice, _to_copy.
TensorRef rope_table(GraphBuilder& b, TensorRef t, DType dt) {
  TensorRef x = b.unsqueeze(t, 0);
  x = b.slice(x, 1, 0, b.shape(x)[1]);
  x = b.unsqueeze(x, 2);
  x = b.slice(x, 3, 0, b.shape(x)[3]);
  return b.cast(x, dt);
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1) with x1, x2 = x.chunk(2, -1).
TensorRef rope_forward(GraphBuilder& b, TensorRef x, const RopeTables& t) {
  const int64_t d = b.shape(x).back();
  TensorRef a = b.mul(x, t.cos);
  std::vector<TensorRef> halves = b.split(x, d / 2, -1);
  TensorRef rotated = b.cat({b.unary("neg", halves[1]), halves[0]}, -1);
  return b.add(a, b.mul(rotated, t.sin));
}

TensorRef rope_backward(GraphBuilder& b, TensorRef grad, const RopeTables& t) {
  const int64_t d = b.shape(grad).back();
  TensorRef g_rot = b.mul(grad, t.sin);
  TensorRef g_neg = b.slice(g_rot, 3, 0, d / 2);  // cat's backward narrows each piece
  TensorRef g_x1 = b.slice(g_rot, 3, d / 2, d);
  TensorRef g_x2 = b.unary("neg", g_neg);
  TensorRef g_x = b.cat({g_x1, g_x2}, 3);  // split's backward
  return b.add(g_x, b.mul(grad, t.cos));
}

// repeat_kv on [b, s, kv, d]: x[:, :, :, None, :].expand(b, s, kv, rep, d).reshape(b, s, kv*rep, d)
TensorRef repeat_kv_forward(GraphBuilder& b, TensorRef x, int64_t rep) {
  if (rep == 1) return x;
  Shape s = b.shape(x);
  for (int64_t d = 0; d < 3; ++d) x = b.slice(x, d, 0, s[static_cast<size_t>(d)]);
  x = b.slice(b.unsqueeze(x, 3), 4, 0, s[3]);
  TensorRef e = b.expand(x, {s[0], s[1], s[2], rep, s[3]});
  return b.unsafe_view(b.clone_contiguous(e), {s[0], s[1], s[2] * rep, s[3]});
}

TensorRef repeat_kv_backward(GraphBuilder& b, TensorRef grad, int64_t rep) {
  if (rep == 1) return grad;
  Shape s = b.shape(grad);
  const int64_t kv = s[2] / rep;
  TensorRef g = b.sum_dim(b.view(grad, {s[0], s[1], kv, rep, s[3]}), {3}, true);
  g = b.slice_backward(g, {s[0], s[1], kv, 1, s[3]}, 4, 0, s[3]);
  g = b.squeeze_dim(g, 3);
  const Shape in{s[0], s[1], kv, s[3]};
  for (int64_t d = 3; d-- > 0;) g = b.slice_backward(g, in, d, 0, in[static_cast<size_t>(d)]);
  return g;
}

// torch.matmul of two 4-D tensors: expand (to the broadcast shape, here the same), clone to
// contiguous when the operand is not (transposed), fold to 3-D, bmm, unfold (_unsafe_view).
TensorRef fold3(GraphBuilder& b, TensorRef x, bool contiguous) {
  Shape s = b.shape(x);
  TensorRef e = b.expand(x, s);
  const Shape s3{s[0] * s[1], s[2], s[3]};
  return contiguous ? b.view(e, s3) : b.unsafe_view(b.clone_contiguous(e), s3);
}

/// Causal softmax attention on [b, h, s, d] q, k, v; returns [b, h, s, d].
TensorRef math_attention_forward(GraphBuilder& b, const LlamaDims& d, TensorRef q, TensorRef k,
                                 TensorRef v, MathSaved& sv) {
  TensorRef kt = b.transpose(k, -2, -1);
  sv.q3 = fold3(b, q, false);
  sv.kt3 = fold3(b, kt, false);
  TensorRef scores = b.unsafe_view(b.op1("bmm", {sv.q3, sv.kt3}, {}, {{d.b * d.heads, d.s, d.s}, d.dt}),
                                   {d.b, d.heads, d.s, d.s});
  scores = b.op1("div.Tensor", {scores}, Attrs{{"other", std::sqrt(static_cast<double>(d.hd))}},
                 b.meta(scores));
  TensorRef mask = b.op1("full", {},
                         Attrs{{"size", std::vector<int64_t>{d.s, d.s}},
                               {"fill_value", -std::numeric_limits<double>::infinity()}},
                         {{d.s, d.s}, DType::kF32});
  mask = b.cast(b.op1("triu", {mask}, Attrs{{"diagonal", int64_t{1}}}, b.meta(mask)), d.dt);
  scores = b.cast(b.add(scores, mask), DType::kF32);
  TensorRef probs = b.op1("_softmax", {scores}, Attrs{{"dim", int64_t{-1}}, {"half_to_float", false}},
                          b.meta(scores));
  sv.probs_saved = b.unary("detach", probs);
  sv.probs3 = fold3(b, b.cast(probs, d.dt), true);
  sv.v3 = fold3(b, v, false);
  TensorRef o = b.op1("bmm", {sv.probs3, sv.v3}, {}, {{d.b * d.heads, d.s, d.hd}, d.dt});
  return b.unsafe_view(o, {d.b, d.heads, d.s, d.hd});
}

/// grad [b, h, s, d] -> gradients of q, k, v ([b, h, s, d]), in autograd's order.
AttentionGrads math_attention_backward(GraphBuilder& b, const LlamaDims& d, const MathSaved& sv,
                                       TensorRef grad) {
  const Shape s3 = b.shape(sv.v3);
  TensorRef g3 = b.unsafe_view(b.clone_contiguous(grad), s3);
  TensorRef g_v3 = b.op1("bmm", {b.transpose(sv.probs3, 1, 2), g3}, {}, b.meta(sv.v3));
  TensorRef g_p3 = b.op1("bmm", {g3, b.transpose(sv.v3, 1, 2)}, {}, b.meta(sv.probs3));
  TensorRef g_v = b.view(g_v3, {d.b, d.heads, d.s, d.hd});
  TensorRef g_p = b.cast(b.view(g_p3, {d.b, d.heads, d.s, d.s}), DType::kF32);
  TensorRef g_s = b.op1("_softmax_backward_data", {g_p, b.unary("detach", sv.probs_saved)},
                        Attrs{{"dim", int64_t{-1}}, {"input_dtype", std::string("f32")}},
                        b.meta(g_p));
  g_s = b.cast(g_s, d.dt);
  g_s = b.op1("div.Tensor", {g_s}, Attrs{{"other", std::sqrt(static_cast<double>(d.hd))}},
              b.meta(g_s));
  TensorRef gs3 = b.view(g_s, {d.b * d.heads, d.s, d.s});
  TensorRef g_kt3 = b.op1("bmm", {b.transpose(sv.q3, 1, 2), gs3}, {}, b.meta(sv.kt3));
  TensorRef g_q3 = b.op1("bmm", {gs3, b.transpose(sv.kt3, 1, 2)}, {}, b.meta(sv.q3));
  TensorRef g_kt = b.view(g_kt3, {d.b, d.heads, d.hd, d.s});
  TensorRef g_q = b.view(g_q3, {d.b, d.heads, d.s, d.hd});
  return AttentionGrads{g_q, b.transpose(g_kt, -2, -1), g_v};
}

TensorRef layer_forward(GraphBuilder& b, const LlamaDims& d, const std::string& pre,
                        const LayerParams& p, TensorRef cos, TensorRef sin, TensorRef x,
                        LayerSaved& sv) {
  b.set_module(pre + ".attention_norm");
  TensorRef n1 = rms_norm_forward(b, x, p.attention_norm, d.eps, &sv.n1);

  const std::string attn = pre + ".attention";
  auto project = [&](TensorRef w, const char* name, int64_t n_heads, LinearSaved* s) {
    b.set_module(attn + "." + name);
    TensorRef y = linear_forward(b, n1, w, std::nullopt, s);
    b.set_module(attn);
    return b.view(y, {d.b, d.s, n_heads, d.hd});
  };
  TensorRef q = project(p.wq, "wq", d.heads, &sv.q);
  TensorRef k = project(p.wk, "wk", d.kv_heads, &sv.k);
  TensorRef v = project(p.wv, "wv", d.kv_heads, &sv.v);
  sv.rope_q = {rope_table(b, cos, d.dt), rope_table(b, sin, d.dt)};
  q = rope_forward(b, q, sv.rope_q);
  sv.rope_k = {rope_table(b, cos, d.dt), rope_table(b, sin, d.dt)};
  k = rope_forward(b, k, sv.rope_k);
  const int64_t rep = d.heads / d.kv_heads;
  k = repeat_kv_forward(b, k, rep);
  v = repeat_kv_forward(b, v, rep);
  q = b.transpose(q, 1, 2);
  k = b.transpose(k, 1, 2);
  v = b.transpose(v, 1, 2);
  TensorRef o;
  if (d.math) {
    o = math_attention_forward(b, d, q, k, v, sv.math);
    o = b.unsafe_view(b.clone_contiguous(b.transpose(o, 1, 2)), {d.b, d.s, d.h});
  } else {
    o = attention_forward(b, q, k, v, 1.0 / std::sqrt(static_cast<double>(d.hd)), &sv.attn);
    o = b.view(b.transpose(o, 1, 2), {d.b, d.s, d.h});  // the kernel's output is [b, s, h, d]
  }
  b.set_module(attn + ".wo");
  TensorRef a = linear_forward(b, o, p.wo, std::nullopt, &sv.o);
  b.set_module(pre);
  TensorRef h1 = b.add(x, a);

  b.set_module(pre + ".ffn_norm");
  TensorRef n2 = rms_norm_forward(b, h1, p.ffn_norm, d.eps, &sv.n2);
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
  TensorRef out = b.add(h1, down);
  b.expect_shape(out, {d.b, d.s, d.h}, "llama layer output");
  return out;
}

/// Returns the gradient of the layer input; parameter gradients go to `grads`.
TensorRef layer_backward(GraphBuilder& b, const LlamaDims& d, const std::string& pre,
                         const LayerParams& p, const LayerSaved& sv, TensorRef g_out,
                         GradMap& grads) {
  const std::string ff = pre + ".feed_forward";
  b.set_module(ff + ".w2");
  LinearGrads l2 = linear_backward(b, sv.w2, g_out, true);
  grads.accumulate(b, p.w2, l2.weight);
  b.set_module(ff);
  // m = act * up: autograd computes other's (up's) gradient first.
  TensorRef g_up = b.mul(*l2.input, sv.act);
  TensorRef g_act = b.mul(*l2.input, sv.up);
  b.set_module(ff + ".w3");
  LinearGrads l3 = linear_backward(b, sv.w3, g_up, true);
  grads.accumulate(b, p.w3, l3.weight);
  b.set_module(ff);
  TensorRef g_gate = silu_backward_decomposed(b, g_act, sv.gate);
  b.set_module(ff + ".w1");
  LinearGrads l1 = linear_backward(b, sv.w1, g_gate, true, *l3.input);
  grads.accumulate(b, p.w1, l1.weight);
  TensorRef g_n2 = *l1.input;
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
  AttentionGrads ga = d.math ? math_attention_backward(b, d, sv.math, g_o)
                             : attention_backward(b, sv.attn, g_o);
  // transpose(1, 2) backward, v, k, q (autograd runs the latest-created node first).
  TensorRef g_v = b.transpose(ga.v, 1, 2);
  TensorRef g_k = b.transpose(ga.k, 1, 2);
  TensorRef g_q = b.transpose(ga.q, 1, 2);
  const int64_t rep = d.heads / d.kv_heads;
  g_v = repeat_kv_backward(b, g_v, rep);
  g_k = rope_backward(b, repeat_kv_backward(b, g_k, rep), sv.rope_k);
  g_q = rope_backward(b, g_q, sv.rope_q);

  // The three projections' input gradients are summed as they arrive (v, k, q).
  std::optional<TensorRef> g_n1;
  auto project_back = [&](TensorRef g, const char* name, const LinearSaved& s, TensorRef w) {
    b.set_module(attn);
    Shape gs = b.shape(g);
    TensorRef g3 = b.view(g, {d.b, d.s, gs[2] * gs[3]});
    b.set_module(attn + "." + name);
    LinearGrads lg = linear_backward(b, s, g3, true, g_n1);
    grads.accumulate(b, w, lg.weight);
    g_n1 = *lg.input;
  };
  project_back(g_v, "wv", sv.v, p.wv);
  project_back(g_k, "wk", sv.k, p.wk);
  project_back(g_q, "wq", sv.q, p.wq);
  b.set_module(pre + ".attention_norm");
  NormGrads n1 = rms_norm_backward(b, sv.n1, *g_n1);
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
  const LlamaDims d{o.batch, o.seq,   c.hidden,   c.heads, c.kv_heads,
               c.hidden / c.heads, c.ffn, c.vocab, c.norm_eps, dt,
               o.attention.value_or(AttentionImpl::kSdpa) == AttentionImpl::kMath};
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
  TensorRef cos_table = b.buffer("rope_cos", "", {{d.s, d.hd}, DType::kF32});
  TensorRef sin_table = b.buffer("rope_sin", "", {{d.s, d.hd}, DType::kF32});
  std::vector<OptimizerState> opt = add_optimizer_state(b, o.optimizer);

  // Forward.
  b.set_phase(Phase::kForward);
  b.set_module("tok_embeddings");
  TensorRef x = embedding_forward(b, embed, tokens);
  b.set_module("");
  TensorRef cos = b.slice(cos_table, 0, 0, d.s);  // rope_cos[:seq]
  TensorRef sin = b.slice(sin_table, 0, 0, d.s);
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
  TensorRef logits32 = b.cast(b.view(logits, {d.b * d.s, d.vocab}), DType::kF32);
  CrossEntropySaved ce;
  TensorRef loss = cross_entropy_forward(b, logits32, b.view(labels, {d.b * d.s}), -100, &ce);

  // Backward.
  b.set_phase(Phase::kBackward);
  GradMap grads;
  TensorRef g = cross_entropy_backward(b, ce, b.unary("ones_like", loss));
  g = b.view(b.cast(g, dt), {d.b, d.s, d.vocab});
  b.set_module("output");
  LinearGrads hg = linear_backward(b, head_saved, g, true);
  grads.accumulate(b, head, hg.weight);
  b.set_module("norm");
  NormGrads ng = rms_norm_backward(b, final_norm, *hg.input);
  grads.accumulate(b, norm, ng.weight);
  g = ng.input;
  for (size_t i = lp.size(); i-- > 0;)
    g = layer_backward(b, d, layer_prefix(static_cast<int64_t>(i)), lp[i], saved[i], g, grads);
  b.set_module("tok_embeddings");
  grads.accumulate(b, embed, embedding_backward(b, g, tokens, d.vocab));

  add_optimizer_step(b, opt, grads, loss, o.optimizer);
  return b.finish();
}

}  // namespace autoshard

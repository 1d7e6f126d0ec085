/// GPT-2 (124M) training step, traced the way make_fx records nanoGPT's model: learned
/// position embeddings, LayerNorm with bias, fused c_attn projection split into q/k/v,
/// memory-efficient causal SDPA, tanh-GELU MLP, LM head tied to the token embedding, and no
/// dropout (p = 0 is not traced).
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "models/layers.h"
#include "models/zoo.h"

namespace autoshard {

namespace {

struct Gpt2Dims {
  int64_t b, s, h, heads, hd, vocab, positions;
  double eps;
};

struct LinearParams {
  TensorRef weight, bias;
};

struct BlockParams {
  LinearParams ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj;
};

struct BlockSaved {
  LayerNormSaved ln_1, ln_2;
  LinearSaved c_attn, attn_proj, c_fc, mlp_proj;
  AttentionSaved attn;
  TensorRef fc_out;
};

const Attrs& tanh_gelu() {
  static const Attrs attrs{{"approximate", std::string("tanh")}};
  return attrs;
}

TensorRef block_forward(GraphBuilder& b, const Gpt2Dims& d, const std::string& pre,
                        const BlockParams& p, TensorRef x, BlockSaved& sv) {
  b.set_module(pre + ".ln_1");
  TensorRef n1 = layer_norm_forward(b, x, p.ln_1.weight, p.ln_1.bias, d.eps, &sv.ln_1);
  b.set_module(pre + ".attn.c_attn");
  TensorRef qkv = linear_forward(b, n1, p.c_attn.weight, p.c_attn.bias, &sv.c_attn);
  b.set_module(pre + ".attn");
  std::vector<TensorRef> parts = b.split(qkv, d.h, 2);
  auto heads = [&](TensorRef t) { return b.transpose(b.view(t, {d.b, d.s, d.heads, d.hd}), 1, 2); };
  TensorRef k = heads(parts.at(1));  // nanoGPT reshapes k, then q, then v
  TensorRef q = heads(parts.at(0));
  TensorRef v = heads(parts.at(2));
  TensorRef y = attention_forward(b, q, k, v, 1.0 / std::sqrt(static_cast<double>(d.hd)), &sv.attn);
  y = b.view(b.transpose(y, 1, 2), {d.b, d.s, d.h});
  b.set_module(pre + ".attn.c_proj");
  TensorRef a = linear_forward(b, y, p.attn_proj.weight, p.attn_proj.bias, &sv.attn_proj);
  b.set_module(pre);
  TensorRef h1 = b.add(x, a);

  b.set_module(pre + ".ln_2");
  TensorRef n2 = layer_norm_forward(b, h1, p.ln_2.weight, p.ln_2.bias, d.eps, &sv.ln_2);
  b.set_module(pre + ".mlp.c_fc");
  sv.fc_out = linear_forward(b, n2, p.c_fc.weight, p.c_fc.bias, &sv.c_fc);
  b.set_module(pre + ".mlp");
  TensorRef act = b.unary("gelu", sv.fc_out, tanh_gelu());
  b.set_module(pre + ".mlp.c_proj");
  TensorRef m = linear_forward(b, act, p.mlp_proj.weight, p.mlp_proj.bias, &sv.mlp_proj);
  b.set_module(pre);
  TensorRef out = b.add(h1, m);
  b.expect_shape(out, {d.b, d.s, d.h}, "gpt2 block output");
  return out;
}

void accumulate_linear(GraphBuilder& b, GradMap& grads, const LinearParams& p,
                       const LinearGrads& g) {
  grads.accumulate(b, p.weight, g.weight);
  grads.accumulate(b, p.bias, *g.bias);
}

void accumulate_norm(GraphBuilder& b, GradMap& grads, const LinearParams& p, const NormGrads& g) {
  grads.accumulate(b, p.weight, g.weight);
  grads.accumulate(b, p.bias, *g.bias);
}

TensorRef block_backward(GraphBuilder& b, const Gpt2Dims& d, const std::string& pre,
                         const BlockParams& p, const BlockSaved& sv, TensorRef g_out,
                         GradMap& grads) {
  b.set_module(pre + ".mlp.c_proj");
  LinearGrads lp = linear_backward(b, sv.mlp_proj, g_out, true);
  accumulate_linear(b, grads, p.mlp_proj, lp);
  b.set_module(pre + ".mlp");
  TensorRef g_fc = b.pointwise_backward("gelu_backward", *lp.input, sv.fc_out, tanh_gelu());
  b.set_module(pre + ".mlp.c_fc");
  LinearGrads lf = linear_backward(b, sv.c_fc, g_fc, true);
  accumulate_linear(b, grads, p.c_fc, lf);
  b.set_module(pre + ".ln_2");
  NormGrads n2 = layer_norm_backward(b, sv.ln_2, *lf.input);
  accumulate_norm(b, grads, p.ln_2, n2);
  b.set_module(pre);
  TensorRef g_h1 = b.add(g_out, n2.input);

  b.set_module(pre + ".attn.c_proj");
  LinearGrads la = linear_backward(b, sv.attn_proj, g_h1, true);
  accumulate_linear(b, grads, p.attn_proj, la);
  b.set_module(pre + ".attn");
  TensorRef g_y = b.transpose(b.view(*la.input, {d.b, d.s, d.heads, d.hd}), 1, 2);
  AttentionGrads ga = attention_backward(b, sv.attn, g_y);
  auto heads_back = [&](TensorRef g) {
    TensorRef c = b.clone_contiguous(b.transpose(g, 1, 2));
    return b.unsafe_view(c, {d.b, d.s, d.h});
  };
  TensorRef g_v = heads_back(ga.v);
  TensorRef g_q = heads_back(ga.q);
  TensorRef g_k = heads_back(ga.k);
  TensorRef g_qkv = b.cat({g_q, g_k, g_v}, 2);  // split backward
  b.set_module(pre + ".attn.c_attn");
  LinearGrads lq = linear_backward(b, sv.c_attn, g_qkv, true);
  accumulate_linear(b, grads, p.c_attn, lq);
  b.set_module(pre + ".ln_1");
  NormGrads n1 = layer_norm_backward(b, sv.ln_1, *lq.input);
  accumulate_norm(b, grads, p.ln_1, n1);
  b.set_module(pre);
  return b.add(g_h1, n1.input);
}

}  // namespace

int64_t gpt2_parameter_count(const Gpt2Config& c, int64_t layers) {
  const int64_t h = c.hidden;
  return c.vocab * h + c.positions * h + layers * (12 * h * h + 13 * h) + 2 * h;
}

Graph build_gpt2(const std::string& name, const Gpt2Config& c, const ModelOptions& o) {
  const DType dt = *o.dtype;
  const Gpt2Dims d{o.batch, o.seq,       c.hidden,  c.heads, c.hidden / c.heads,
               c.vocab, c.positions, c.norm_eps};
  if (d.s > d.positions)
    throw std::invalid_argument(
        fmt::format("models: gpt2: seq {} exceeds its {} positions", d.s, d.positions));
  GraphBuilder b(name);

  TensorRef idx = b.input("idx", {{d.b, d.s}, DType::kI64});
  TensorRef targets = b.input("targets", {{d.b, d.s}, DType::kI64});
  auto linear_params = [&](const std::string& path, Shape w) {
    int64_t out = w[0];
    LinearParams p;
    p.weight = b.parameter(path + ".weight", path, {std::move(w), dt});
    p.bias = b.parameter(path + ".bias", path, {{out}, dt});
    return p;
  };
  TensorRef wte = b.parameter("transformer.wte.weight", "transformer.wte", {{d.vocab, d.h}, dt});
  TensorRef wpe =
      b.parameter("transformer.wpe.weight", "transformer.wpe", {{d.positions, d.h}, dt});
  std::vector<BlockParams> bp(static_cast<size_t>(o.layers));
  for (int64_t i = 0; i < o.layers; ++i) {
    const std::string pre = fmt::format("transformer.h.{}", i);
    BlockParams& p = bp[static_cast<size_t>(i)];
    p.ln_1 = linear_params(pre + ".ln_1", {d.h});
    p.c_attn = linear_params(pre + ".attn.c_attn", {3 * d.h, d.h});
    p.attn_proj = linear_params(pre + ".attn.c_proj", {d.h, d.h});
    p.ln_2 = linear_params(pre + ".ln_2", {d.h});
    p.c_fc = linear_params(pre + ".mlp.c_fc", {4 * d.h, d.h});
    p.mlp_proj = linear_params(pre + ".mlp.c_proj", {d.h, 4 * d.h});
  }
  LinearParams ln_f = linear_params("transformer.ln_f", {d.h});
  std::vector<OptimizerState> opt = add_optimizer_state(b, o.optimizer);

  // Forward.
  b.set_phase(Phase::kForward);
  b.set_module("transformer.wpe");
  TensorRef pos = b.op1("arange.start", {},
                        Attrs{{"start", int64_t{0}}, {"end", d.s}, {"dtype", std::string("i64")}},
                        {{d.s}, DType::kI64});
  b.set_module("transformer.wte");
  TensorRef tok_emb = embedding_forward(b, wte, idx);
  b.set_module("transformer.wpe");
  TensorRef pos_emb = embedding_forward(b, wpe, pos);
  b.set_module("transformer");
  TensorRef x = b.add(tok_emb, pos_emb);
  std::vector<BlockSaved> saved(bp.size());
  for (size_t i = 0; i < bp.size(); ++i)
    x = block_forward(b, d, fmt::format("transformer.h.{}", i), bp[i], x, saved[i]);
  b.set_module("transformer.ln_f");
  LayerNormSaved lnf_saved;
  x = layer_norm_forward(b, x, ln_f.weight, ln_f.bias, d.eps, &lnf_saved);
  b.set_module("lm_head");
  LinearSaved head_saved;
  TensorRef logits = linear_forward(b, x, wte, std::nullopt, &head_saved);
  b.set_module("loss");
  CrossEntropySaved ce;
  TensorRef loss = cross_entropy_forward(b, b.view(logits, {d.b * d.s, d.vocab}),
                                         b.view(targets, {d.b * d.s}), -1, &ce);

  // Backward.
  b.set_phase(Phase::kBackward);
  GradMap grads;
  TensorRef g = cross_entropy_backward(b, ce, b.unary("ones_like", loss));
  g = b.view(g, {d.b, d.s, d.vocab});
  b.set_module("lm_head");
  LinearGrads hg = linear_backward(b, head_saved, g, true);
  grads.accumulate(b, wte, hg.weight);
  b.set_module("transformer.ln_f");
  NormGrads nf = layer_norm_backward(b, lnf_saved, *hg.input);
  accumulate_norm(b, grads, ln_f, nf);
  g = nf.input;
  for (size_t i = bp.size(); i-- > 0;)
    g = block_backward(b, d, fmt::format("transformer.h.{}", i), bp[i], saved[i], g, grads);
  b.set_module("transformer.wpe");
  TensorRef g_pos = b.view(b.sum_dim(g, {0}, true), {d.s, d.h});
  grads.accumulate(b, wpe, embedding_backward(b, g_pos, pos, d.positions));
  b.set_module("transformer.wte");
  grads.accumulate(b, wte, embedding_backward(b, g, idx, d.vocab));

  add_optimizer_step(b, opt, grads, loss, o.optimizer);
  return b.finish();
}

}  // namespace autoshard

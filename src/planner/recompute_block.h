#pragma once
/// The one-layer MLP block whose recomputation costs and peaks recompute_test.cc works out by
/// hand; simulate_test.cc replays the same block.
#include <vector>

#include "cost/compute.h"
#include "ir/graph.h"
#include "mesh/hardware.h"
#include "models/builder.h"
#include "models/models.h"

namespace autoshard::testing {

/// A small LLaMA with `layers` layers: hidden 64, 4 heads (2 KV), FFN 128, vocabulary 128,
/// batch 4 x 64 tokens (the recomputation and state tests' model).
inline Graph tiny_llama(int layers) {
  ModelOptions mo;
  mo.layers = layers;
  mo.batch = 4;
  mo.seq = 64;
  mo.hidden = 64;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.ffn = 128;
  mo.vocab = 128;
  return build_model("llama3-8b", mo);
}

constexpr int64_t kBlockB = 64, kBlockH = 64, kBlockF = 16;

/// Node order (index: tensor, bytes in bf16, live interval without recomputation):
///  0 x [B,H] 8192 [0,16)      1 target [B,H] 8192 [0,10)
///  2 w1 [H,F], 3 w2 [F,H]: parameters, 16 bytes per element (mixed Adam) each, whole step
///  forward, module layers.0.mlp(.w1/.w2):
///  4 a = mm(x, w1) [B,F] 2048 [4,6)   5 r = relu(a) 2048 [5,15)   6 y = mm(r, w2) 8192 [6,10)
///  7 loss = mse_loss(y, target) 2 [7,9)     (module "loss": y escapes the region)
///  backward: 8 ones 2 [8,10); 9 g 8192 [9,14); 10 w2t = t(w2) 2048 [10,12);
///  11 gr = mm(g, w2t) 2048 [11,15); 12 rt = t(r) 2048 [12,14); 13 gw2 = mm(rt, g) 2048
///  [13,14); 14 ga = threshold_backward(gr, r) 2048 [14,17); 15 xt = t(x) 8192 [15,17);
///  16 gw1 = mm(xt, ga) 2048 [16,17); 17 output.
inline Graph mlp_block() {
  GraphBuilder b("mlp_block");
  const DType dt = DType::kBF16;
  TensorRef x = b.input("x", {{kBlockB, kBlockH}, dt});
  TensorRef target = b.input("target", {{kBlockB, kBlockH}, dt});
  TensorRef w1 = b.parameter("layers.0.mlp.w1.weight", "layers.0.mlp.w1", {{kBlockH, kBlockF}, dt});
  TensorRef w2 = b.parameter("layers.0.mlp.w2.weight", "layers.0.mlp.w2", {{kBlockF, kBlockH}, dt});
  b.set_phase(Phase::kForward);
  b.set_module("layers.0.mlp.w1");
  TensorRef a = b.mm(x, w1);
  b.set_module("layers.0.mlp");
  TensorRef r = b.unary("relu", a);
  b.set_module("layers.0.mlp.w2");
  TensorRef y = b.mm(r, w2);
  b.set_module("loss");
  TensorRef loss = b.op1("mse_loss", {y, target}, Attrs{{"reduction", int64_t{1}}}, TensorMeta{{}, dt});
  b.set_phase(Phase::kBackward);
  TensorRef g = b.op1("mse_loss_backward", {b.unary("ones_like", loss), y, target},
                      Attrs{{"reduction", int64_t{1}}}, b.meta(y));
  b.set_module("layers.0.mlp.w2");
  TensorRef gr = b.mm(g, b.t(w2));
  TensorRef gw2 = b.mm(b.t(r), g);
  b.set_module("layers.0.mlp");
  TensorRef ga = b.pointwise_backward("threshold_backward", gr, r, Attrs{{"threshold", 0.0}});
  b.set_module("layers.0.mlp.w1");
  TensorRef gw1 = b.mm(b.t(x), ga);
  Graph& gr_ = b.graph();
  Node out;
  out.name = "output";
  out.kind = NodeKind::kOutput;
  out.phase = Phase::kBackward;
  out.inputs = {loss, gw1, gw2};
  gr_.grad_pairs.push_back({w1.node, gw1});
  gr_.grad_pairs.push_back({w2.node, gw2});
  gr_.loss = loss;
  gr_.add(std::move(out));
  return b.finish();
}

inline double compute_of(const Graph& g, NodeIdx i) {
  const Node& n = g.node(i);
  std::vector<TensorMeta> in;
  for (const TensorRef& r : n.inputs) in.push_back(g.meta(r));
  return compute_time_us(n, in, n.outputs, *hardware_preset("h100"));
}

}  // namespace autoshard::testing

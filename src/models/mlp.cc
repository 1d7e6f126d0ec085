/// A stack of dense layers (nn.Linear with bias, ReLU between layers) trained with an MSE
/// loss: the Alpa-style toy model whose tensor-parallel plan is easy to reason about.
#include <fmt/format.h>

#include "models/layers.h"
#include "models/zoo.h"

namespace autoshard {

int64_t mlp_parameter_count(const MlpConfig& c, int64_t layers) {
  return layers * (c.hidden * c.hidden + c.hidden);
}

Graph build_mlp(const std::string& name, const MlpConfig& c, const ModelOptions& o) {
  const DType dt = *o.dtype;
  const int64_t h = c.hidden;
  const auto n_layers = static_cast<size_t>(o.layers);
  GraphBuilder b(name);

  TensorRef x = b.input("x", {{o.batch, h}, dt});
  TensorRef target = b.input("target", {{o.batch, h}, dt});
  struct Layer {
    std::string path;
    TensorRef weight, bias;
    LinearSaved saved;
    TensorRef relu_saved;  ///< detach(relu): threshold_backward uses relu's result
  };
  std::vector<Layer> layers(n_layers);
  for (size_t i = 0; i < n_layers; ++i) {
    Layer& l = layers[i];
    l.path = fmt::format("layers.{}", i);
    l.weight = b.parameter(l.path + ".weight", l.path, {{h, h}, dt});
    l.bias = b.parameter(l.path + ".bias", l.path, {{h}, dt});
  }
  std::vector<OptimizerState> opt = add_optimizer_state(b, o.optimizer);

  b.set_phase(Phase::kForward);
  TensorRef y = x;
  for (size_t i = 0; i < n_layers; ++i) {
    Layer& l = layers[i];
    b.set_module(l.path);
    y = linear_forward(b, y, l.weight, l.bias, &l.saved);
    if (i + 1 < n_layers) {
      y = b.unary("relu", y);
      l.relu_saved = b.unary("detach", y);
    }
  }
  b.set_module("loss");
  TensorRef loss =
      b.op1("mse_loss", {y, target}, Attrs{{"reduction", int64_t{1}}}, TensorMeta{{}, b.dtype(y)});

  b.set_phase(Phase::kBackward);
  GradMap grads;
  TensorRef g = b.op1("mse_loss_backward", {b.unary("ones_like", loss), y, target},
                      Attrs{{"reduction", int64_t{1}}}, b.meta(y));
  for (size_t i = n_layers; i-- > 0;) {
    Layer& l = layers[i];
    b.set_module(l.path);
    if (i + 1 < n_layers) {
      TensorRef r = b.unary("detach", l.relu_saved);
      g = b.pointwise_backward("threshold_backward", g, r, Attrs{{"threshold", 0.0}});
    }
    LinearGrads lg = linear_backward(b, l.saved, g, /*need_input_grad=*/i > 0);
    grads.accumulate(b, l.weight, lg.weight);
    grads.accumulate(b, l.bias, *lg.bias);
    if (i > 0) g = *lg.input;
  }

  add_optimizer_step(b, opt, grads, loss, o.optimizer);
  return b.finish();
}

}  // namespace autoshard

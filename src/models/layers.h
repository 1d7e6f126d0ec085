#pragma once
/// Building blocks shared by the built-in models: each forward helper emits the ATen ops make_fx
/// records for the PyTorch module and returns what autograd saves; the matching backward
/// helper emits the ops autograd's derivative formulas produce, in autograd's order.
#include <map>
#include <optional>
#include <vector>

#include "models/builder.h"

namespace autoshard {

/// Gradients of forward tensors, accumulated with add.Tensor when a tensor has several uses
/// (autograd's InputBuffer).
class GradMap {
 public:
  void accumulate(GraphBuilder& b, TensorRef x, TensorRef g);
  /// The gradient of x; throws std::logic_error when none was recorded.
  TensorRef take(TensorRef x);

 private:
  std::map<TensorRef, TensorRef> grads_;
};

// nn.Linear: t(w), view to 2-D when needed, mm (or addmm with a bias), view back.
struct LinearSaved {
  TensorRef x2d;  ///< the 2-D input of the mm
  TensorRef wt;   ///< t(weight)
  Shape lead;     ///< leading dims of the input (empty when the input was already 2-D)
  bool has_bias = false;
};
struct LinearGrads {
  std::optional<TensorRef> input;
  TensorRef weight;
  std::optional<TensorRef> bias;
};
TensorRef linear_forward(GraphBuilder& b, TensorRef x, TensorRef w, std::optional<TensorRef> bias,
                         LinearSaved* saved);
/// `accumulate_into`: an earlier gradient of the same input; the input gradient returned is
/// their sum, added where autograd's input buffer adds it (before the weight's final t).
LinearGrads linear_backward(GraphBuilder& b, const LinearSaved& s, TensorRef grad,
                            bool need_input_grad,
                            std::optional<TensorRef> accumulate_into = std::nullopt);

// HF-style RMSNorm decomposed: _to_copy f32, pow, mean, add eps, rsqrt, mul, _to_copy, mul w.
struct RmsNormSaved {
  TensorRef x32;          ///< the f32 copy of the input
  TensorRef rsqrt;        ///< saved by mul(x32, rsqrt) as an input
  TensorRef rsqrt_saved;  ///< detach(rsqrt): rsqrt's backward uses its result
  TensorRef normed;       ///< normalized input cast back to the input dtype
  TensorRef weight;
  DType in_dtype = DType::kBF16;
};
struct NormGrads {
  TensorRef input;
  TensorRef weight;
  std::optional<TensorRef> bias;
};
TensorRef rms_norm_forward(GraphBuilder& b, TensorRef x, TensorRef w, double eps,
                           RmsNormSaved* saved);
NormGrads rms_norm_backward(GraphBuilder& b, const RmsNormSaved& s, TensorRef grad);

/// silu's derivative as make_fx records it (no silu_backward node): sigmoid(x), empty_like,
/// fill_(1), sub_ (1 - sigmoid), mul by x, add.Scalar 1, mul by sigmoid, mul by grad.
TensorRef silu_backward_decomposed(GraphBuilder& b, TensorRef grad, TensorRef x);

// nn.LayerNorm: native_layer_norm -> (out, mean, rstd); backward native_layer_norm_backward.
struct LayerNormSaved {
  TensorRef x, mean, rstd, weight, bias;
};
TensorRef layer_norm_forward(GraphBuilder& b, TensorRef x, TensorRef w, TensorRef bias, double eps,
                             LayerNormSaved* saved);
NormGrads layer_norm_backward(GraphBuilder& b, const LayerNormSaved& s, TensorRef grad);

// Causal SDPA through the memory-efficient kernel: q, k, v as [b, h, s, d].
struct AttentionSaved {
  TensorRef q, k, v, out, logsumexp, philox_seed, philox_offset;
  double scale = 1.0;
};
struct AttentionGrads {
  TensorRef q, k, v;
};
TensorRef attention_forward(GraphBuilder& b, TensorRef q, TensorRef k, TensorRef v, double scale,
                            AttentionSaved* saved);
AttentionGrads attention_backward(GraphBuilder& b, const AttentionSaved& s, TensorRef grad);

// Cross entropy over [N, V] logits and [N] i64 targets: _log_softmax + nll_loss_forward (mean).
struct CrossEntropySaved {
  TensorRef log_probs;        ///< nll_loss saves its input
  TensorRef log_probs_saved;  ///< detach(_log_softmax): _log_softmax saves its result
  TensorRef targets, total_weight;
  DType logits_dtype = DType::kF32;
  int64_t ignore_index = -100;
};
/// Returns the scalar loss.
TensorRef cross_entropy_forward(GraphBuilder& b, TensorRef logits, TensorRef targets,
                                int64_t ignore_index, CrossEntropySaved* saved);
/// grad_loss is the scalar seed gradient; returns the gradient of the logits.
TensorRef cross_entropy_backward(GraphBuilder& b, const CrossEntropySaved& s, TensorRef grad_loss);

/// embedding_dense_backward(grad, indices, num_weights, padding_idx=-1, scale_grad_by_freq=0).
TensorRef embedding_backward(GraphBuilder& b, TensorRef grad, TensorRef indices,
                             int64_t num_weights);
TensorRef embedding_forward(GraphBuilder& b, TensorRef weight, TensorRef indices);

/// Mixed-precision AdamW hyper-parameters recorded on every _fused_adam node.
struct AdamConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

/// Optimizer state placeholders for every parameter of the graph built so far:
/// `<param>.master`, `<param>.exp_avg`, `<param>.exp_avg_sq` (f32 buffers, phase optimizer).
/// Without `with_state` only `param` is set (no buffers: ModelOptions::optimizer false).
struct OptimizerState {
  TensorRef param, master, exp_avg, exp_avg_sq;
};
std::vector<OptimizerState> add_optimizer_state(GraphBuilder& b, bool with_state = true);

/// The optimizer phase: one _fused_adam per parameter (inputs param, grad, master, exp_avg,
/// exp_avg_sq; outputs the four updated tensors), Graph::grad_pairs, Graph::loss and a final
/// `output` node returning the loss and the updated state.  `grads` maps each parameter to
/// its final gradient.  Without `optimizer` there are no _fused_adam nodes and the output node
/// (phase backward) returns the loss and the gradients, like a traced training step.
void add_optimizer_step(GraphBuilder& b, const std::vector<OptimizerState>& state, GradMap& grads,
                        TensorRef loss, bool optimizer = true, const AdamConfig& cfg = {});

}  // namespace autoshard

#pragma once
/// Built-in models as full training-step graphs (forward, backward, mixed-precision AdamW) at
/// the granularity make_fx traces at the ATen level.
///
/// Models and defaults (batch, seq, layers, dtype):
///   llama3-1b   8, 2048, 16, bf16   hidden 2048, 32 heads, 8 kv heads, ffn 8192, vocab 128256
///   llama3-8b   8, 2048, 32, bf16   hidden 4096, 32 heads, 8 kv heads, ffn 14336, vocab 128256
///   llama3-70b  8, 2048, 80, bf16   hidden 8192, 64 heads, 8 kv heads, ffn 28672, vocab 128256
///   llama3-405b 8, 2048, 126, bf16  hidden 16384, 128 heads, 8 kv heads, ffn 53248, vocab 128256
///   gpt2        8, 1024, 12, bf16   hidden 768, 12 heads, vocab 50257, 1024 positions, tied head
///   mlp        64,    -,  2, bf16   hidden 1024, Linear+bias, ReLU between layers, MSE loss
/// LLaMA embeddings and LM head are untied; the MLP ignores `seq` (resolved to 1); GPT-2 needs
/// seq <= 1024.  Inputs (i64 [batch, seq]): llama `tokens`, `labels`; gpt2 `idx`, `targets`;
/// mlp takes `x` and `target` ([batch, 1024], model dtype).  Parameters are named like the
/// PyTorch state dict ("layers.0.attention.wq.weight", torchtitan names for LLaMA, nanoGPT names
/// for GPT-2) with module_path the owning module; weights are [out, in] like nn.Linear.  Op
/// nodes carry FX-style names ("mm", "mm_17"), their phase and the module path they belong to.
/// LLaMA also has two buffers `rope_cos` / `rope_sin` ([seq, head_dim], f32, cast to the model
/// dtype where used), named like the traced example model's.
///
/// Graph layout: placeholders first (inputs, parameters, buffers, optimizer state), then the
/// forward ops, the backward ops, one _fused_adam per parameter and a final `output` node
/// (inputs: the loss, then each _fused_adam's four outputs; without the optimizer: the loss,
/// then each parameter's gradient).  Every parameter has the
/// optimizer-state buffers `<param>.master`, `<param>.exp_avg`, `<param>.exp_avg_sq` (f32), and
/// Graph::grad_pairs maps it to its final gradient; Graph::loss is the scalar loss.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace autoshard {

/// How LLaMA computes attention.  kSdpa: one fused `_scaled_dot_product_efficient_attention`
/// node (what make_fx records on PyTorch 2.x).  kMath: the explicit causal softmax attention
/// (q @ k^T / sqrt(d) + triu mask, f32 softmax, @ v as expand/clone/_unsafe_view/bmm), which
/// is what PyTorch 1.13 traces: with it (and no optimizer) the built-in LLaMA is the same graph
/// as python/autoshard_torch/examples/llama.py traced on 1.13, up to `view` where 1.13 records
/// `_reshape_alias`.
enum class AttentionImpl { kSdpa, kMath };

struct ModelOptions {
  int64_t batch = -1;          ///< -1 = model default
  int64_t seq = -1;            ///< -1 = model default (ignored by mlp)
  int64_t layers = -1;         ///< -1 = model default
  std::optional<DType> dtype;  ///< parameter/activation dtype; default bf16
  // Architecture overrides, LLaMA models only (-1 = the model's value; other models reject
  // them): hidden size, attention heads, kv heads (GQA), SwiGLU width, vocabulary.
  int64_t hidden = -1;
  int64_t heads = -1;
  int64_t kv_heads = -1;
  int64_t ffn = -1;
  int64_t vocab = -1;
  std::optional<AttentionImpl> attention = std::nullopt;  ///< LLaMA only; default kSdpa
  /// false: no optimizer phase (no optimizer-state buffers, no _fused_adam); the output node
  /// returns the loss and the parameter gradients, like a traced forward+backward step.
  bool optimizer = true;
};

/// The built-in model names, sorted.
std::vector<std::string> model_names();

/// `opts` with every unset field replaced by the model's default (the architecture fields stay
/// -1 for non-LLaMA models).  Throws std::invalid_argument for an unknown model, a non-positive
/// batch/seq/layers/override (other than -1), an override or attention choice given to a
/// non-LLaMA model, heads not dividing hidden or kv_heads not dividing heads, or a GPT-2
/// sequence longer than its 1024 positions.
ModelOptions resolve_model_options(std::string_view name, const ModelOptions& opts = {});

/// Builds the training graph.  Throws std::invalid_argument("unknown model 'x' (known: ...)")
/// for an unknown name, and as resolve_model_options for bad options.
Graph build_model(std::string_view name, const ModelOptions& opts = {});

/// Closed-form parameter count of the model as published (depends on `layers` and, for LLaMA,
/// the architecture overrides):
///   llama: V*h (embed) + L*(2*h*h + 2*h*kv*hd + 3*h*ffn + 2*h) + h (norm) + V*h (head)
///   gpt2:  V*h + 1024*h + L*(12*h*h + 13*h) + 2*h        (tied head)
///   mlp:   L*(H*H + H)
/// llama3-8b gives 8,030,261,248; llama3-405b 405,853,388,800; gpt2 124,439,808.
int64_t published_parameter_count(std::string_view name, const ModelOptions& opts = {});

/// Sorted set of ATen op names ("add.Tensor", "mm", "_fused_adam", ...) the built-in models
/// use, computed once from small instances of every model.
std::vector<std::string> model_op_names();

}  // namespace autoshard

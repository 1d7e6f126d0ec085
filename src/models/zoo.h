#pragma once
/// Internal: the per-family graph builders behind build_model().  Options passed here are
/// already resolved (no -1 fields, dtype set).
#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "models/models.h"

namespace autoshard {

struct LlamaConfig {
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  double norm_eps = 1e-5;
};
Graph build_llama(const std::string& name, const LlamaConfig& cfg, const ModelOptions& opts);
int64_t llama_parameter_count(const LlamaConfig& cfg, int64_t layers);

struct Gpt2Config {
  int64_t hidden = 768, layers = 12, heads = 12, vocab = 50257, positions = 1024;
  double norm_eps = 1e-5;
};
Graph build_gpt2(const std::string& name, const Gpt2Config& cfg, const ModelOptions& opts);
int64_t gpt2_parameter_count(const Gpt2Config& cfg, int64_t layers);

struct MlpConfig {
  int64_t hidden = 1024;
};
Graph build_mlp(const std::string& name, const MlpConfig& cfg, const ModelOptions& opts);
int64_t mlp_parameter_count(const MlpConfig& cfg, int64_t layers);

}  // namespace autoshard

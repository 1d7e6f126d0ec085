#include "models/models.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include "models/zoo.h"

namespace autoshard {

namespace {

struct ModelEntry {
  std::string name;
  ModelOptions defaults;  ///< fully resolved
  std::function<Graph(const std::string&, const ModelOptions&)> build;
  std::function<int64_t(const ModelOptions&)> parameter_count;  ///< of resolved options
  bool is_llama = false;
};

/// The LLaMA config with the resolved options' architecture overrides applied.
LlamaConfig with_overrides(LlamaConfig c, const ModelOptions& o) {
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.kv_heads = o.kv_heads;
  c.ffn = o.ffn;
  c.vocab = o.vocab;
  return c;
}

ModelEntry llama(std::string name, LlamaConfig c) {
  ModelOptions def{8, 2048, c.layers, DType::kBF16};
  def.hidden = c.hidden;
  def.heads = c.heads;
  def.kv_heads = c.kv_heads;
  def.ffn = c.ffn;
  def.vocab = c.vocab;
  def.attention = AttentionImpl::kSdpa;
  return {std::move(name), def,
          [c](const std::string& n, const ModelOptions& o) {
            return build_llama(n, with_overrides(c, o), o);
          },
          [c](const ModelOptions& o) {
            return llama_parameter_count(with_overrides(c, o), o.layers);
          },
          true};
}

const std::vector<ModelEntry>& registry() {
  static const std::vector<ModelEntry> entries = [] {
    std::vector<ModelEntry> e;
    Gpt2Config gpt2;
    e.push_back(
        {"gpt2", ModelOptions{8, 1024, gpt2.layers, DType::kBF16},
         [gpt2](const std::string& n, const ModelOptions& o) { return build_gpt2(n, gpt2, o); },
         [gpt2](const ModelOptions& o) { return gpt2_parameter_count(gpt2, o.layers); }});
    e.push_back(llama("llama3-1b", {2048, 16, 32, 8, 8192, 128256}));
    e.push_back(llama("llama3-70b", {8192, 80, 64, 8, 28672, 128256}));
    e.push_back(llama("llama3-8b", {4096, 32, 32, 8, 14336, 128256}));
    // Llama 3 paper (Dubey et al. 2024), table 3: 126 layers, model dim 16384, FFN 53248,
    // 128 heads, 8 KV heads, vocabulary 128256.
    e.push_back(llama("llama3-405b", {16384, 126, 128, 8, 53248, 128256}));
    MlpConfig mlp;
    e.push_back(
        {"mlp", ModelOptions{64, 1, 2, DType::kBF16},
         [mlp](const std::string& n, const ModelOptions& o) { return build_mlp(n, mlp, o); },
         [mlp](const ModelOptions& o) { return mlp_parameter_count(mlp, o.layers); }});
    std::sort(e.begin(), e.end(),
              [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
    return e;
  }();
  return entries;
}

const ModelEntry& lookup(std::string_view name) {
  for (const ModelEntry& e : registry())
    if (e.name == name) return e;
  throw std::invalid_argument(
      fmt::format("unknown model '{}' (known: {})", name, fmt::join(model_names(), ", ")));
}

int64_t pick(std::string_view model, const char* field, int64_t value, int64_t fallback) {
  if (value == -1) return fallback;
  if (value <= 0)
    throw std::invalid_argument(fmt::format(
        "model '{}': {} must be positive or -1 (default), got {}", model, field, value));
  return value;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : registry()) names.push_back(e.name);
  return names;
}

ModelOptions resolve_model_options(std::string_view name, const ModelOptions& opts) {
  const ModelEntry& e = lookup(name);
  ModelOptions o;
  o.batch = pick(name, "batch", opts.batch, e.defaults.batch);
  o.seq = pick(name, "seq", opts.seq, e.defaults.seq);
  o.layers = pick(name, "layers", opts.layers, e.defaults.layers);
  o.dtype = opts.dtype.value_or(*e.defaults.dtype);
  o.optimizer = opts.optimizer;
  const struct {
    const char* field;
    int64_t ModelOptions::*member;
  } arch[] = {{"hidden", &ModelOptions::hidden},
              {"heads", &ModelOptions::heads},
              {"kv_heads", &ModelOptions::kv_heads},
              {"ffn", &ModelOptions::ffn},
              {"vocab", &ModelOptions::vocab}};
  for (const auto& a : arch) {
    if (!e.is_llama && opts.*a.member != -1)
      throw std::invalid_argument(
          fmt::format("model '{}': {} can only be set for llama models", name, a.field));
    o.*a.member = e.is_llama ? pick(name, a.field, opts.*a.member, e.defaults.*a.member) : -1;
  }
  if (!e.is_llama && opts.attention)
    throw std::invalid_argument(
        fmt::format("model '{}': attention can only be set for llama models", name));
  if (e.is_llama) {
    o.attention = opts.attention.value_or(*e.defaults.attention);
    if (o.hidden % o.heads != 0 || o.heads % o.kv_heads != 0)
      throw std::invalid_argument(fmt::format(
          "model '{}': heads ({}) must divide hidden ({}) and kv_heads ({}) must divide heads",
          name, o.heads, o.hidden, o.kv_heads));
    if ((o.hidden / o.heads) % 2 != 0)
      throw std::invalid_argument(
          fmt::format("model '{}': head dim {} must be even (rotary embeddings)", name,
                      o.hidden / o.heads));
  }
  if (name == "gpt2" && o.seq > 1024)
    throw std::invalid_argument(
        fmt::format("model 'gpt2': seq {} exceeds its 1024 learned positions", o.seq));
  return o;
}

Graph build_model(std::string_view name, const ModelOptions& opts) {
  const ModelEntry& e = lookup(name);
  return e.build(e.name, resolve_model_options(name, opts));
}

int64_t published_parameter_count(std::string_view name, const ModelOptions& opts) {
  const ModelEntry& e = lookup(name);
  return e.parameter_count(resolve_model_options(name, opts));
}

std::vector<std::string> model_op_names() {
  static const std::vector<std::string> names = [] {
    std::set<std::string> ops;
    for (const ModelEntry& e : registry()) {
      ModelOptions small{2, 64, 2, DType::kBF16};
      std::vector<ModelOptions> variants{small};
      if (e.is_llama) {
        small.attention = AttentionImpl::kMath;
        variants.push_back(small);
      }
      for (const ModelOptions& v : variants) {
        Graph g = e.build(e.name, resolve_model_options(e.name, v));
        for (const Node& n : g.nodes)
          if (n.kind == NodeKind::kOp) ops.insert(n.op);
      }
    }
    return std::vector<std::string>(ops.begin(), ops.end());
  }();
  return names;
}

}  // namespace autoshard

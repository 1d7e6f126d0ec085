#include "models/models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <stdexcept>

#include "models/builder.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;

// An independent re-derivation of every op's output shapes from its inputs and attributes, so
// both the shapes and the recorded attributes are checked.  nullopt = op without a rule.
std::optional<std::vector<Shape>> expected_shapes(const Graph& g, const Node& n) {
  auto in = [&](size_t i) { return g.meta(n.inputs.at(i)).shape; };
  const std::string& op = n.op;
  static const std::set<std::string> same_as_input0 = {
      "rsqrt",        "neg",
      "silu",         "relu",
      "detach",       "gelu",
      "clone",        "ones_like",
      "_to_copy",     "mul.Scalar",
      "div.Scalar",   "pow.Tensor_Scalar",
      "_log_softmax", "_log_softmax_backward_data",
      "sigmoid",      "empty_like",
      "fill_.Scalar", "add.Scalar",
      "triu",         "_softmax",
      "_softmax_backward_data"};
  static const std::set<std::string> same_as_input1 = {"silu_backward", "gelu_backward",
                                                       "threshold_backward", "nll_loss_backward",
                                                       "mse_loss_backward"};
  if (same_as_input0.count(op)) return std::vector<Shape>{in(0)};
  if (same_as_input1.count(op)) {
    if (op.find("loss") == std::string::npos && in(0) != in(1)) return std::nullopt;
    return std::vector<Shape>{in(1)};
  }
  if (op == "add.Tensor" || op == "mul.Tensor" || op == "sub_.Tensor" || op == "div.Tensor") {
    if (n.inputs.size() == 1) return std::vector<Shape>{in(0)};
    return std::vector<Shape>{broadcast_shapes(in(0), in(1))};
  }
  if (op == "sum.dim_IntList" || op == "mean.dim") {
    Shape s = in(0);
    std::vector<bool> red(s.size());
    for (int64_t d : n.attr_ints("dim"))
      red[static_cast<size_t>(wrap_dim(d, std::ssize(s)))] = true;
    Shape out;
    for (size_t i = 0; i < s.size(); ++i)
      if (!red[i])
        out.push_back(s[i]);
      else if (n.attr_bool("keepdim", false))
        out.push_back(1);
    return std::vector<Shape>{out};
  }
  if (op == "view" || op == "_unsafe_view" || op == "expand")
    return std::vector<Shape>{n.attr_ints("size")};
  if (op == "t") return std::vector<Shape>{{in(0).at(1), in(0).at(0)}};
  if (op == "transpose.int") {
    Shape s = in(0);
    std::swap(s[static_cast<size_t>(wrap_dim(n.attr_int("dim0", 0), std::ssize(s)))],
              s[static_cast<size_t>(wrap_dim(n.attr_int("dim1", 0), std::ssize(s)))]);
    return std::vector<Shape>{s};
  }
  if (op == "unsqueeze") {
    Shape s = in(0);
    s.insert(s.begin() + wrap_dim(n.attr_int("dim", 0), std::ssize(s) + 1), 1);
    return std::vector<Shape>{s};
  }
  if (op == "squeeze.dim") {
    Shape s = in(0);
    s.erase(s.begin() + wrap_dim(n.attr_int("dim", 0), std::ssize(s)));
    return std::vector<Shape>{s};
  }
  if (op == "slice.Tensor") {
    Shape s = in(0);
    s[static_cast<size_t>(wrap_dim(n.attr_int("dim", 0), std::ssize(s)))] =
        n.attr_int("end", 0) - n.attr_int("start", 0);
    return std::vector<Shape>{s};
  }
  if (op == "slice_backward") return std::vector<Shape>{n.attr_ints("input_sizes")};
  if (op == "cat") {
    Shape s = in(0);
    auto d = static_cast<size_t>(wrap_dim(n.attr_int("dim", 0), std::ssize(s)));
    for (size_t i = 1; i < n.inputs.size(); ++i) s[d] += in(i)[d];
    return std::vector<Shape>{s};
  }
  if (op == "split.Tensor") {
    Shape s = in(0);
    auto d = static_cast<size_t>(wrap_dim(n.attr_int("dim", 0), std::ssize(s)));
    int64_t size = n.attr_int("split_size", 1);
    std::vector<Shape> outs;
    for (int64_t start = 0; start < s[d]; start += size) {
      Shape p = s;
      p[d] = std::min(size, s[d] - start);
      outs.push_back(p);
    }
    return outs;
  }
  if (op == "mm") {
    if (in(0).at(1) != in(1).at(0)) return std::nullopt;
    return std::vector<Shape>{{in(0)[0], in(1)[1]}};
  }
  if (op == "bmm") {
    if (in(0).size() != 3 || in(1).size() != 3 || in(0)[0] != in(1)[0] || in(0)[2] != in(1)[1])
      return std::nullopt;
    return std::vector<Shape>{{in(0)[0], in(0)[1], in(1)[2]}};
  }
  if (op == "full") return std::vector<Shape>{n.attr_ints("size")};
  if (op == "addmm") {
    if (in(1).at(1) != in(2).at(0)) return std::nullopt;
    return std::vector<Shape>{{in(1)[0], in(2)[1]}};
  }
  if (op == "embedding") {
    Shape s = in(1);
    s.push_back(in(0).at(1));
    return std::vector<Shape>{s};
  }
  if (op == "embedding_dense_backward")
    return std::vector<Shape>{{n.attr_int("num_weights", 0), in(0).back()}};
  if (op == "nll_loss_forward") return std::vector<Shape>{{}, {}};
  if (op == "mse_loss") return std::vector<Shape>{{}};
  if (op == "arange.start")
    return std::vector<Shape>{{n.attr_int("end", 0) - n.attr_int("start", 0)}};
  if (op == "native_layer_norm") {
    Shape stat = in(0);
    stat.back() = 1;
    return std::vector<Shape>{in(0), stat, stat};
  }
  if (op == "native_layer_norm_backward") return std::vector<Shape>{in(1), in(4), in(5)};
  if (op == "_scaled_dot_product_efficient_attention") {
    Shape q = in(0);
    return std::vector<Shape>{q, {q[0], q[1], (q[2] + 31) / 32 * 32}, {}, {}};
  }
  if (op == "_scaled_dot_product_efficient_attention_backward")
    return std::vector<Shape>{in(1), in(2), in(3)};
  if (op == "_fused_adam") return std::vector<Shape>{in(0), in(2), in(3), in(4)};
  return std::nullopt;
}

std::map<Phase, int64_t> phase_counts(const Graph& g) {
  std::map<Phase, int64_t> c;
  for (const Node& n : g.nodes) ++c[n.phase];
  return c;
}

void check_training_graph(const std::string& name, const ModelOptions& opts) {
  SCOPED_TRACE(name);
  Graph g = build_model(name, opts);
  EXPECT_EQ(g.name, name);
  ASSERT_EQ(g.validate(), "");
  EXPECT_EQ(g.parameter_count(), published_parameter_count(name, opts));

  // Schedule: placeholders, then forward ops, backward ops, optimizer ops, the output node.
  int stage = 0;  // 0 placeholders, 1 forward, 2 backward, 3 optimizer, 4 output
  for (const Node& n : g.nodes) {
    int s = 0;
    if (n.kind == NodeKind::kOp) s = 1 + static_cast<int>(n.phase);
    if (n.kind == NodeKind::kOutput) s = 4;
    EXPECT_GE(s, stage) << n.name << " is out of phase order";
    stage = std::max(stage, s);
  }
  EXPECT_EQ(g.nodes.back().kind, NodeKind::kOutput);

  // Shapes: every op's outputs re-derived independently; _to_copy dtypes.
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kOp) continue;
    std::optional<std::vector<Shape>> want = expected_shapes(g, n);
    ASSERT_TRUE(want.has_value()) << n.name << " (" << n.op << "): no shape rule or bad inputs";
    ASSERT_EQ(want->size(), n.outputs.size()) << n.name;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      EXPECT_EQ(n.outputs[i].shape, (*want)[i]) << n.name << " output " << i;
    if (n.op == "_to_copy") {
      EXPECT_EQ(n.attr_string("dtype", ""), dtype_name(n.out().dtype)) << n.name;
    }
    if (n.op == "view" || n.op == "_unsafe_view") {
      EXPECT_EQ(n.out().numel(), g.meta(n.inputs[0]).numel()) << n.name;
    }
  }

  // No dead ops: every op output is read by someone.
  auto uses = g.uses();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind == NodeKind::kOutput) continue;
    std::set<int32_t> read;
    for (const Graph::Use& u : uses[static_cast<size_t>(i)]) read.insert(u.output);
    EXPECT_EQ(read.size(), n.outputs.size()) << n.name << " has unread outputs";
  }

  // Gradients and optimizer: one grad pair and one _fused_adam per parameter, 16 bytes/param
  // for bf16 weights (weight 2 + grad 2 + master/exp_avg/exp_avg_sq 12).
  int64_t params = 0, adams = 0, state_bytes = 0, weight_bytes = 0, grad_bytes = 0;
  std::set<NodeIdx> paired;
  for (const GradPair& p : g.grad_pairs) {
    EXPECT_EQ(g.meta(p.grad), g.node(p.param).out()) << g.node(p.param).name;
    EXPECT_EQ(g.node(p.grad.node).phase, Phase::kBackward) << g.node(p.param).name;
    paired.insert(p.param);
    grad_bytes += g.meta(p.grad).bytes();
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind == NodeKind::kParameter) {
      ++params;
      weight_bytes += n.out().bytes();
      EXPECT_TRUE(paired.count(i)) << n.name << " has no gradient";
      EXPECT_FALSE(n.module_path.empty()) << n.name;
    }
    if (n.kind == NodeKind::kBuffer && n.phase == Phase::kOptimizer) {
      state_bytes += n.out().bytes();
      EXPECT_EQ(n.out().dtype, DType::kF32);
    }
    if (n.op == "_fused_adam") {
      ++adams;
      const Node& p = g.node(n.inputs[0].node);
      EXPECT_EQ(p.kind, NodeKind::kParameter);
      EXPECT_EQ(g.node(n.inputs[2].node).name, p.name + ".master");
      EXPECT_EQ(g.node(n.inputs[3].node).name, p.name + ".exp_avg");
      EXPECT_EQ(g.node(n.inputs[4].node).name, p.name + ".exp_avg_sq");
      EXPECT_EQ(n.out(0).dtype, p.out().dtype);
      EXPECT_TRUE(n.has_attr("lr") && n.has_attr("beta1") && n.has_attr("beta2") &&
                  n.has_attr("eps") && n.has_attr("weight_decay"));
    }
  }
  EXPECT_EQ(static_cast<int64_t>(g.grad_pairs.size()), params);
  const int64_t count = g.parameter_count();
  if (opts.optimizer) {
    EXPECT_EQ(adams, params);
    EXPECT_EQ(state_bytes, 12 * count);
    if (!opts.dtype || *opts.dtype == DType::kBF16) {
      EXPECT_EQ(weight_bytes + grad_bytes + state_bytes, 16 * count);
    }
  } else {
    // A traced step: no optimizer phase; the output returns the loss, then every gradient.
    EXPECT_EQ(adams, 0);
    EXPECT_EQ(state_bytes, 0);
    const Node& out = g.nodes.back();
    ASSERT_EQ(out.inputs.size(), g.grad_pairs.size() + 1);
    EXPECT_EQ(out.inputs[0], *g.loss);
    for (size_t i = 0; i < g.grad_pairs.size(); ++i) EXPECT_EQ(out.inputs[i + 1], g.grad_pairs[i].grad);
    for (const Node& n : g.nodes) EXPECT_NE(n.phase, Phase::kOptimizer) << n.name;
  }

  ASSERT_TRUE(g.loss.has_value());
  EXPECT_EQ(g.meta(*g.loss).shape, Shape{});
  EXPECT_EQ(g.node(g.loss->node).phase, Phase::kForward);
}

TEST(Models, Names) {
  EXPECT_EQ(model_names(),
            (std::vector<std::string>{"gpt2", "llama3-1b", "llama3-405b", "llama3-70b", "llama3-8b", "mlp"}));
}

TEST(Models, UnknownModelAndBadOptions) {
  try {
    build_model("resnet");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown model 'resnet' (known: gpt2, llama3-1b"));
  }
  EXPECT_THROW(published_parameter_count("x", {}), std::invalid_argument);
  EXPECT_THROW(build_model("mlp", ModelOptions{0, -1, -1, {}}), std::invalid_argument);
  EXPECT_THROW(build_model("gpt2", ModelOptions{1, 2048, 1, {}}), std::invalid_argument);
}

TEST(Models, PublishedParameterCounts) {
  EXPECT_EQ(published_parameter_count("llama3-8b", {}), 8'030'261'248);
  EXPECT_EQ(published_parameter_count("llama3-70b", {}), 70'553'706'496);
  // The paper's "405B" (Llama 3 paper, table 3); untied embedding and head.
  EXPECT_EQ(published_parameter_count("llama3-405b", {}), 405'853'388'800);
  EXPECT_EQ(published_parameter_count("llama3-1b", {}), 1'498'482'688);  // untied
  EXPECT_EQ(published_parameter_count("gpt2", {}), 124'439'808);
  EXPECT_EQ(published_parameter_count("mlp", {}), 2 * (1024 * 1024 + 1024));
  EXPECT_EQ(published_parameter_count("mlp", ModelOptions{-1, -1, 5, {}}),
            5 * (1024 * 1024 + 1024));
}

TEST(Models, ResolvedDefaults) {
  ModelOptions o = resolve_model_options("llama3-8b");
  EXPECT_EQ(o.batch, 8);
  EXPECT_EQ(o.seq, 2048);
  EXPECT_EQ(o.layers, 32);
  EXPECT_EQ(o.dtype, DType::kBF16);
  EXPECT_EQ(resolve_model_options("gpt2").seq, 1024);
  EXPECT_EQ(resolve_model_options("mlp").layers, 2);
}

// docs/tracer.md: the 32-layer LLaMA-3 8B step traced by python/autoshard-trace on PyTorch
// 1.13 (explicit softmax attention, no optimizer) has 9,888 nodes.
constexpr int64_t kTracedLlama8bNodes = 9888;

ModelOptions llama_variant(AttentionImpl attention, bool optimizer) {
  ModelOptions o;
  o.attention = attention;
  o.optimizer = optimizer;
  return o;
}

TEST(Models, Llama8bFullGraph) {
  check_training_graph("llama3-8b", {});
  Graph g = build_model("llama3-8b");
  EXPECT_EQ(g.parameter_count(), 8'030'261'248);
  auto c = phase_counts(g);
  int64_t non_opt = c[Phase::kForward] + c[Phase::kBackward];
  // Same decomposition as the trace except the fused attention (43 nodes per layer fewer).
  EXPECT_EQ(non_opt, 8511);
  EXPECT_GE(non_opt, kTracedLlama8bNodes * 85 / 100);
  EXPECT_EQ(c[Phase::kOptimizer], 4 * 291 + 1);  // 291 params: 3 buffers + 1 adam each, + output
  // Spot checks of the traced structure.
  const Node& mm = g.node(*g.find("mm"));
  EXPECT_EQ(mm.module_path, "layers.0.attention.wq");
  EXPECT_EQ(g.meta(mm.inputs[0]).shape, (Shape{8 * 2048, 4096}));
  const Node& wk = g.node(*g.find("layers.0.attention.wk.weight"));
  EXPECT_EQ(wk.out().shape, (Shape{1024, 4096}));
  const Node& sdpa = g.node(*g.find("_scaled_dot_product_efficient_attention"));
  EXPECT_EQ(sdpa.out(0).shape, (Shape{8, 32, 2048, 128}));
  EXPECT_EQ(sdpa.out(1).dtype, DType::kF32);
  const Node& nll = g.node(g.loss->node);
  EXPECT_EQ(nll.op, "nll_loss_forward");
  EXPECT_EQ(g.meta(nll.inputs[0]).shape, (Shape{8 * 2048, 128256}));
  const Node& cos = g.node(*g.find("rope_cos"));
  EXPECT_EQ(cos.out(), (TensorMeta{{2048, 128}, DType::kF32}));
}

TEST(Models, Llama8bMathAttentionMatchesTraceSize) {
  // Math attention without optimizer is the traced program: exactly the traced node count.
  Graph g = build_model("llama3-8b", llama_variant(AttentionImpl::kMath, false));
  EXPECT_EQ(g.size(), kTracedLlama8bNodes);
  EXPECT_EQ(g.parameter_count(), 8'030'261'248);
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["bmm"], 32 * 6);
  EXPECT_EQ(ops["_softmax"], 32);
  EXPECT_EQ(ops["_fused_adam"], 0);
  EXPECT_EQ(ops["_scaled_dot_product_efficient_attention"], 0);
  // Default SDPA without optimizer: within 15% of the traced count (fused attention only).
  Graph s = build_model("llama3-8b", llama_variant(AttentionImpl::kSdpa, false));
  EXPECT_EQ(kTracedLlama8bNodes - s.size(), 32 * 43);
}

TEST(Models, LlamaOverrides) {
  // The traced fixture's config (tests/fixtures/llama2l): 1,705,216 parameters.
  ModelOptions o{2, 64, 2, DType::kBF16};
  o.hidden = 256;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 512;
  o.vocab = 1024;
  EXPECT_EQ(published_parameter_count("llama3-8b", o), 1'705'216);
  ModelOptions r = resolve_model_options("llama3-8b", o);
  EXPECT_EQ(r.hidden, 256);
  EXPECT_EQ(r.attention, AttentionImpl::kSdpa);
  for (AttentionImpl a : {AttentionImpl::kSdpa, AttentionImpl::kMath})
    for (bool opt : {true, false}) {
      o.attention = a;
      o.optimizer = opt;
      check_training_graph("llama3-8b", o);
      EXPECT_EQ(build_model("llama3-8b", o).parameter_count(), 1'705'216);
    }
  // No GQA (kv_heads == heads): no repeat_kv ops.
  ModelOptions mha = o;
  mha.kv_heads = 4;
  check_training_graph("llama3-1b", mha);
  EXPECT_EQ(resolve_model_options("gpt2").hidden, -1);

  auto bad = [](std::string_view model, ModelOptions opts, const char* msg) {
    try {
      build_model(model, opts);
      ADD_FAILURE() << "expected std::invalid_argument: " << msg;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(msg));
    }
  };
  ModelOptions x;
  x.hidden = 100;
  bad("gpt2", x, "model 'gpt2': hidden can only be set for llama models");
  bad("llama3-8b", x, "heads (32) must divide hidden (100)");
  x = {};
  x.kv_heads = 0;
  bad("llama3-8b", x, "kv_heads must be positive");
  x = {};
  x.kv_heads = 5;
  bad("llama3-8b", x, "kv_heads (5) must divide heads");
  x = {};
  x.attention = AttentionImpl::kMath;
  bad("mlp", x, "attention can only be set for llama models");
}

TEST(Models, PerLayerGranularity) {
  // Layer-count slope: the ops one LLaMA layer adds (fwd + bwd + its 9 parameters).
  auto non_opt = [](int64_t layers, AttentionImpl a) {
    ModelOptions o{1, 128, layers, {}};
    o.attention = a;
    auto c = phase_counts(build_model("llama3-8b", o));
    return c[Phase::kForward] + c[Phase::kBackward];
  };
  for (AttentionImpl a : {AttentionImpl::kSdpa, AttentionImpl::kMath}) {
    int64_t per_layer = non_opt(3, a) - non_opt(2, a);
    EXPECT_EQ(non_opt(2, a) - non_opt(1, a), per_layer);
    EXPECT_EQ(per_layer, a == AttentionImpl::kMath ? 307 : 264);  // incl. 9 parameters
  }
}

TEST(Models, OtherModelsFullGraphs) {
  check_training_graph("llama3-1b", {});
  check_training_graph("gpt2", {});
  check_training_graph("mlp", {});
  check_training_graph("mlp", ModelOptions{32, -1, 4, DType::kF32});
  check_training_graph("llama3-70b", ModelOptions{2, 256, 2, {}});
  check_training_graph("llama3-1b", ModelOptions{2, 100, 2, DType::kF32});
  check_training_graph("gpt2", ModelOptions{4, 512, 3, DType::kF32});
  EXPECT_EQ(build_model("gpt2").parameter_count(), 124'439'808);
}

TEST(Models, MlpStructure) {
  Graph g = build_model("mlp", ModelOptions{16, -1, 3, {}});
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  EXPECT_EQ(ops["addmm"], 3);
  EXPECT_EQ(ops["relu"], 2);
  EXPECT_EQ(ops["threshold_backward"], 2);
  EXPECT_EQ(ops["mse_loss"], 1);
  EXPECT_EQ(ops["mm"], 2 * 3 - 1);  // no input gradient for the first layer
}

TEST(Models, CastsOnlyWhenDtypesDiffer) {
  auto casts = [](DType dt) {
    int n = 0;
    for (const Node& node : build_model("llama3-1b", ModelOptions{1, 64, 1, dt}).nodes)
      n += node.op == "_to_copy";
    return n;
  };
  EXPECT_EQ(casts(DType::kF32), 0);
  // bf16: 4 per RMSNorm (2 fwd + 2 bwd) for 2 layer norms + the final norm, 2 for the logits,
  // 4 per layer for the f32 rotary tables (cos and sin, for q and for k).
  EXPECT_EQ(casts(DType::kBF16), 4 * 3 + 2 + 4);
}

TEST(Models, Llama70bBuildsQuickly) {
  auto start = std::chrono::steady_clock::now();
  Graph g = build_model("llama3-70b");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(g.parameter_count(), 70'553'706'496);
  EXPECT_EQ(g.validate(), "");
#ifdef NDEBUG
  EXPECT_LT(secs, 0.5);
#else
  EXPECT_LT(secs, 2.0);  // unoptimized builds
#endif
}

TEST(Models, Deterministic) {
  Graph a = build_model("gpt2", ModelOptions{2, 64, 2, {}});
  Graph b = build_model("gpt2", ModelOptions{2, 64, 2, {}});
  ASSERT_EQ(a.size(), b.size());
  for (NodeIdx i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.node(i).name, b.node(i).name);
    EXPECT_EQ(a.node(i).inputs, b.node(i).inputs);
  }
}

TEST(Models, OpNamesCoverEveryModel) {
  std::vector<std::string> ops = model_op_names();
  std::set<std::string> set(ops.begin(), ops.end());
  for (const char* op : {"mm", "addmm", "_fused_adam", "embedding", "embedding_dense_backward",
                         "_scaled_dot_product_efficient_attention_backward", "sigmoid",
                         "bmm", "_softmax_backward_data", "fill_.Scalar", "sub_.Tensor",
                         "native_layer_norm_backward", "nll_loss_backward", "mse_loss_backward",
                         "slice_backward", "sum.dim_IntList", "_unsafe_view", "split.Tensor"})
    EXPECT_TRUE(set.count(op)) << op;
  for (const std::string& name : model_names()) {
    Graph g = build_model(name, ModelOptions{2, 64, 1, {}});
    for (const Node& n : g.nodes)
      if (n.kind == NodeKind::kOp) {
        EXPECT_TRUE(set.count(n.op)) << n.op;
      }
  }
}

}  // namespace
}  // namespace autoshard

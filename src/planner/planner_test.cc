// Golden tests of the whole planner: graph + mesh -> plan, with the exact placements the
// literature predicts (Megatron-LM, Alpa, ZeRO; ../shared/reference/cost-model.md §5) and the
// objectives recomputed from the cost functions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cost/collective.h"
#include "cost/compute.h"
#include "mesh/hardware.h"
#include "models/builder.h"
#include "models/layers.h"
#include "models/models.h"
#include "planner/parallelism.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

Hardware h100() { return *hardware_preset("h100"); }
Mesh mesh_1d(int64_t n) { return Mesh({n}, {"d"}, h100()); }

/// An L-layer MLP training step without an optimizer phase (parameter state is then
/// accounted with PlannerOptions::optimizer): x [B, H] -> (t, mm, relu) x L -> mse_loss
/// against `target`, and autograd's backward (threshold_backward, mm for the weight and input
/// gradients; the first layer needs no input gradient).  Weights are [out, in] like
/// nn.Linear, without bias; every op is in module "layers.<i>" (or "loss").
Graph mlp_graph(int64_t layers, int64_t batch, int64_t hidden) {
  GraphBuilder b("mlp_test");
  const DType dt = DType::kBF16;
  TensorRef x = b.input("x", {{batch, hidden}, dt});
  TensorRef target = b.input("target", {{batch, hidden}, dt});
  std::vector<TensorRef> w;
  for (int64_t i = 0; i < layers; ++i) {
    std::string path = "layers." + std::to_string(i);
    w.push_back(b.parameter(path + ".weight", path, {{hidden, hidden}, dt}));
  }
  b.set_phase(Phase::kForward);
  std::vector<LinearSaved> saved(static_cast<size_t>(layers));
  std::vector<TensorRef> relu_out(static_cast<size_t>(layers));
  TensorRef y = x;
  for (int64_t i = 0; i < layers; ++i) {
    b.set_module("layers." + std::to_string(i));
    y = linear_forward(b, y, w[static_cast<size_t>(i)], std::nullopt, &saved[static_cast<size_t>(i)]);
    if (i + 1 < layers) {
      y = b.unary("relu", y);
      relu_out[static_cast<size_t>(i)] = y;
    }
  }
  b.set_module("loss");
  // Both loss ops read the network output through one alias: in Alpa's formulation every
  // tensor use pays its own redistribution, so two direct readers of the row layer's Partial
  // output would each pay an all-reduce (real executors reduce once and reuse the result).
  y = b.unary("detach", y);
  TensorRef loss =
      b.op1("mse_loss", {y, target}, Attrs{{"reduction", int64_t{1}}}, TensorMeta{{}, dt});
  b.set_phase(Phase::kBackward);
  TensorRef g = b.op1("mse_loss_backward", {b.unary("ones_like", loss), y, target},
                      Attrs{{"reduction", int64_t{1}}}, b.meta(y));
  std::vector<TensorRef> grads(static_cast<size_t>(layers));
  for (int64_t i = layers; i-- > 0;) {
    b.set_module("layers." + std::to_string(i));
    if (i + 1 < layers)
      g = b.pointwise_backward("threshold_backward", g, relu_out[static_cast<size_t>(i)],
                               Attrs{{"threshold", 0.0}});
    LinearGrads lg = linear_backward(b, saved[static_cast<size_t>(i)], g, i > 0);
    grads[static_cast<size_t>(i)] = lg.weight;
    if (i > 0) g = *lg.input;
  }
  Graph& gr = b.graph();
  Node out;
  out.name = "output";
  out.kind = NodeKind::kOutput;
  out.phase = Phase::kBackward;
  out.inputs.push_back(loss);
  for (int64_t i = 0; i < layers; ++i) {
    gr.grad_pairs.push_back({w[static_cast<size_t>(i)].node, grads[static_cast<size_t>(i)]});
    out.inputs.push_back(grads[static_cast<size_t>(i)]);
  }
  gr.loss = loss;
  gr.add(std::move(out));
  return b.finish();
}

NodeIdx node(const Graph& g, const std::string& name) {
  auto i = g.find(name);
  EXPECT_TRUE(i.has_value()) << name;
  return i.value_or(0);
}

/// Output placements of a node in a plan, e.g. "S(0)R".
std::string placement(const Graph& g, const Plan& p, const std::string& name) {
  const auto& np = p.nodes.at(static_cast<size_t>(node(g, name)));
  if (!np) return "?";
  return np->chosen.outputs.at(0).to_string();
}

std::vector<std::string> parameter_names(const Graph& g) {
  std::vector<std::string> r;
  for (const Node& n : g.nodes)
    if (n.kind == NodeKind::kParameter) r.push_back(n.name);
  return r;
}

/// Sum of compute_time_us over the op nodes at the local shapes of the chosen strategies.
double recomputed_compute_us(const Graph& g, const Mesh& mesh, const Plan& p) {
  double t = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = p.nodes[static_cast<size_t>(i)];
    if (!np || g.node(i).kind != NodeKind::kOp) continue;
    std::vector<TensorMeta> in, out;
    for (const ShardingSpec& s : np->chosen.inputs) in.push_back({s.local_shape(mesh), s.meta.dtype});
    for (const ShardingSpec& s : np->chosen.outputs) out.push_back({s.local_shape(mesh), s.meta.dtype});
    t += compute_time_us(g.node(i), in, out, mesh.hardware());
  }
  return t;
}

/// Parameter bytes one device holds (weights only), and the unsharded total.
std::pair<int64_t, int64_t> parameter_bytes(const Graph& g, const Mesh& mesh, const Plan& p) {
  int64_t local = 0, total = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (g.node(i).kind != NodeKind::kParameter) continue;
    local += p.nodes[static_cast<size_t>(i)]->chosen.outputs[0].local_bytes(mesh);
    total += g.node(i).out().bytes();
  }
  return {local, total};
}

void expect_rel_near(double actual, double expected, double rel = 1e-6) {
  EXPECT_NEAR(actual, expected, rel * std::max(1.0, std::abs(expected)));
}

// ---------------------------------------------------------------------------------------------
// 1. Megatron / Alpa: an L-layer MLP with model parallelism forced.
//
// Batch 2 on a mesh of 4 cannot be batch-sharded (a shard must hold at least one row), so the
// only way to split the work is to split the weights.  Hidden 8192 makes every mm
// memory-bound on its weight (128 MiB in bf16: 57 us replicated, 14 us split 4 ways) while an
// all-reduce of the [2, 8192] activations costs ~10 us, so splitting pays.  The optimum is
// Megatron's alternation (Alpa's n-layer MLP test): odd layers column-parallel (weight [out,
// in] S(0): the output comes out S(1) and relu runs on the shards), even layers row-parallel
// (weight S(1), input S(1): the output is Partial and is all-reduced).  Communication, L = 4:
//   forward: one all-reduce after each row layer (layers 2 and 4; the loss needs the full
//            output) -> L/2;
//   backward: the row layers' input gradients come out S(1) locally, the column layers'
//            input gradients are Partial and need an all-reduce, except the first layer's,
//            which is never computed -> L/2 - 1;
// total L - 1 all-reduces of batch x hidden elements, everything else local.  Any
// alternative (e.g. all column-parallel) needs an all-gather per layer boundary in the
// forward plus a reduce-scatter in the backward, more than one all-reduce.
TEST(PlannerGolden, MlpModelParallelIsMegatronAlternation) {
  const int64_t L = 4, B = 2, H = 8192;
  Graph g = mlp_graph(L, B, H);
  Mesh mesh = mesh_1d(4);
  PlannerOptions po;
  // Alternating layers are not identical decisions: tying layer i to layer i + 1 (what the
  // repeated-layer detection does, period one layer) forbids the alternation (see
  // MlpLayerTiesForbidTheAlternation).
  po.cluster = false;
  ShardingOptimizer opt(g, mesh, po);
  Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_TRUE(p.checked);
  EXPECT_TRUE(p.warnings.empty());
  for (int64_t i = 0; i < L; ++i)
    EXPECT_EQ(placement(g, p, "layers." + std::to_string(i) + ".weight"), i % 2 == 0 ? "S(0)" : "S(1)")
        << "layer " << i;
  EXPECT_EQ(placement(g, p, "x"), "R");
  EXPECT_EQ(parallelism_on_dim(g, mesh, p, node(g, "layers.0.weight"), 0), "TP column");
  EXPECT_EQ(parallelism_on_dim(g, mesh, p, node(g, "layers.1.weight"), 0), "TP row");

  // Closed form: (L - 1) all-reduces of B x H bf16 elements plus the compute of every op at
  // its local shape.
  const double all_reduce = all_reduce_us(static_cast<double>(B * H * 2), mesh, 0);
  expect_rel_near(p.comm_us, (L - 1) * all_reduce);
  expect_rel_near(p.compute_us, recomputed_compute_us(g, mesh, p));
  expect_rel_near(p.objective_us, recomputed_compute_us(g, mesh, p) + (L - 1) * all_reduce);
  // The weight mms run on a quarter of the weight (memory-bound): 2L forward/backward mms of
  // [H, H/4] weight shards plus L - 1 input-gradient mms.
  const Node& mm0 = g.node(node(g, "mm"));
  const double mm_col = compute_time_us(mm0, {{{B, H}, DType::kBF16}, {{H, H / 4}, DType::kBF16}},
                                        {{{B, H / 4}, DType::kBF16}}, mesh.hardware());
  EXPECT_LT(mm_col, compute_time_us(mm0, {{{B, H}, DType::kBF16}, {{H, H}, DType::kBF16}},
                                    {{{B, H}, DType::kBF16}}, mesh.hardware()) / 3);
  std::cout << "MLP L=" << L << ": objective " << p.objective_us << " us (compute " << p.compute_us
            << ", comm " << p.comm_us << " = " << L - 1 << " x " << all_reduce << ")\n";
}

// ---------------------------------------------------------------------------------------------
// 2. A LLaMA block on a 2-D mesh (dp, tp) = 2 x 4 H100 in one node.
//
// Configuration: LLaMA-2 7B's block (hidden 4096, 32 heads with as many KV heads, SwiGLU
// 11008, vocab 32000), 1 layer, batch 4 x 2048 tokens, mixed-precision AdamW in the graph.
// Why Megatron TP on tp: per device and layer, tensor parallelism moves ~4 all-reduces of the
// activations (b s h = 4 x 2048 x 4096 bf16 = 64 MiB, halved by dp), while FSDP / DP on
// 4 or 8 devices would move ~2x the 400 MiB of weights: with 8K tokens the activations are
// the smaller volume, so the weights are split, not the batch, on tp.  The batch is split on
// dp (halving the activation all-reduces).  On dp the weights are sharded too (ZeRO / FSDP on
// the other weight dim): for n = 2 an all-gather plus a reduce-scatter move the same bytes as
// DP's gradient all-reduce, and the mixed-precision Adam step then runs on half the state
// (~340 us saved), so FSDP on dp beats plain DP (checked below against the pinned plan).
// With grouped-query attention (8 KV heads) wk / wv are only [1024, 4096] and the roofline
// prefers row-splitting them by a few microseconds; with MHA every projection is alike.
TEST(PlannerGolden, LlamaBlockIsFsdpOnDpAndMegatronOnTp) {
  ModelOptions mo;
  mo.layers = 1;
  mo.batch = 4;
  mo.seq = 2048;
  mo.hidden = 4096;
  mo.heads = 32;
  mo.kv_heads = 32;
  mo.ffn = 11008;
  mo.vocab = 32000;
  Graph g = build_model("llama3-8b", mo);
  Mesh mesh({2, 4}, {"dp", "tp"}, h100());
  ShardingOptimizer opt(g, mesh);
  Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_TRUE(p.checked);
  const std::string pre = "layers.0.";
  const std::vector<std::string> column = {"attention.wq", "attention.wk", "attention.wv",
                                           "feed_forward.w1", "feed_forward.w3"};
  const std::vector<std::string> row = {"attention.wo", "feed_forward.w2"};
  for (const std::string& w : column) {
    NodeIdx i = node(g, pre + w + ".weight");
    EXPECT_EQ(placement(g, p, pre + w + ".weight"), "S(1)S(0)") << w;
    EXPECT_EQ(parallelism_on_dim(g, mesh, p, i, 0), "FSDP") << w;
    EXPECT_EQ(parallelism_on_dim(g, mesh, p, i, 1), "TP column") << w;
  }
  for (const std::string& w : row) {
    NodeIdx i = node(g, pre + w + ".weight");
    EXPECT_EQ(placement(g, p, pre + w + ".weight"), "S(0)S(1)") << w;
    EXPECT_EQ(parallelism_on_dim(g, mesh, p, i, 0), "FSDP") << w;
    EXPECT_EQ(parallelism_on_dim(g, mesh, p, i, 1), "TP row") << w;
  }
  // The batch is split on dp.
  // (Slicing an input is free, so the input itself may stay replicated: look at its first use.)
  // (The embedding output may be hidden-split: look at the attention, which runs on the batch
  // split on dp and the heads split on tp.)
  const auto& attn = p.nodes[static_cast<size_t>(node(g, "_scaled_dot_product_efficient_attention"))];
  EXPECT_EQ(attn->chosen.inputs[0].to_string(), "S(0)S(1)");
  expect_rel_near(p.compute_us, recomputed_compute_us(g, mesh, p));
  std::cout << "LLaMA block: objective " << p.objective_us << " us (compute " << p.compute_us
            << ", comm " << p.comm_us << "), peak " << p.peak_memory_bytes << " B\n";

  // Plain DP on dp (replicated weights) with the same Megatron TP costs more: the Adam step
  // runs on twice the state.
  for (const std::string& w : column) opt.pin(pre + w + ".weight", parse_placements("RS(0)"));
  for (const std::string& w : row) opt.pin(pre + w + ".weight", parse_placements("RS(1)"));
  Plan dp = opt.get_solution();
  ASSERT_TRUE(dp.has_solution);
  EXPECT_GT(dp.objective_us, p.objective_us);
  std::cout << "  with DP instead of FSDP on dp: " << dp.objective_us << " us\n";
}

// ---------------------------------------------------------------------------------------------
// 3. Data parallel when memory is ample; ZeRO-3 / FSDP when it is not; infeasible below the
// smallest footprint.  MLP with 2 layers, hidden 4096, batch 8192 on 8 devices: each mm is
// compute-bound (275 GFLOP), so the batch is split 8 ways; the gradient all-reduce (32 MiB per
// weight) is cheaper than any activation traffic ([8192, 4096] = 64 MiB per tensor).  DP's
// all-reduce costs one ring base latency less than FSDP's all-gather + reduce-scatter, so
// replicated weights win when they fit.  The parameter state (mixed-precision Adam, 16 B per
// element: 512 MiB replicated) dominates the footprint, so a limit below DP's peak makes the
// weights sharded.
struct MemoryCase {
  Graph g = mlp_graph(2, 8192, 4096);
  Mesh mesh = mesh_1d(8);
  PlannerOptions options() const {
    PlannerOptions po;
    po.cluster = false;
    po.memory_limit_bytes = 0;
    return po;
  }
};

TEST(PlannerGolden, DataParallelWhenMemoryIsAmple) {
  MemoryCase c;
  PlannerOptions po = c.options();
  ShardingOptimizer opt(c.g, c.mesh, po);
  // The data loader hands every device its own slice of the batch (as with DDP / FSDP);
  // without this, a replicated input is free and the first layer could split its weight
  // instead at no communication cost.
  opt.add_input_constraints({parse_placements("S(0)"), parse_placements("S(0)")});
  Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  for (const std::string& w : parameter_names(c.g)) {
    EXPECT_EQ(placement(c.g, p, w), "R") << w;
    EXPECT_EQ(parallelism_on_dim(c.g, c.mesh, p, node(c.g, w), 0), "DP") << w;
  }
  EXPECT_EQ(placement(c.g, p, "x"), "S(0)");
  std::cout << "DP: objective " << p.objective_us << " us, peak " << p.peak_memory_bytes << " B\n";
}

TEST(PlannerGolden, ParametersAreShardedUnderAMemoryLimit) {
  MemoryCase c;
  PlannerOptions po = c.options();
  ShardingOptimizer free_opt(c.g, c.mesh, po);
  free_opt.add_input_constraints({parse_placements("S(0)"), parse_placements("S(0)")});
  Plan dp = free_opt.get_solution();
  ASSERT_TRUE(dp.has_solution);
  // Half of DP's footprint: the replicated parameter state (512 MiB) cannot stay.
  po.memory_limit_bytes = dp.peak_memory_bytes / 2;
  ShardingOptimizer opt(c.g, c.mesh, po);
  // The data loader hands every device its own slice of the batch (as with DDP / FSDP);
  // without this, a replicated input is free and the first layer could split its weight
  // instead at no communication cost.
  opt.add_input_constraints({parse_placements("S(0)"), parse_placements("S(0)")});
  Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kOptimal);
  EXPECT_TRUE(p.checked);
  EXPECT_LE(p.peak_memory_bytes, po.memory_limit_bytes);
  EXPECT_GE(p.objective_us, dp.objective_us);
  for (const std::string& w : parameter_names(c.g)) {
    const std::string pl = placement(c.g, p, w);
    EXPECT_TRUE(pl == "S(0)" || pl == "S(1)") << w << " " << pl;
    EXPECT_EQ(parallelism_on_dim(c.g, c.mesh, p, node(c.g, w), 0), "FSDP") << w;
  }
  EXPECT_EQ(placement(c.g, p, "x"), "S(0)");
  std::cout << "FSDP under " << po.memory_limit_bytes << " B: objective " << p.objective_us
            << " us, peak " << p.peak_memory_bytes << " B\n";

  // Below the smallest achievable footprint: no plan, and the planner says how much is needed.
  po.memory_limit_bytes = 1 << 20;
  ShardingOptimizer tiny(c.g, c.mesh, po);
  tiny.add_input_constraints({parse_placements("S(0)"), parse_placements("S(0)")});
  Plan none = tiny.get_solution();
  EXPECT_FALSE(none.has_solution);
  EXPECT_EQ(none.status, SolveStatus::kInfeasible);
  EXPECT_GT(none.min_peak_memory_bytes, po.memory_limit_bytes);
  EXPECT_LE(none.min_peak_memory_bytes, p.peak_memory_bytes);
}

}  // namespace
}  // namespace autoshard

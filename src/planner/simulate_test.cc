// Step simulation on hand-made graphs whose overlap is known exactly: the expected times are
// recomputed from the cost functions, never typed in.
#include "planner/simulate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cost/compute.h"
#include "cost/redistribute.h"
#include "mesh/hardware.h"
#include "models/builder.h"
#include "models/models.h"
#include "planner/recipes.h"
#include "planner/recompute.h"
#include "planner/recompute_block.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

constexpr int64_t kN = 4096;  // mm [kN, kN] x [kN, kN] in bf16: ~200 us on an H100
const DType kDt = DType::kBF16;

Mesh mesh_1d() { return Mesh({2}, {"dp"}, *hardware_preset("h100")); }

ShardingSpec spec(const std::string& p, TensorMeta meta = {}) {
  return ShardingSpec{parse_placements(p), std::move(meta)};
}

/// Wanted strategies by node name: output placements then input placements.
using Choices = std::map<std::string, std::vector<std::string>>;

/// Evaluates the plan that gives every named node the listed placements (all nodes must be
/// listed; match_strategies compares placements only).
Plan plan_with(ShardingOptimizer& opt, const Choices& c) {
  const Graph& g = opt.graph();
  std::vector<std::optional<Strategy>> wanted(static_cast<size_t>(g.size()));
  for (const auto& [name, ps] : c) {
    Strategy s;
    s.outputs.push_back(spec(ps.at(0)));
    for (size_t k = 1; k < ps.size(); ++k) s.inputs.push_back(spec(ps[k]));
    wanted[static_cast<size_t>(*g.find(name))] = s;
  }
  auto choice = opt.match_strategies(wanted);
  for (size_t v = 0; v < choice.size(); ++v)
    EXPECT_GE(choice[v], 0) << opt.problem().problem.nodes[v].name;
  return opt.evaluate(choice);
}

void add_output(Graph& g, std::vector<TensorRef> outputs) {
  Node out;
  out.name = "output";
  out.kind = NodeKind::kOutput;
  out.inputs = std::move(outputs);
  g.add(std::move(out));
}

void add_output(Graph& g, TensorRef r) { add_output(g, std::vector<TensorRef>{r}); }

/// x -> A = mm(x, w0) in layers.0 -> B = mm(A, w1) in layers.1 -> output.
Graph two_layer_chain() {
  GraphBuilder b("chain");
  TensorRef x = b.input("x", {{kN, kN}, kDt});
  TensorRef w0 = b.parameter("w0", "layers.0", {{kN, kN}, kDt});
  TensorRef w1 = b.parameter("w1", "layers.1", {{kN, kN}, kDt});
  b.set_module("layers.0");
  TensorRef a = b.mm(x, w0);
  b.set_module("layers.1");
  TensorRef y = b.mm(a, w1);
  Graph g = b.finish();
  add_output(g, y);
  return g;
}

double gather_us(const std::string& from, const TensorMeta& m, const Mesh& mesh) {
  return redistribute_cost_us(spec(from, m), spec("R", m), mesh);
}

TEST(LayerKey, ModulePaths) {
  EXPECT_EQ(layer_key("layers.3.attention.wq"), "layers.3");
  EXPECT_EQ(layer_key("transformer.h.11.mlp"), "transformer.h.11");
  EXPECT_EQ(layer_key("output"), "output");
  EXPECT_EQ(layer_key("tok_embeddings.x"), "tok_embeddings");
  EXPECT_EQ(layer_key(""), "");
}

TEST(Simulate, PrefetchedParameterGatherHidesBehindThePreviousLayer) {
  Graph g = two_layer_chain();
  ShardingOptimizer opt(g, mesh_1d());
  // w1 is stored sharded (FSDP) and gathered for layer 1; nothing else moves.
  Plan plan = plan_with(opt, {{"x", {"R"}}, {"w0", {"R"}}, {"w1", {"S(0)"}},
                              {"mm", {"R", "R", "R"}}, {"mm_1", {"R", "R", "R"}}});
  const double comm = gather_us("S(0)", {{kN, kN}, kDt}, opt.mesh());
  ASSERT_GT(comm, 0);
  ASSERT_EQ(plan.comm_us, comm);
  ASSERT_GT(plan.nodes[static_cast<size_t>(*g.find("mm"))]->compute_us, comm);  // compute-bound

  StepSimulation sim = simulate_step(opt, plan);
  EXPECT_EQ(sim.num_layers, 2);
  EXPECT_DOUBLE_EQ(sim.additive_us, plan.compute_us + comm);
  EXPECT_DOUBLE_EQ(sim.compute_us, plan.compute_us);
  EXPECT_DOUBLE_EQ(sim.comm_us, comm);
  EXPECT_DOUBLE_EQ(sim.step_us, plan.compute_us);  // fully hidden
  EXPECT_DOUBLE_EQ(sim.exposed_comm_us, 0);
  ASSERT_EQ(sim.streams.size(), 2u);
  EXPECT_EQ(sim.stream_names[1], "comm dp");
  ASSERT_EQ(sim.streams[1].size(), 1u);
  const SimEvent& e = sim.streams[1][0];
  EXPECT_EQ(e.start_us, 0);  // issued when layer 0 starts
  EXPECT_TRUE(e.prefetched);
  EXPECT_EQ(e.collective, Collective::kAllGather);
  EXPECT_EQ(g.node(e.node).name, "mm_1");
  ASSERT_EQ(sim.streams[0].size(), 2u);
  // The prefetched buffer (w1 gathered) adds to the memory of the plan while it lives.
  const int64_t w = kN * kN * 2;
  EXPECT_EQ(sim.prefetch_peak_bytes, w);
  EXPECT_GT(sim.peak_memory_bytes, plan.peak_memory_bytes);

  // Without prefetch the gather waits for layer 1 and is exposed entirely.
  StepSimulation late = simulate_step(opt, plan, SimulationOptions{0});
  EXPECT_DOUBLE_EQ(late.step_us, plan.compute_us + comm);
  EXPECT_DOUBLE_EQ(late.exposed_comm_us, comm);
  EXPECT_FALSE(late.streams[1][0].prefetched);
}

// A weight read through a view (the `t` a linear layer's matmul reads) is still the weight:
// its gather is prefetched one layer ahead, not issued when the view op is reached.
TEST(Simulate, GatherOfAWeightViewIsPrefetched) {
  GraphBuilder b("view");
  TensorRef x = b.input("x", {{kN, kN}, kDt});
  TensorRef w0 = b.parameter("w0", "layers.0", {{kN, kN}, kDt});
  TensorRef w1 = b.parameter("w1", "layers.1", {{kN, kN}, kDt});
  b.set_module("layers.0");
  TensorRef a = b.mm(x, w0);
  b.set_module("layers.1");
  TensorRef y = b.mm(a, b.t(w1));
  Graph g = b.finish();
  add_output(g, y);
  ShardingOptimizer opt(g, mesh_1d());
  // w1 stored sharded (FSDP); its transpose is sharded on dim 1 and gathered for mm_1.
  Plan plan = plan_with(opt, {{"x", {"R"}}, {"w0", {"R"}}, {"w1", {"S(0)"}}, {"t", {"S(1)", "S(0)"}},
                              {"mm", {"R", "R", "R"}}, {"mm_1", {"R", "R", "R"}}});
  const double comm = gather_us("S(1)", {{kN, kN}, kDt}, opt.mesh());
  ASSERT_GT(comm, 0);
  ASSERT_DOUBLE_EQ(plan.comm_us, comm);
  ASSERT_GT(plan.nodes[static_cast<size_t>(*g.find("mm"))]->compute_us, comm);
  StepSimulation sim = simulate_step(opt, plan);
  ASSERT_EQ(sim.streams[1].size(), 1u);
  EXPECT_EQ(sim.streams[1][0].start_us, 0);  // with layer 0, not after the view in layer 1
  EXPECT_TRUE(sim.streams[1][0].prefetched);
  EXPECT_DOUBLE_EQ(sim.step_us, plan.compute_us);  // hidden behind layer 0
  // Without prefetch it waits for layer 1 and is exposed, as a placeholder's gather is.
  StepSimulation late = simulate_step(opt, plan, SimulationOptions{0});
  EXPECT_DOUBLE_EQ(late.step_us, plan.compute_us + comm);
}

// Two weights of layer 1 gathered the same way one layer ahead share a bucket: the second
// no longer pays the all-gather's fixed latency (what one merged collective costs).
TEST(Simulate, ABucketPaysTheLatencyOnce) {
  GraphBuilder b("bucket");
  TensorRef x = b.input("x", {{kN, kN}, kDt});
  TensorRef w0 = b.parameter("w0", "layers.0", {{kN, kN}, kDt});
  TensorRef w1 = b.parameter("w1", "layers.1", {{kN, kN}, kDt});
  TensorRef w2 = b.parameter("w2", "layers.1", {{kN, kN}, kDt});
  b.set_module("layers.0");
  TensorRef a = b.mm(x, w0);
  b.set_module("layers.1");
  TensorRef y = b.mm(b.mm(a, w1), w2);
  Graph g = b.finish();
  add_output(g, y);
  ShardingOptimizer opt(g, mesh_1d());
  Plan plan = plan_with(opt, {{"x", {"R"}}, {"w0", {"R"}}, {"w1", {"S(0)"}}, {"w2", {"S(0)"}},
                              {"mm", {"R", "R", "R"}}, {"mm_1", {"R", "R", "R"}},
                              {"mm_2", {"R", "R", "R"}}});
  const double comm = gather_us("S(0)", {{kN, kN}, kDt}, opt.mesh());
  const double fixed = collective_time_us(Collective::kAllGather, 0.0, opt.mesh(), 0);
  ASSERT_GT(fixed, 0);
  EXPECT_DOUBLE_EQ(simulate_step(opt, plan, {1, Bucketing::kNone}).comm_us, 2 * comm);
  const StepSimulation sim = simulate_step(opt, plan);  // kLayer by default
  EXPECT_DOUBLE_EQ(sim.comm_us, 2 * comm - fixed);
  ASSERT_EQ(sim.streams[1].size(), 2u);
  EXPECT_TRUE(sim.streams[1][0].prefetched && sim.streams[1][1].prefetched);
  // Issued at different layers (no prefetch: each at its own consumer) they still share
  // one: both consumers are in layer 1.
  EXPECT_DOUBLE_EQ(simulate_step(opt, plan, {0}).comm_us, 2 * comm - fixed);
}

TEST(Simulate, ActivationRedistributionOnTheCriticalPathIsExposed) {
  Graph g = two_layer_chain();
  ShardingOptimizer opt(g, mesh_1d());
  // Layer 0 is batch-sharded; layer 1 needs its input whole: the all-gather waits for A.
  Plan plan = plan_with(opt, {{"x", {"S(0)"}}, {"w0", {"R"}}, {"w1", {"R"}},
                              {"mm", {"S(0)", "S(0)", "R"}}, {"mm_1", {"R", "R", "R"}}});
  const double comm = gather_us("S(0)", {{kN, kN}, kDt}, opt.mesh());
  ASSERT_DOUBLE_EQ(plan.comm_us, comm);
  StepSimulation sim = simulate_step(opt, plan);
  EXPECT_DOUBLE_EQ(sim.step_us, plan.objective_us);  // nothing to overlap with
  EXPECT_DOUBLE_EQ(sim.exposed_comm_us, comm);
  const double a_end = sim.streams[0][0].end_us;
  ASSERT_EQ(sim.streams[1].size(), 1u);
  EXPECT_DOUBLE_EQ(sim.streams[1][0].start_us, a_end);
  EXPECT_DOUBLE_EQ(sim.streams[0][1].start_us, a_end + comm);
  EXPECT_FALSE(sim.streams[1][0].prefetched);
}

// Two Partial gradients of one layer reduced into replicated parameters: one bucket, issued
// when the second gradient exists, paying the all-reduce's latency once.
TEST(Simulate, GradientReductionsOfALayerShareABucket) {
  GraphBuilder b("grads");
  TensorRef x = b.input("x", {{kN, kN}, kDt});
  TensorRef w = b.input("w", {{kN, kN}, kDt});
  TensorRef p = b.parameter("p", "layers.0", {{kN, kN}, kDt});
  TensorRef q = b.parameter("q", "layers.0", {{kN, kN}, kDt});
  b.set_phase(Phase::kBackward);
  b.set_module("layers.0");
  TensorRef gp = b.mm(x, w);
  TensorRef gq = b.mm(x, w);
  Graph gr = b.finish();
  gr.grad_pairs.push_back({p.node, gp});
  gr.grad_pairs.push_back({q.node, gq});
  add_output(gr, {gp, gq});
  ShardingOptimizer opt(gr, mesh_1d());
  Plan plan = plan_with(opt, {{"x", {"S(1)"}}, {"w", {"S(0)"}}, {"p", {"R"}}, {"q", {"R"}},
                              {"mm", {"P(sum)", "S(1)", "S(0)"}},
                              {"mm_1", {"P(sum)", "S(1)", "S(0)"}}});
  const std::vector<ReductionEntry> rb = reduction_buckets(gr, plan, Bucketing::kLayer);
  ASSERT_EQ(rb.size(), 2u);
  EXPECT_EQ(rb[0].bucket, rb[1].bucket);
  EXPECT_NE(reduction_buckets(gr, plan, Bucketing::kNone)[1].bucket, rb[0].bucket);
  const double ar = redistribute_cost_us(spec("P(sum)", {{kN, kN}, kDt}), spec("R", {{kN, kN}, kDt}),
                                         opt.mesh());
  const double fixed = collective_time_us(Collective::kAllReduce, 0.0, opt.mesh(), 0);
  ASSERT_GT(fixed, 0);
  const StepSimulation apart = simulate_step(opt, plan, {1, Bucketing::kNone});
  EXPECT_DOUBLE_EQ(apart.comm_us, 2 * ar);
  ASSERT_EQ(apart.streams[1].size(), 2u);
  EXPECT_DOUBLE_EQ(apart.streams[1][0].start_us, apart.streams[0][0].end_us);  // after mm
  const StepSimulation merged = simulate_step(opt, plan);
  EXPECT_DOUBLE_EQ(merged.comm_us, 2 * ar - fixed);
  ASSERT_EQ(merged.streams[1].size(), 2u);
  EXPECT_DOUBLE_EQ(merged.streams[1][0].start_us, merged.streams[0][1].end_us);  // after mm_1
}

TEST(Simulate, GradientReductionOverlapsLaterCompute) {
  // g = mm(x, w) produces a Partial gradient of p early; the agreement edge all-reduces it
  // while the independent C = mm(x, w) runs; only the end of the step waits for it.
  GraphBuilder b("grad");
  TensorRef x = b.input("x", {{kN, kN}, kDt});
  TensorRef w = b.input("w", {{kN, kN}, kDt});
  TensorRef p = b.parameter("p", "layers.0", {{kN, kN}, kDt});
  b.set_phase(Phase::kBackward);
  b.set_module("layers.0");
  TensorRef grad = b.mm(x, w);
  TensorRef c = b.mm(x, w);
  TensorRef d = b.mm(c, w);
  Graph gr = b.finish();
  gr.grad_pairs.push_back({p.node, grad});
  add_output(gr, {d, grad});
  ShardingOptimizer opt(gr, mesh_1d());
  // mm S(1) x S(0) -> P(sum): the gradient is partial; p is replicated (DDP all-reduce).
  Plan plan = plan_with(opt, {{"x", {"S(1)"}}, {"w", {"S(0)"}}, {"p", {"R"}},
                              {"mm", {"P(sum)", "S(1)", "S(0)"}},
                              {"mm_1", {"S(0)", "S(0)", "R"}}, {"mm_2", {"S(0)", "S(0)", "R"}}});
  // x S(1) -> S(0) for mm_1 (all-to-all, exposed: mm_1 needs it) and w S(0) -> R for mm_1 and
  // mm_2 (placeholders, prefetched at time 0 on the same stream).
  const double ar = redistribute_cost_us(spec("P(sum)", {{kN, kN}, kDt}), spec("R", {{kN, kN}, kDt}),
                                         opt.mesh());
  ASSERT_GT(ar, 0);
  StepSimulation sim = simulate_step(opt, plan, {1, Bucketing::kNone});  // the plan has no buckets
  EXPECT_DOUBLE_EQ(sim.comm_us, plan.comm_us);
  // Find the all-reduce: it starts right after `mm` (its producer) ends and overlaps mm_1.
  const SimEvent* red = nullptr;
  for (const SimEvent& e : sim.streams[1])
    if (e.collective == Collective::kAllReduce) red = &e;
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(gr.node(red->node).name, "p");
  const SimEvent& first = sim.streams[0][0];
  EXPECT_EQ(gr.node(first.node).name, "mm");
  EXPECT_GE(red->start_us, first.end_us);
  EXPECT_DOUBLE_EQ(red->end_us - red->start_us, ar);
  // Compute after the gradient (mm_1, mm_2) outlasts the all-reduce: the step ends with compute.
  EXPECT_LT(red->end_us, sim.streams[0].back().end_us);
  EXPECT_DOUBLE_EQ(sim.step_us, sim.streams[0].back().end_us);
  EXPECT_LT(sim.step_us, plan.objective_us);
}

TEST(Simulate, NoCommunicationMeansTheAdditiveTimeAndThePlansPeak) {
  Graph g = two_layer_chain();
  ShardingOptimizer opt(g, mesh_1d());
  Plan plan = plan_with(opt, {{"x", {"R"}}, {"w0", {"R"}}, {"w1", {"R"}},
                              {"mm", {"R", "R", "R"}}, {"mm_1", {"R", "R", "R"}}});
  ASSERT_EQ(plan.comm_us, 0);
  StepSimulation sim = simulate_step(opt, plan);
  EXPECT_DOUBLE_EQ(sim.step_us, plan.objective_us);
  EXPECT_EQ(sim.exposed_comm_us, 0);
  EXPECT_TRUE(sim.streams[1].empty());
  EXPECT_EQ(sim.peak_memory_bytes, plan.peak_memory_bytes);
  // MFU: 2 mm of 2 n^3 FLOPs on 2 devices.
  EXPECT_DOUBLE_EQ(sim.model_flops, 4.0 * kN * kN * kN);
  const double peak = opt.mesh().hardware().peak_flops(kDt);
  EXPECT_NEAR(sim.mfu, sim.model_flops / (2 * peak * sim.step_us * 1e-6), 1e-12);
  EXPECT_GT(sim.mfu, 0);
  EXPECT_LT(sim.mfu, 1);
}

/// A llama3-1b step (seq 256, 2 layers, 2x4) under `recompute`: the simulation agrees with the
/// plan's compute and comm (recomputation's included), overlap can only help (the step lies
/// between its compute and the additive sum), and streams and memory run forward in time.
/// -> how many redistributions move a recomputed tensor to a backward consumer.
int check_simulation(ShardingOptimizer& opt, const Plan& plan) {
  const Graph& g = opt.graph();
  // Without buckets the simulation's comm is the plan's (the additive objective charges every
  // collective its latency); buckets can only take latencies away.
  StepSimulation sim = simulate_step(opt, plan, {1, Bucketing::kNone});
  const StepSimulation bucketed = simulate_step(opt, plan);
  EXPECT_LE(bucketed.comm_us, sim.comm_us * (1 + 1e-12));
  // (Not the step: a bucket's members wait for its last one, which can cost more than the
  // latencies it saves.)
  EXPECT_LE(bucketed.step_us, plan.additive_us * (1 + 1e-9));
  // The plan's compute and comm include the recomputation's: so does the simulation.
  EXPECT_NEAR(sim.compute_us, plan.compute_us, 1e-6 * plan.compute_us);
  EXPECT_NEAR(sim.comm_us, plan.comm_us, 1e-6 * std::max(1.0, plan.comm_us));
  EXPECT_GE(sim.step_us, sim.compute_us * (1 - 1e-12));
  // Work-conserving: while compute waits, some stream runs, so the step is at most the sum.
  EXPECT_LE(sim.step_us, plan.additive_us * (1 + 1e-9));
  EXPECT_GE(sim.peak_memory_bytes, plan.peak_memory_bytes);
  int recomputed = 0;
  for (const SimEvent& e : sim.streams[0]) recomputed += e.recomputed;
  EXPECT_EQ(recomputed > 0, !plan.recomputed_nodes.empty());
  EXPECT_GT(sim.num_layers, 4);  // embedding, 2 layers forward and backward, head...
  for (const auto& s : sim.streams)
    for (size_t k = 1; k < s.size(); ++k) EXPECT_GE(s[k].start_us, s[k - 1].end_us - 1e-9);
  for (size_t k = 1; k < sim.memory.size(); ++k)
    EXPECT_GE(sim.memory[k].time_us, sim.memory[k - 1].time_us);
  // A backward use of a re-executed op's output moves the recomputed tensor: its collectives
  // start once the recomputation has produced it, not after the forward.
  std::map<NodeIdx, double> redone_end;
  for (const SimEvent& e : sim.streams[0])
    if (e.recomputed) redone_end[e.node] = e.end_us;
  int moved = 0;
  for (size_t s = 1; s < sim.streams.size(); ++s)
    for (const SimEvent& e : sim.streams[s]) {
      if (e.edge < 0) continue;
      const auto& origin = opt.problem().edge_origin.at(static_cast<size_t>(e.edge));
      auto it = redone_end.find(origin.producer.node);
      if (origin.slot < 0 || it == redone_end.end() || g.node(e.node).phase != Phase::kBackward) continue;
      ++moved;
      EXPECT_GE(e.start_us, it->second - 1e-9) << g.node(e.node).name;
    }
  return moved;
}

Graph sim_llama_1b() {
  ModelOptions mo;
  mo.batch = 2;
  mo.seq = 256;
  mo.layers = 2;
  return build_model("llama3-1b", mo);
}

Mesh sim_mesh_2x4() { return Mesh({2, 4}, {"dp", "tp"}, *hardware_preset("h100")); }

int check_built_in_model(RecomputePolicy recompute) {
  PlannerOptions po;
  po.time_limit_s = 20;
  po.recompute = recompute;
  ShardingOptimizer opt(sim_llama_1b(), sim_mesh_2x4(), po);
  Plan plan = opt.get_solution();
  EXPECT_TRUE(plan.has_solution);
  return plan.has_solution ? check_simulation(opt, plan) : 0;
}

TEST(Simulate, BuiltInModelIsConsistent) { EXPECT_EQ(check_built_in_model(RecomputePolicy::kNone), 0); }

TEST(SimulateLarge, BuiltInModelWithRecomputationIsConsistent) {
  check_built_in_model(RecomputePolicy::kSelective);
  check_built_in_model(RecomputePolicy::kFull);
  // FSDP + TP with every layer recomputed (70B layers, 4x8) gathers recomputed activations for the backward
  // (torchtitan's 70B row of docs/benchmarks.md "Fidelity": they held 490 GB of buffers from
  // the forward on before).  The recipe's default-order layout (S(0)S(0) weights, no shard
  // orders): its plan moves recomputed tensors, which FSDP2's strided one does not need to.
  PlannerOptions po;
  po.time_limit_s = 20;
  po.recompute = RecomputePolicy::kFull;
  po.memory_limit_bytes = 0;
  ModelOptions mo;
  mo.batch = 4;
  mo.seq = 512;
  mo.layers = 2;
  const Graph g70 = build_model("llama3-70b", mo);
  const Mesh m48({4, 8}, {"dp", "tp"}, *hardware_preset("h100"));
  ShardingOptimizer so(g70, m48, po);
  const RecipePins pins = recipe_pins(Recipe::kFsdpTp, g70, m48, false, false);
  ASSERT_TRUE(pins.not_applicable.empty()) << pins.not_applicable;
  for (const Constraint& c : pins.constraints) so.add_constraint(c);
  for (const Constraint& c : pins.use_constraints) so.add_constraint(c);
  const Plan plan = so.get_solution();
  ASSERT_TRUE(plan.has_solution);
  EXPECT_GT(check_simulation(so, plan), 0);
  // The recipe as planned (FSDP2's layout) is consistent too.
  const RecipeResult r = plan_recipe(Recipe::kFsdpTp, g70, m48, po, {},
                                     [](ShardingOptimizer& o, RecipeResult& res) { check_simulation(o, *res.plan); });
  ASSERT_TRUE(r.plan) << r.error << r.not_applicable;
}

// ---- recomputation on recompute_test.cc's hand-computed block ------------------------------

struct Simulated {
  Plan plan;
  StepSimulation sim;
};

Simulated simulate_block(const Graph& g, RecomputePolicy p) {
  PlannerOptions o;
  o.memory_limit_bytes = 0;
  o.recompute = p;
  ShardingOptimizer opt(g, Mesh({1}, {"d"}, *hardware_preset("h100")), o);
  Plan plan = opt.get_solution();
  EXPECT_TRUE(plan.has_solution);
  StepSimulation sim = simulate_step(opt, plan);
  return {std::move(plan), std::move(sim)};
}

/// The compute stream's recomputed ops, in order.
std::vector<NodeIdx> recomputed_ops(const StepSimulation& sim) {
  std::vector<NodeIdx> out;
  for (const SimEvent& e : sim.streams[0])
    if (e.recomputed) out.push_back(e.node);
  return out;
}

TEST(Simulate, RecomputationRunsBeforeTheBackwardReadsItsRegion) {
  const Graph g = testing::mlp_block();
  ASSERT_EQ(g.size(), 18);
  ASSERT_EQ(g.node(4).op, "mm");
  ASSERT_EQ(g.node(5).op, "relu");
  ASSERT_EQ(g.node(6).op, "mm");
  ASSERT_EQ(g.node(12).op, "t");
  ASSERT_EQ(g.node(12).inputs.at(0).node, 5);
  const Simulated keep = simulate_block(g, RecomputePolicy::kNone);
  const Simulated sel = simulate_block(g, RecomputePolicy::kSelective);
  const Simulated full = simulate_block(g, RecomputePolicy::kFull);
  const double c_mm1 = testing::compute_of(g, 4), c_relu = testing::compute_of(g, 5), c_mm2 = testing::compute_of(g, 6);
  // One device: no collectives, the step is the compute stream, the keep step plus the
  // re-executed ops (selective: relu; full: mm, relu, mm).
  for (const Simulated* s : {&keep, &sel, &full}) {
    EXPECT_EQ(s->sim.comm_us, 0);
    EXPECT_DOUBLE_EQ(s->sim.step_us, s->sim.compute_us);
    EXPECT_NEAR(s->sim.compute_us, s->plan.compute_us, 1e-9);
  }
  EXPECT_NEAR(sel.sim.compute_us, keep.sim.compute_us + c_relu, 1e-9);
  EXPECT_NEAR(full.sim.compute_us, keep.sim.compute_us + c_mm1 + c_relu + c_mm2, 1e-9);
  EXPECT_TRUE(recomputed_ops(keep.sim).empty());
  EXPECT_EQ(recomputed_ops(sel.sim), (std::vector<NodeIdx>{5}));
  EXPECT_EQ(recomputed_ops(full.sim), (std::vector<NodeIdx>{4, 5, 6}));
  // In the backward, right before node 12: after every op before it, before every op after.
  const auto& stream = full.sim.streams[0];
  const auto first = std::find_if(stream.begin(), stream.end(), [](const SimEvent& x) { return x.recomputed; });
  ASSERT_NE(first, stream.end());
  for (const SimEvent& e : stream) {
    if (e.recomputed) continue;
    if (e.node < 12) {
      EXPECT_LE(e.end_us, first->start_us);
    } else {
      EXPECT_GE(e.start_us, first->start_us + c_mm1 + c_relu + c_mm2 - 1e-9);
    }
  }
  // Memory: recompute_test.cc's hand-computed peaks (parameters with gradients and Adam
  // state; at t = 9: x, target, r, y, ones, g; full frees r, selective keeps a for relu).
  const int64_t params = 2 * testing::kBlockH * testing::kBlockF * 16;
  EXPECT_EQ(keep.sim.peak_memory_bytes, params + 4 * 8192 + 2048 + 2);
  EXPECT_EQ(sel.sim.peak_memory_bytes, params + 4 * 8192 + 2048 + 2);
  EXPECT_EQ(full.sim.peak_memory_bytes, params + 4 * 8192 + 2);
  for (const Simulated* s : {&keep, &sel, &full})
    EXPECT_EQ(s->sim.peak_memory_bytes, s->plan.peak_memory_bytes);
}

}  // namespace
}  // namespace autoshard

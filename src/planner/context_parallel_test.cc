// Context parallelism as a planner decision (issue 25): on a long sequence the solver splits
// attention's sequence over a mesh dim (ring or all-gather attention, priced by
// cost/context_parallel.h) and the rest of the block follows on the sequence dim; on a short
// one it keeps the textbook batch / head splits.
#include <gtest/gtest.h>

#include <string>

#include "models/models.h"
#include "planner/cp_cost.h"
#include "planner/overlap.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

/// LLaMA 3 8B's layer (GQA, 32 heads, 8 KV heads) with `layers` layers and a 4k vocabulary,
/// so that the long-sequence logits stay small; batch `batch` x `seq` tokens.
Graph cp_llama(int64_t layers, int64_t batch, int64_t seq, AttentionImpl attn = AttentionImpl::kSdpa) {
  ModelOptions mo;
  mo.layers = layers;
  mo.batch = batch;
  mo.seq = seq;
  mo.vocab = 4096;
  mo.attention = attn;
  return build_model("llama3-8b", mo);
}

const NodePlan& cp_first_op(const Graph& g, const Plan& p, std::string_view op) {
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).op == op) return *p.nodes.at(static_cast<size_t>(i));
  ADD_FAILURE() << "no " << op;
  return *p.nodes.front();
}

constexpr const char* kCpFwd = "_scaled_dot_product_efficient_attention";
constexpr const char* kCpBwd = "_scaled_dot_product_efficient_attention_backward";

TEST(ContextParallelLarge, LongSequenceSplitsAttentionOverCp) {
  // 32k tokens of one sequence on cp x tp = 2 x 4: one sequence gives no batch to split, 32
  // heads over 4 leave attention (quadratic in the sequence: 4 x 32 x 32k^2 x 128 FLOPs per
  // layer) 4x too slow unless the sequence splits too.
  const Graph g = cp_llama(2, 1, 32768);
  const Mesh mesh({2, 4}, {"cp", "tp"}, h100());
  ShardingOptimizer opt(g, mesh, PlannerOptions{});
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  for (const char* op : {kCpFwd, kCpBwd}) {
    const Strategy& s = cp_first_op(g, p, op).chosen;
    ASSERT_TRUE(s.cp.active()) << op << ": " << s.name();
    EXPECT_EQ(s.cp.mesh_dim, 0) << s.name();
    EXPECT_TRUE(s.cp.load_balance);
    EXPECT_EQ(s.outputs[0].to_string(), "S(2)S(1)") << s.name();
  }
  // The forward's exact strategy (q, k, v split on the sequence over cp and on heads over tp).
  const std::string name = cp_first_op(g, p, kCpFwd).chosen.name();
  EXPECT_EQ(name.substr(0, name.find(" | ")),
            "S(2)S(1), S(2)S(1), RR, RR <- S(2)S(1), S(2)S(1), S(2)S(1)");
  // The rest of the block is sequence parallel over cp too: RMSNorm's statistics [b, s, 1].
  EXPECT_EQ(cp_first_op(g, p, "rsqrt").chosen.outputs[0].placements[0], Placement::shard(1))
      << cp_first_op(g, p, "rsqrt").chosen.name();
  // The best plan without context parallelism is slower.
  PlannerOptions off;
  off.context_parallel = false;
  ShardingOptimizer no_cp(g, mesh, off);
  const Plan q = no_cp.get_solution();
  ASSERT_TRUE(q.has_solution);
  EXPECT_LT(p.objective_us, q.objective_us);
}

TEST(ContextParallelLarge, LinearLayersKeepTheSequenceSplitOnTheCpDim) {
  // One sequence per dp rank, its 32k tokens split over cp: a linear layer's flatten of
  // [b, s, h] to [b * s, h] keeps both cuts (S(0)S(0), strategy/view_rules.cc "Nested cuts")
  // instead of gathering the sequence around every matmul.  Only on the dim named cp: the same
  // mesh with the dim named sp plans without the nested views, and slower.  (Large: 1.5 s in
  // Release, 35 s under the sanitizers.)
  const Graph g = cp_llama(1, 2, 32768);
  ShardingOptimizer opt(g, Mesh({2, 4}, {"dp", "cp"}, h100()), PlannerOptions{});
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  int nested = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != "view" && n.op != "_unsafe_view") continue;
    const Strategy& s = p.nodes.at(static_cast<size_t>(i))->chosen;
    const std::string in = s.inputs[0].to_string(), out = s.outputs[0].to_string();
    if ((in == "S(0)S(1)" && out == "S(0)S(0)") || (in == "S(0)S(0)" && out == "S(0)S(1)")) ++nested;
  }
  EXPECT_GE(nested, 4);
  ShardingOptimizer sp(g, Mesh({2, 4}, {"dp", "sp"}, h100()), PlannerOptions{});
  const Plan q = sp.get_solution();
  ASSERT_TRUE(q.has_solution);
  EXPECT_LT(p.objective_us, q.objective_us);  // 53.2 against 56.4 ms
}

TEST(ContextParallel, ShortSequenceKeepsBatchAndHeads) {
  const Graph g = cp_llama(2, 8, 512);
  const Mesh mesh({2, 4}, {"cp", "tp"}, h100());
  ShardingOptimizer opt(g, mesh, PlannerOptions{});
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  for (const char* op : {kCpFwd, kCpBwd}) EXPECT_FALSE(cp_first_op(g, p, op).chosen.cp.active()) << op;
}

TEST(ContextParallel, NodeCostIsTheRingTimeAndTheOverlapWindowExcludesItsWait) {
  const Graph g = cp_llama(1, 1, 32768);
  const Mesh mesh({8}, {"cp"}, h100());
  ShardingOptimizer opt(g, mesh, PlannerOptions{});
  const BuiltProblem& bp = opt.problem();
  NodeIdx fwd = kNoNode;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).op == kCpFwd) fwd = i;
  const PNodeIdx v = bp.pnode[static_cast<size_t>(fwd)];
  const StrategyList& list = bp.strategies[static_cast<size_t>(v)];
  int seen = 0;
  for (size_t q = 0; q < list.size(); ++q) {
    if (!list[q].cp.active()) continue;
    ++seen;
    const NodeCost nc = node_cost(g.node(fwd), list[q], mesh, CommModel::kNccl);
    EXPECT_DOUBLE_EQ(bp.problem.nodes[static_cast<size_t>(v)].costs[q], nc.total_us());
    EXPECT_DOUBLE_EQ(bp.op_comm_us(v, static_cast<StrategyIdx>(q)), nc.op_comm_us);
    // Per rank: its 4k queries against all 32k keys, 1/8 of the whole attention.
    const CpAttentionInput in = cp_attention_input(g.node(fwd), list[q], mesh);
    EXPECT_NEAR(in.compute_us, nc.compute_us, 1e-9 * nc.compute_us);
  }
  // Ring and all-gather share their specs; the problem keeps the cheaper (here the ring).
  EXPECT_EQ(seen, 1);
  for (size_t q = 0; q < list.size(); ++q)
    if (list[q].cp.active()) {
      EXPECT_EQ(list[q].cp.kind, CpKind::kRing);
      Strategy other = list[q];
      other.cp.kind = CpKind::kAllGather;
      EXPECT_LT(node_cost(g.node(fwd), list[q], mesh, CommModel::kNccl).total_us(),
                node_cost(g.node(fwd), other, mesh, CommModel::kNccl).total_us());
    }
  // The overlap objective's Lagrangian at mu = 0 charges a window node only what is not
  // compute: the CP strategies keep their exposed wait, every other strategy costs 0.
  const OverlapModel m = build_overlap_model(g, bp);
  bool in_window = false;
  for (const OverlapGroup& gr : m.groups)
    for (PNodeIdx w : gr.window) in_window = in_window || w == v;
  ASSERT_TRUE(in_window);
  BuiltProblem scaled = bp;
  scale_overlap_costs(m, bp, std::vector<double>(m.keys.size(), 0.0), scaled);
  for (size_t q = 0; q < list.size(); ++q)
    EXPECT_NEAR(scaled.problem.nodes[static_cast<size_t>(v)].costs[q],
                bp.op_comm_us(v, static_cast<StrategyIdx>(q)), 1e-9)
        << list[q].name();
}

TEST(ContextParallel, SimulatorChargesWhatTheObjectiveCharges) {
  const Graph g = cp_llama(2, 1, 32768);
  const Mesh mesh({2, 4}, {"cp", "tp"}, h100());
  ShardingOptimizer opt(g, mesh, PlannerOptions{});
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  const StepSimulation sim = simulate_step(opt, p);
  // The compute stream runs every node for its plan cost (compute + exposed ring wait).
  double charged = 0;
  for (const auto& np : p.nodes)
    if (np) charged += np->compute_us;
  EXPECT_NEAR(sim.compute_us, charged, 1e-6 * charged);
  // The ring transfers are on the cp stream (mesh dim 0 -> stream 1).
  int cp_events = 0;
  for (const SimEvent& e : sim.streams.at(1)) cp_events += e.context_parallel ? 1 : 0;
  EXPECT_EQ(cp_events, 4);  // 2 layers x (forward + backward)
}

TEST(ContextParallel, MathAttentionSplitsQueriesWithKeysGathered) {
  // --attention math: q @ k^T is a bmm over [b*h, s, d] x [b*h, d, s]; its rows (the queries)
  // split on the sequence while k^T stays whole (the existing bmm rule: all-gathered K), and
  // softmax / @ v follow on the rows.  (The plan splits heads over one dim and queries over
  // the other.)
  const Graph g = cp_llama(1, 1, 32768, AttentionImpl::kMath);
  const Mesh mesh({2, 4}, {"cp", "tp"}, h100());
  ShardingOptimizer opt(g, mesh, PlannerOptions{});
  const Plan p = opt.get_solution();
  ASSERT_TRUE(p.has_solution);
  const Strategy& s = cp_first_op(g, p, "bmm").chosen;
  // Some mesh dim splits the queries (dim 1 of the folded [b*h, s, d]) and keeps k^T whole.
  bool split = false;
  for (size_t m = 0; m < 2; ++m)
    split = split || (s.outputs[0].placements[m] == Placement::shard(1) &&
                      s.inputs[0].placements[m] == Placement::shard(1) &&
                      s.inputs[1].placements[m] == Placement::replicate());
  EXPECT_TRUE(split) << s.name();
}

}  // namespace
}  // namespace autoshard

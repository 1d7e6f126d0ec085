// The K/V buffers of context-parallel attention in the plan's memory (planner/cp_memory.h) and
// in the simulated memory timeline, golden on a hand-made attention whose figures are derived
// below byte by byte.
#include "planner/cp_memory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/builder.h"
#include "models/layers.h"
#include "planner/cp_cost.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

constexpr const char* kFwd = "_scaled_dot_product_efficient_attention";
constexpr const char* kBwd = "_scaled_dot_product_efficient_attention_backward";

/// One causal attention, forward and backward, on inputs q, k, v [1, 8, 4096, 128] bf16 (8 MiB
/// each); the gradient is ones_like(out).  Schedule: 0-2 q k v, 3 forward (out, logsumexp
/// [1, 8, 4096] f32, two i64 philox scalars), 4 detach, 5 ones_like, 6 detach, 7 backward
/// (dq, dk, dv, read by the graph output only), 8 output.
Graph tiny_attention() {
  GraphBuilder b("cp_tiny");
  const TensorMeta m{{1, 8, 4096, 128}, DType::kBF16};
  const TensorRef q = b.input("q", m), k = b.input("k", m), v = b.input("v", m);
  b.set_phase(Phase::kForward);
  AttentionSaved saved;
  const TensorRef out = attention_forward(b, q, k, v, 1.0 / std::sqrt(128.0), &saved);
  b.set_phase(Phase::kBackward);
  const AttentionGrads gr = attention_backward(b, saved, b.unary("ones_like", out));
  Node o;
  o.name = "output";
  o.kind = NodeKind::kOutput;
  o.phase = Phase::kBackward;
  o.inputs = {gr.q, gr.k, gr.v};
  b.graph().add(std::move(o));
  return b.finish();
}

NodeIdx first(const Graph& g, std::string_view op) {
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).op == op) return i;
  ADD_FAILURE() << "no " << op;
  return 0;
}

/// The sequence split over the mesh's one dim everywhere: q, k, v, the gradient seed and both
/// attentions (whose S(2) output only their ring and all-gather strategies have).
ShardingOptimizer pinned(const Graph& g, int64_t p, int64_t memory_limit = 0) {
  PlannerOptions po;
  po.memory_limit_bytes = memory_limit;  // 0: none
  ShardingOptimizer opt(g, Mesh({p}, {"cp"}, h100()), po);
  for (const char* n : {"q", "k", "v"}) opt.pin(n, parse_placements("S(2)"));
  for (const char* op : {kFwd, kBwd, "ones_like"})
    opt.pin(g.node(first(g, op)).name, parse_placements("S(2)"));
  return opt;
}

// Without the buffers, the peak is at the backward (time point 7), where q, k, v, out (kept
// through its detach views), the gradient seed and dq, dk, dv -- eight [1, 8, 4096 / P, 128]
// bf16 shards -- live with the logsumexp shard [1, 8, 4096 / P] f32 and the two 8-byte philox
// scalars:
//   P = 2: 8 x 4 MiB + 64 KiB + 16 = 33,619,984 B;   P = 4: 8 x 2 MiB + 32 KiB + 16 = 16,810,000 B.
// The ring backward adds its K/V chunks (kv = k + v shards) and its rotating dK/dV (dkv = dk + dv
// shards), min(2, P - 1) x kv + 2 x dkv (cost/context_parallel.h):
//   P = 2: kv = dkv = 8 MiB: 8 + 16 MiB = 25,165,824 B;  P = 4: kv = dkv = 4 MiB: 8 + 8 MiB = 16,777,216 B.
// The forward (time point 3: q, k, v and the forward's outputs, 16,842,768 B at P = 2, plus one
// 8 MiB chunk) stays below.  Before the buffers counted, the peaks were 33,619,984 and 16,810,000.
struct Golden {
  int64_t p, base, ring_fwd, ring_bwd, allgather_fwd, allgather_bwd;
};
constexpr Golden kGolden[] = {
    {2, 33'619'984, 8 << 20, 24 << 20, 16 << 20, 32 << 20},
    {4, 16'810'000, 8 << 20, 16 << 20, 16 << 20, 32 << 20},
};

TEST(CpMemory, PlanAndSimulationPeaksRiseByTheRingBuffers) {
  const Graph g = tiny_attention();
  for (const Golden& x : kGolden) {
    ShardingOptimizer opt = pinned(g, x.p);
    const Plan plan = opt.get_solution();
    ASSERT_TRUE(plan.has_solution) << x.p;
    const Mesh& mesh = opt.mesh();
    const NodeIdx fwd = first(g, kFwd), bwd = first(g, kBwd);
    const Strategy& sf = plan.nodes[static_cast<size_t>(fwd)]->chosen;
    const Strategy& sb = plan.nodes[static_cast<size_t>(bwd)]->chosen;
    ASSERT_TRUE(sf.cp.active() && sb.cp.active()) << sf.name() << " / " << sb.name();
    EXPECT_EQ(sf.cp.kind, CpKind::kRing);
    EXPECT_EQ(sb.cp.kind, CpKind::kRing);
    EXPECT_EQ(cp_buffer_bytes(g.node(fwd), sf, mesh), x.ring_fwd) << x.p;
    EXPECT_EQ(cp_buffer_bytes(g.node(bwd), sb, mesh), x.ring_bwd) << x.p;
    // The same specs as all-gather attention hold the whole sequence's K/V (and dK/dV).
    Strategy af = sf, ab = sb;
    af.cp.kind = ab.cp.kind = CpKind::kAllGather;
    EXPECT_EQ(cp_buffer_bytes(g.node(fwd), af, mesh), x.allgather_fwd) << x.p;
    EXPECT_EQ(cp_buffer_bytes(g.node(bwd), ab, mesh), x.allgather_bwd) << x.p;
    EXPECT_EQ(plan.peak_memory_bytes, x.base + x.ring_bwd) << x.p;
    const StepSimulation sim = simulate_step(opt, plan);
    EXPECT_EQ(sim.peak_memory_bytes, x.base + x.ring_bwd) << x.p;
    EXPECT_EQ(sim.prefetch_peak_bytes, 0) << x.p;  // no redistribution: the buffers are the op's
  }
}

TEST(CpMemory, BufferNodesLiveAtTheirOpOnlyAndFollowItsStrategy) {
  const Graph g = tiny_attention();
  ShardingOptimizer opt(g, Mesh({4}, {"cp"}, h100()), PlannerOptions{});
  const BuiltProblem& bp = opt.problem();
  ASSERT_EQ(bp.cp_buffers.size(), 2u);  // the forward and the backward
  for (const BuiltProblem::CpBuffer& b : bp.cp_buffers) {
    const NodeIdx i = bp.graph_node[static_cast<size_t>(b.node)];
    EXPECT_EQ(bp.pnode[static_cast<size_t>(i)], b.owner);
    const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(b.node)];
    EXPECT_EQ(pn.start, i);
    EXPECT_EQ(pn.end, i + 1);
    const auto& list = bp.strategies[static_cast<size_t>(b.owner)];
    ASSERT_EQ(pn.usages.size(), list.size());
    int cp = 0;
    for (size_t q = 0; q < list.size(); ++q) {
      EXPECT_EQ(pn.usages[q], cp_buffer_bytes(g.node(i), list[q], opt.mesh())) << list[q].name();
      EXPECT_EQ(pn.costs[q], 0.0);
      cp += list[q].cp.active() ? 1 : 0;
    }
    // Ring is faster and holds less: its all-gather twin is dominated and dropped.
    EXPECT_EQ(cp, 1);
  }
}

TEST(CpMemory, BuffersMakeAPlanThatUsedToFitInfeasible) {
  // P = 2: the peak was 33,619,984 B before the buffers counted, 58,785,808 B with them.  A
  // 50 MB budget used to admit the plan; now nothing fits, and the exact figure does.
  const Graph g = tiny_attention();
  ShardingOptimizer tight = pinned(g, 2, 50'000'000);
  EXPECT_FALSE(tight.get_solution().has_solution);
  ShardingOptimizer exact = pinned(g, 2, 33'619'984 + (24 << 20));
  const Plan p = exact.get_solution();
  ASSERT_TRUE(p.has_solution);
  EXPECT_EQ(p.peak_memory_bytes, 58'785'808);
  ShardingOptimizer short_by_one = pinned(g, 2, 58'785'807);
  EXPECT_FALSE(short_by_one.get_solution().has_solution);
}

}  // namespace
}  // namespace autoshard

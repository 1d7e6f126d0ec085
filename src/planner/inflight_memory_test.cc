// What one microbatch keeps across its forward/backward boundary, and the in-flight peak.
#include "planner/inflight_memory.h"

#include <gtest/gtest.h>

#include "models/models.h"
#include "planner/sharding_optimizer.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

TEST(InflightMemory, TheMlpKeepsWhatItsBackwardReads) {
  // mlp, 2 layers of 1024 x 1024, batch 64, bf16, on one device.  Its backward reads x (the
  // first weight's gradient), relu(y1) (threshold_backward and the second weight's gradient),
  // y2 and target (mse_loss_backward) and the scalar loss (ones_like): 4 x 64 x 1024 x 2 B + 2 B.
  // y1 itself is read by relu only; parameters and optimizer state are not per microbatch.
  const Graph g = build_model("mlp", ModelOptions{64, -1, 2, {}});
  const Mesh mesh({1}, {"dp"}, testing::h100());
  for (double f : {1.0, 3.0}) {
    PlannerOptions o;
    o.objective = Objective::kAdditive;
    o.memory_limit_bytes = 0;
    o.inflight_microbatches = f;
    ShardingOptimizer so(g, mesh, o);
    const Plan p = so.get_solution();
    const BuiltProblem& bp = *so.built_problem();
    const InflightMemory m = inflight_memory(g, bp, f, so.solution_choice());
    EXPECT_EQ(m.kept_bytes, 4 * 64 * 1024 * 2 + 2) << f;
    EXPECT_EQ(m.peak, m.microbatch_peak + static_cast<int64_t>((f - 1) * m.kept_bytes)) << f;
    // One microbatch's usage at t*: its kept bytes and the state, within its peak; the
    // scaled model's usage there adds the other f - 1 microbatches' (rounded up per node).
    EXPECT_GE(m.boundary_bytes, m.kept_bytes) << f;
    EXPECT_LE(m.boundary_bytes, m.microbatch_peak) << f;
    const int64_t scaled = boundary_usage(g, bp, so.solution_choice());
    EXPECT_GE(scaled, m.boundary_bytes + static_cast<int64_t>((f - 1) * m.kept_bytes)) << f;
    EXPECT_LE(scaled, m.boundary_bytes + static_cast<int64_t>((f - 1) * m.kept_bytes) +
                          static_cast<int64_t>(kept_across_boundary(g, bp).size())) << f;
    // The scaled model the solver sees is exact at the boundary and below it elsewhere.
    EXPECT_LE(p.peak_memory_bytes, m.peak) << f;
    EXPECT_GE(p.peak_memory_bytes, m.peak - static_cast<int64_t>((f - 1) * m.kept_bytes)) << f;
    // Five tensors hold those bytes (views of them, e.g. detach(relu), hold none).
    int held = 0;
    for (PNodeIdx v : kept_across_boundary(g, bp))
      held += bp.problem.nodes[static_cast<size_t>(v)].usages[static_cast<size_t>(so.solution_choice()[static_cast<size_t>(v)])] > 0;
    EXPECT_EQ(held, 5) << f;
  }
}

TEST(InflightMemory, FullRecomputationKeepsTheLayerInputAlone) {
  // Golden: torch's checkpoint of a whole transformer block (torchtitan's full AC) saves the
  // block's input and nothing else of it, so with `full` one more llama layer keeps one more
  // [batch, seq, dim] tensor across the boundary: 2 x 256 x 4096 x 2 B (bf16) = 4 MiB, not
  // two (the residual between attention and MLP is recomputed with the block).
  auto kept = [](int32_t layers) {
    const Graph g = build_model("llama3-8b", ModelOptions{2, 256, layers, {}});
    const Mesh mesh({1}, {"dp"}, testing::h100());
    PlannerOptions o;
    o.objective = Objective::kAdditive;
    o.memory_limit_bytes = 0;
    o.recompute = RecomputePolicy::kFull;
    ShardingOptimizer so(g, mesh, o);
    (void)so.get_solution();
    return inflight_memory(g, *so.built_problem(), 1.0, so.solution_choice()).kept_bytes;
  };
  EXPECT_EQ(kept(3) - kept(2), int64_t{2} * 256 * 4096 * 2);
}

TEST(InflightMemory, PricedUsageCountsTheGradientsSummedOverTheStep) {
  // A memory price charges a plan lambda x (its usage at t* + the Partial gradients it sums
  // over the step): a later microbatch's t* holds those gradients too.  On two data-parallel
  // devices the mlp's weight gradients are Partial until the optimizer's reduction.
  const Graph g = build_model("mlp", ModelOptions{64, -1, 2, {}});
  const Mesh mesh({2}, {"dp"}, testing::h100());
  PlannerOptions o;
  o.objective = Objective::kAdditive;
  o.memory_limit_bytes = 0;
  o.inflight_microbatches = 3;
  ShardingOptimizer plain(g, mesh, o);
  (void)plain.get_solution();
  const double lambda = 1e-6;  // us per byte
  PlannerOptions po = o;
  po.boundary_memory_price = lambda;
  ShardingOptimizer priced(g, mesh, po);
  const BuiltProblem& a = plain.problem();
  const BuiltProblem& b = priced.problem();
  ASSERT_EQ(a.problem.num_nodes(), b.problem.num_nodes());
  // The optimum with every weight gradient's producer on a strategy that leaves it Partial
  // (only node costs are compared: edges carry no price).
  std::vector<StrategyIdx> x = plain.solution_choice();
  for (const TensorRef& r : deferred_gradient_tensors(g)) {
    const PNodeIdx v = a.pnode[static_cast<size_t>(r.node)];
    const StrategyList& sl = a.strategies[static_cast<size_t>(v)];
    for (size_t q = 0; q < sl.size(); ++q)
      if (sl[q].outputs[static_cast<size_t>(r.output)].has_partial()) x[static_cast<size_t>(v)] = static_cast<StrategyIdx>(q);
  }
  const Plan p = plain.evaluate(x);
  double extra = 0;
  for (size_t v = 0; v < x.size(); ++v)
    extra += b.problem.nodes[v].costs[static_cast<size_t>(x[v])] - a.problem.nodes[v].costs[static_cast<size_t>(x[v])];
  const int64_t summed = deferred_gradient_bytes(g, p, mesh);
  EXPECT_EQ(summed, 2 * (1024 * 1024 + 1024) * 2);  // two weights' and two biases' bf16 gradients, whole
  EXPECT_NEAR(extra, lambda * static_cast<double>(boundary_usage(g, b, x) + summed), 1e-9 * extra);
}

}  // namespace
}  // namespace autoshard

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

}  // namespace
}  // namespace autoshard

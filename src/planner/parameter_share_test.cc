#include "planner/parameter_share.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mesh/hardware.h"
#include "models/builder.h"
#include "planner/fit_advice.h"
#include "planner/sharding_optimizer.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

/// x [16, 64] -> x @ w^T + b with w [64, 64] and a bias of `bias` elements -> sum: a bias of
/// 10 elements cannot be split 8 ways evenly.
Graph biased_linear(int64_t bias) {
  GraphBuilder b("biased_linear");
  const DType dt = DType::kF32;
  TensorRef x = b.input("x", {{16, 64}, dt});
  TensorRef w = b.parameter("fc.weight", "fc", {{bias, 64}, dt});
  TensorRef bb = b.parameter("fc.bias", "fc", {{bias}, dt});
  b.set_phase(Phase::kForward);
  b.set_module("fc");
  TensorRef y = b.addmm(bb, x, b.t(w));
  b.op1("sum", {y}, Attrs{}, TensorMeta{{}, dt});
  return b.finish();
}

PlannerOptions options() {
  PlannerOptions o;
  o.objective = Objective::kAdditive;
  o.memory_limit_bytes = 0;
  o.require_divisible = true;
  o.time_limit_s = 10;
  return o;
}

TEST(ParameterShare, TheReachOfEachBoundComesFromTheStrategies) {
  const Mesh mesh({8}, {"dp"}, h100());
  ShardingOptimizer opt(biased_linear(10), mesh, options());
  const ParameterShare s = parameter_share(opt.graph(), mesh, opt.problem());
  // The [10, 64] weight cannot be split 8 ways evenly on dim 0 but can on dim 1 (64 / 8).
  EXPECT_DOUBLE_EQ(s.total_bytes, (10 * 64 + 10) * 4.0);
  EXPECT_DOUBLE_EQ(s.least_bytes, (10 * 64 / 8 + 10) * 4.0);
  EXPECT_DOUBLE_EQ(s.most_bytes, s.total_bytes);
}

TEST(ParameterShare, AnUnreachableBoundIsInfeasibleAtOnceWithTheReachableShare) {
  const Mesh mesh({8}, {"dp"}, h100());
  ShardingOptimizer opt(biased_linear(10), mesh, options());
  opt.add_parameter_memory_constraint(0, 1.0 / 8);
  const Plan p = opt.get_solution();
  EXPECT_FALSE(p.has_solution);
  EXPECT_EQ(p.status, SolveStatus::kInfeasible);
  const double least = (10 * 64 / 8 + 10) / 650.0;  // 13.85 %
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0],
            "constraint 'parameter_memory': at most 12.50 % of the parameter bytes per device "
            "is out of reach: every layout holds at least 13.85 %");
  const std::vector<std::string> fit = fit_suggestions(opt, p);
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0], "parameter memory: allow at least 13.85 % "
                    "(--param-memory 0.1385, add_parameter_memory_constraint(high=0.1385))");
  // The advised bound is reachable: the planner finds a plan there.
  ASSERT_TRUE(opt.remove_constraint("parameter_memory"));
  opt.add_parameter_memory_constraint(0, 0.1385);
  EXPECT_GE(0.1385, least);
  const Plan q = opt.get_solution();
  EXPECT_TRUE(q.has_solution);
  EXPECT_TRUE(fit_suggestions(opt, q).empty());
}

TEST(ParameterShare, AnUnreachableLowerBoundToo) {
  const Mesh mesh({8}, {"dp"}, h100());
  ShardingOptimizer opt(biased_linear(16), mesh, options());
  opt.add_parameter_memory_constraint(1.5, 2);  // more than the whole model per device
  const Plan p = opt.get_solution();
  EXPECT_FALSE(p.has_solution);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("at least 150.00 %"), std::string::npos) << p.warnings[0];
  const std::vector<std::string> fit = fit_suggestions(opt, p);
  ASSERT_EQ(fit.size(), 1u);
  EXPECT_EQ(fit[0], "parameter memory: allow at most 100.00 % "
                    "(--param-memory 1.0000,2.0000, add_parameter_memory_constraint(low=1.0000))");
}

TEST(ParameterShare, ReachableBoundsAreLeftToTheSolver) {
  const Mesh mesh({8}, {"dp"}, h100());
  ShardingOptimizer opt(biased_linear(16), mesh, options());  // 16 elements: 8 ways evenly
  opt.add_parameter_memory_constraint(0, 1.0 / 8);
  EXPECT_TRUE(unreachable_shares(opt.graph(), mesh, opt.problem(), opt.constraints()).empty());
  const Plan p = opt.get_solution();
  EXPECT_TRUE(p.has_solution);
}

}  // namespace
}  // namespace autoshard

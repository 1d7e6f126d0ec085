#include "planner/prefetch_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mesh/hardware.h"
#include "models/builder.h"
#include "planner/sharding_optimizer.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

/// x -> layers.0: mm(x, t(w0)), relu -> layers.1: mm(h, t(w1)) -> loss: sum.  Weights
/// sharded on dim 0 and every `t` replicated (pinned): each weight is gathered for its `t`.
struct TwoLayers {
  Graph g;
  Plan plan;
  TwoLayers() {
    GraphBuilder b("two_layers");
    const DType dt = DType::kF32;
    TensorRef x = b.input("x", {{16, 64}, dt});
    TensorRef w0 = b.parameter("layers.0.weight", "layers.0", {{64, 64}, dt});
    TensorRef w1 = b.parameter("layers.1.weight", "layers.1", {{64, 64}, dt});
    b.set_phase(Phase::kForward);
    b.set_module("layers.0");
    TensorRef h = b.unary("relu", b.mm(x, b.t(w0)));
    b.set_module("layers.1");
    TensorRef y = b.mm(h, b.t(w1));
    b.set_module("loss");
    b.op1("sum", {y}, Attrs{}, TensorMeta{{}, dt});
    g = b.finish();
    PlannerOptions o;
    o.objective = Objective::kAdditive;
    o.memory_limit_bytes = 0;
    ShardingOptimizer opt(g, Mesh({4}, {"dp"}, h100()), o);
    opt.pin("layers.0.weight", parse_placements("S(0)"));
    opt.pin("layers.1.weight", parse_placements("S(0)"));
    opt.pin("t", parse_placements("R"));
    opt.pin("t_1", parse_placements("R"));
    plan = opt.get_solution();
  }
  std::string name(NodeIdx i) const { return i == kNoNode ? "start" : g.node(i).name; }
  std::vector<std::string> entries(int32_t prefetch_layers) const {
    std::vector<std::string> out;
    for (const PrefetchEntry& e : prefetch_schedule(g, plan, {prefetch_layers}).entries)
      out.push_back(name(e.consumer) + ":" + std::to_string(e.slot) + " before " + name(e.issue_before) +
                    " bucket " + std::to_string(e.bucket));
    return out;
  }
};

TEST(PrefetchSchedule, AWeightIsGatheredOneLayerAhead) {
  TwoLayers c;
  ASSERT_TRUE(c.plan.has_solution);
  // layers.0 is the first segment: its gather cannot start earlier than its own first op.
  // One layer ahead both gathers are issued at t, with the same placements: one bucket.
  EXPECT_EQ(c.entries(1), (std::vector<std::string>{"t:0 before t bucket 0", "t_1:0 before t bucket 0"}));
  EXPECT_EQ(c.entries(0), (std::vector<std::string>{"t:0 before t bucket 0", "t_1:0 before t_1 bucket 1"}));
  EXPECT_EQ(prefetch_schedule(c.g, c.plan, {2}).options.prefetch_layers, 2);
}

TEST(PrefetchSchedule, WithoutBucketingEachEntryIsItsOwnBucket) {
  TwoLayers c;
  const PrefetchSchedule s = prefetch_schedule(c.g, c.plan, {1, Bucketing::kNone});
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[0].bucket, 0);
  EXPECT_EQ(s.entries[1].bucket, 1);
  EXPECT_EQ(s.num_buckets, 2);
  EXPECT_EQ(prefetch_schedule(c.g, c.plan, {1}).num_buckets, 1);
  EXPECT_EQ(parse_bucketing("layer"), Bucketing::kLayer);
  EXPECT_EQ(parse_bucketing("none"), Bucketing::kNone);
  EXPECT_FALSE(parse_bucketing("model").has_value());
  EXPECT_EQ(bucketing_name(Bucketing::kLayer), "layer");
}

TEST(PrefetchSchedule, ABucketPaysEachStepsLatencyOnce) {
  // 4 x H100 ring (nccl): all_gather = base + 3 alpha + 3/4 S / B, affine in S, so the
  // credit is the time on 0 bytes, and never more than the member's own time.
  const Mesh mesh({4}, {"dp"}, h100());
  const double fixed = collective_time_us(Collective::kAllGather, 0.0, mesh, 0);
  const double one = collective_time_us(Collective::kAllGather, 1 << 20, mesh, 0);
  const double two = collective_time_us(Collective::kAllGather, 2 << 20, mesh, 0);
  EXPECT_GT(fixed, 0.0);
  EXPECT_NEAR(bucket_latency_credit_us(Collective::kAllGather, 0, mesh, CommModel::kNccl, one),
              2 * one - two, 1e-9);
  EXPECT_DOUBLE_EQ(bucket_latency_credit_us(Collective::kAllGather, 0, mesh, CommModel::kNccl, 1e-3), 1e-3);
}

TEST(PrefetchSchedule, EachUseIsWaitedBeforeItsConsumer) {
  TwoLayers c;
  const PrefetchSchedule s = prefetch_schedule(c.g, c.plan, {1});
  ASSERT_EQ(s.entries.size(), 2u);
  for (const PrefetchEntry& e : s.entries) EXPECT_EQ(e.wait_before, e.consumer) << c.name(e.consumer);
  // A gradient reduction (slot -1) is waited at the step's end; so is anything not an op.
  EXPECT_EQ(wait_point(c.g, s.entries[0].consumer, -1), kNoNode);
  EXPECT_EQ(wait_point(c.g, 0, 0), kNoNode);  // the input x
}

TEST(PrefetchSchedule, TheSegmentRuleIsTheSimulators) {
  EXPECT_EQ(prefetch_segment(5, 1), 4);
  EXPECT_EQ(prefetch_segment(0, 1), 0);
  EXPECT_EQ(prefetch_segment(3, 0), 3);
  EXPECT_EQ(prefetch_segment(-1, 1), -1);  // outside every segment: before the first op
}

}  // namespace
}  // namespace autoshard

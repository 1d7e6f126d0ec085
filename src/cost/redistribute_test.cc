#include "cost/redistribute.h"

#include <gtest/gtest.h>

#include "cost/test_util.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace autoshard {
namespace {

using testing::make_mesh;
using testing::spec;

double dt_cost(const char* from, const char* to, const Mesh& mesh, std::vector<int64_t> shape,
               DType dt = DType::kBF16) {
  return redistribute_cost_us(spec(from, shape, dt), spec(to, shape, dt), mesh,
                              CommModel::kDtensor);
}

double nccl_cost(const char* from, const char* to, const Mesh& mesh,
                 std::vector<int64_t> shape, DType dt = DType::kBF16) {
  return redistribute_cost_us(spec(from, shape, dt), spec(to, shape, dt), mesh);
}

const std::vector<int64_t> kBig = {8192, 4096};  // bf16: 64 MiB
constexpr double kBigBytes = 8192.0 * 4096 * 2;

// cost-model.md §1 validation table.
TEST(RedistributeDtensor, ValidationTable) {
  Mesh mesh = make_mesh({8}, "a100");
  EXPECT_NEAR(dt_cost("S(0)", "R", mesh, kBig), 634.375, 0.01);
  EXPECT_NEAR(dt_cost("P", "R", mesh, kBig), 1262.149, 0.01);
  EXPECT_NEAR(dt_cost("P", "S(0)", mesh, kBig), 634.375, 0.01);
  EXPECT_EQ(dt_cost("R", "S(0)", mesh, kBig), 0.0);
  EXPECT_TRUE(std::isinf(dt_cost("S(0)", "P", mesh, kBig)));
  Mesh four = make_mesh({4}, "a100");
  EXPECT_NEAR(dt_cost("S(0)", "R", four, {1024, 1024}, DType::kF32), 41.806, 0.01);
  EXPECT_NEAR(dt_cost("P", "R", four, {1024, 1024}, DType::kF32), 77.012, 0.01);
}

TEST(RedistributeDtensor, FollowsDtensorWalk) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  // torch 2.13 walks last to first when the source has a shard: b = D/8; dim 1: b = D/2,
  // all_gather; dim 0: b = D, all_gather.
  EXPECT_NEAR(dt_cost("S(0)S(1)", "RR", mesh, kBig),
              all_gather_us(d / 2, mesh, 1, CommModel::kDtensor) +
                  all_gather_us(d, mesh, 0, CommModel::kDtensor),
              1e-9);
  // The all-reduce of dim 1 comes before the gather of dim 0, at the smaller size.
  EXPECT_NEAR(dt_cost("S(0)P", "RR", mesh, kBig),
              all_reduce_us(d / 2, mesh, 1, CommModel::kDtensor) +
                  all_gather_us(d, mesh, 0, CommModel::kDtensor),
              1e-9);
  // Nested sharding: dim 1's S(0) sits under dim 0's S(0) and must be undone (to R) first.
  EXPECT_NEAR(dt_cost("S(0)S(0)", "RS(0)", mesh, kBig),
              all_gather_us(d / 2, mesh, 1, CommModel::kDtensor) +
                  all_gather_us(d, mesh, 0, CommModel::kDtensor),
              1e-9);
  // Shard -> Shard: all_gather at the current size + 1 us penalty.
  Mesh eight = make_mesh({8}, "a100");
  EXPECT_NEAR(dt_cost("S(0)", "S(1)", eight, kBig),
              all_gather_us(d / 8, eight, 0, CommModel::kDtensor) + 1.0, 1e-9);
  // P -> S then P -> R on the smaller size; R -> S shrinks b for later dims.
  EXPECT_NEAR(dt_cost("PP", "S(0)R", mesh, kBig),
              reduce_scatter_us(d, mesh, 0, CommModel::kDtensor) +
                  all_reduce_us(d / 2, mesh, 1, CommModel::kDtensor),
              1e-9);
  EXPECT_NEAR(dt_cost("RP", "S(0)R", mesh, kBig),
              all_reduce_us(d / 2, mesh, 1, CommModel::kDtensor), 1e-9);
  EXPECT_TRUE(std::isinf(dt_cost("P(sum)", "P(max)", eight, kBig)));
  EXPECT_EQ(dt_cost("S(0)R", "S(0)P", mesh, kBig), 0.0);  // R -> P is free
  EXPECT_EQ(dt_cost("S(0)S(1)", "S(0)S(1)", mesh, kBig), 0.0);
}

TEST(RedistributeDtensor, PlanListsDtensorsCollectives) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  // S(0)P -> RR: dim 1's all-reduce at D/2, then dim 0's gather of the whole tensor.
  RedistributePlan p = plan_redistribute_dtensor(spec("S(0)P", kBig), spec("RR", kBig), mesh);
  ASSERT_EQ(p.num_steps, 2);
  EXPECT_EQ(p.steps[0].kind, Collective::kAllReduce);
  EXPECT_EQ(p.steps[0].dim, 1);
  EXPECT_DOUBLE_EQ(p.steps[0].bytes, d / 2);
  EXPECT_EQ(p.steps[1].kind, Collective::kAllGather);
  EXPECT_EQ(p.steps[1].dim, 0);
  EXPECT_DOUBLE_EQ(p.steps[1].bytes, d);
  // Its times are the dtensor profile's cost, minus the 1 us Shard -> Shard penalty.
  double sum = 0;
  for (int32_t i = 0; i < p.num_steps; ++i)
    sum += collective_time_us(p.steps[static_cast<size_t>(i)].kind, p.steps[static_cast<size_t>(i)].bytes,
                              mesh, p.steps[static_cast<size_t>(i)].dim, CommModel::kDtensor);
  EXPECT_NEAR(sum, dt_cost("S(0)P", "RR", mesh, kBig), 1e-9);
  // P -> S under a nesting change: all-reduce (then a local slice), where the nccl schedule
  // reduce-scatters.
  RedistributePlan q = plan_redistribute_dtensor(spec("S(0)P", kBig), spec("RS(0)", kBig), mesh);
  ASSERT_EQ(q.num_steps, 2);
  EXPECT_EQ(q.steps[0].kind, Collective::kAllReduce);
  EXPECT_EQ(q.steps[1].kind, Collective::kAllGather);
  EXPECT_TRUE(plan_redistribute_dtensor(spec("S(0)", {8}), spec("P", {8}), make_mesh({2}, "a100")).impossible);
  EXPECT_EQ(plan_redistribute_dtensor(spec("RR", kBig), spec("S(0)S(1)", kBig), mesh).num_steps, 0);
}

TEST(RedistributeNccl, OneDimTransitions) {
  Mesh mesh = make_mesh({8}, "a100");
  const double d = kBigBytes;
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)", "R", mesh, kBig), all_gather_us(d, mesh, 0));
  EXPECT_DOUBLE_EQ(nccl_cost("P", "R", mesh, kBig), all_reduce_us(d, mesh, 0));
  EXPECT_DOUBLE_EQ(nccl_cost("P", "S(1)", mesh, kBig), reduce_scatter_us(d, mesh, 0));
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)", "S(1)", mesh, kBig), all_to_all_us(d / 8, mesh, 0));
  EXPECT_EQ(nccl_cost("R", "S(0)", mesh, kBig), 0.0);
  EXPECT_EQ(nccl_cost("R", "P(avg)", mesh, kBig), 0.0);
  EXPECT_EQ(nccl_cost("S(1)", "S(1)", mesh, kBig), 0.0);
  EXPECT_EQ(nccl_cost("P(max)", "P(max)", mesh, kBig), 0.0);
}

TEST(RedistributeNccl, Infinities) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  for (CommModel model : {CommModel::kNccl, CommModel::kDtensor}) {
    auto cost = [&](const char* a, const char* b) {
      return redistribute_cost_us(spec(a, kBig), spec(b, kBig), mesh, model);
    };
    EXPECT_TRUE(std::isinf(cost("S(0)R", "PR")));
    EXPECT_TRUE(std::isinf(cost("RS(1)", "RP")));
    EXPECT_TRUE(std::isinf(cost("P(sum)R", "P(avg)R")));
    EXPECT_TRUE(std::isinf(
        redistribute_cost_us(spec("S(0)R", {8192, 4096}), spec("RR", {4096, 8192}), mesh,
                             model)));
    EXPECT_TRUE(std::isinf(redistribute_cost_us(spec("RR", kBig, DType::kBF16),
                                                spec("RR", kBig, DType::kF32), mesh, model)));
  }
  EXPECT_TRUE(std::isinf(redistribute_bytes(spec("S(0)R", kBig), spec("PR", kBig), mesh)));
}

TEST(RedistributeNccl, BadSpecsThrow) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  EXPECT_THROW(redistribute_cost_us(spec("S(0)", kBig), spec("R", kBig), mesh),
               std::invalid_argument);
  EXPECT_THROW(redistribute_cost_us(spec("S(2)R", kBig), spec("RR", kBig), mesh),
               std::invalid_argument);
}

// 2x4 mesh, S(0)S(1) -> RR: gather mesh dim 1 first (last to first) with D/2 bytes gathered,
// then mesh dim 0 with the full D.
TEST(RedistributeNccl, TwoDimGatherSumsBothAllGathers) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  RedistributePlan plan = plan_redistribute(spec("S(0)S(1)", kBig), spec("RR", kBig), mesh);
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.steps[0].kind, Collective::kAllGather);
  EXPECT_EQ(plan.steps[0].dim, 1);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, d / 2);
  EXPECT_EQ(plan.steps[1].dim, 0);
  EXPECT_DOUBLE_EQ(plan.steps[1].bytes, d);
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)S(1)", "RR", mesh, kBig),
                   all_gather_us(d / 2, mesh, 1) + all_gather_us(d, mesh, 0));
  // Bus bytes: 3/4 * D/2 + 1/2 * D = 7/8 D, i.e. everything but the local shard.
  EXPECT_DOUBLE_EQ(redistribute_bytes(spec("S(0)S(1)", kBig), spec("RR", kBig), mesh),
                   d * 7 / 8);
}

// Nested sharding: S(0)S(0) holds chunk i0*4+i1 of 8; RS(0) holds chunk i1 of 4.  Mesh dim 0
// cannot be gathered while mesh dim 1 still splits inside it.
TEST(RedistributeNccl, NestedShardingNeedsDataMovement) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  RedistributePlan plan = plan_redistribute(spec("S(0)S(0)", kBig), spec("RS(0)", kBig), mesh);
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.steps[0].kind, Collective::kAllGather);
  EXPECT_EQ(plan.steps[0].dim, 1);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, d / 2);
  EXPECT_EQ(plan.steps[1].kind, Collective::kAllGather);
  EXPECT_EQ(plan.steps[1].dim, 0);
  EXPECT_DOUBLE_EQ(plan.steps[1].bytes, d);
  EXPECT_GT(nccl_cost("S(0)S(0)", "RS(0)", mesh, kBig), 0.0);
  // The reverse: RS(0) holds chunk i1 of 4, S(0)S(0) needs chunk i0*4+i1 of 8.
  EXPECT_DOUBLE_EQ(nccl_cost("RS(0)", "S(0)S(0)", mesh, kBig), all_gather_us(d, mesh, 1));
  // Adding an inner split, or dropping the inner one, is local / a single gather.
  EXPECT_EQ(nccl_cost("S(0)R", "S(0)S(0)", mesh, kBig), 0.0);
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)S(0)", "S(0)R", mesh, kBig), all_gather_us(d / 2, mesh, 1));
}

TEST(RedistributeNccl, SlicesBeforeGathers) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  // Slice dim 1 on mesh dim 1 first, then gather mesh dim 0 with D/4 gathered.
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)R", "RS(1)", mesh, kBig), all_gather_us(d / 4, mesh, 0));
  // Mesh dim 0 moves from tensor dim 0 to 1 as the OUTER split of dim 1: mesh dim 1 must
  // leave dim 1 first (gather to D/2), then mesh dim 0 swaps dims with an all-to-all of D/2,
  // then mesh dim 1 slices again.
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)S(1)", "S(1)S(1)", mesh, kBig),
                   all_gather_us(d / 2, mesh, 1) + all_to_all_us(d / 2, mesh, 0));
  // Mesh dim 1 moves from tensor dim 1 to 0 as the inner split: one all-to-all of D/8.
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)S(1)", "S(0)S(0)", mesh, kBig),
                   all_to_all_us(d / 8, mesh, 1));
}

TEST(RedistributeNccl, PartialReductions) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kBigBytes;
  // PP -> S(0)S(0): reduce-scatter on mesh dim 0 (outer) then on mesh dim 1 with D/2.
  RedistributePlan plan = plan_redistribute(spec("PP", kBig), spec("S(0)S(0)", kBig), mesh);
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.steps[0].kind, Collective::kReduceScatter);
  EXPECT_EQ(plan.steps[0].dim, 0);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, d);
  EXPECT_EQ(plan.steps[1].dim, 1);
  EXPECT_DOUBLE_EQ(plan.steps[1].bytes, d / 2);
  // PR -> S(0)S(1): slice mesh dim 1 first so the reduce-scatter moves D/4.
  EXPECT_DOUBLE_EQ(nccl_cost("PR", "S(0)S(1)", mesh, kBig), reduce_scatter_us(d / 4, mesh, 0));
  // PR -> RS(0): the all-reduce runs after the free slice, on D/4.
  EXPECT_DOUBLE_EQ(nccl_cost("PR", "RS(0)", mesh, kBig), all_reduce_us(d / 4, mesh, 0));
  // S(0)P -> RR: the all-reduce runs before the gather, on D/2.
  plan = plan_redistribute(spec("S(0)P", kBig), spec("RR", kBig), mesh);
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.steps[0].kind, Collective::kAllReduce);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, d / 2);
  EXPECT_EQ(plan.steps[1].kind, Collective::kAllGather);
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)P", "RR", mesh, kBig),
                   all_reduce_us(d / 2, mesh, 1) + all_gather_us(d, mesh, 0));
  EXPECT_DOUBLE_EQ(nccl_cost("PP", "RR", mesh, kBig),
                   all_reduce_us(d, mesh, 0) + all_reduce_us(d, mesh, 1));
}

// 2x8 on 8-GPU hosts: mesh dim 0 crosses hosts, so its all-reduce uses inter-node figures.
TEST(RedistributeNccl, PartialOnInterNodeDimUsesItsBandwidth) {
  Mesh mesh = make_mesh({2, 8}, "a100");
  ASSERT_TRUE(mesh.dim(0).inter_node);
  const double d = kBigBytes;
  const Hardware hw = *hardware_preset("a100");
  const double expected = hw.base_latency_us + 2 * hw.inter_latency_us +
                          2.0 * (1.0 / 2) * d / (hw.inter_busbw_gbps * 1e3);
  EXPECT_NEAR(nccl_cost("P(sum)R", "RR", mesh, kBig), expected, 1e-6);
  EXPECT_GT(nccl_cost("P(sum)R", "RR", mesh, kBig), nccl_cost("RP(sum)", "RR", mesh, kBig));
}

TEST(RedistributeNccl, UnevenShardsUseLargestChunk) {
  Mesh mesh = make_mesh({4}, "a100");
  // [7, 4] f32 split 4 ways on dim 0: shards of 2 rows; S(0) -> S(1): all-to-all of 2x4 f32.
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)", "S(1)", mesh, {7, 4}, DType::kF32),
                   all_to_all_us(2 * 4 * 4, mesh, 0));
}

TEST(RedistributeNccl, ThreeDimMesh) {
  Mesh mesh = make_mesh({2, 2, 4}, "a100");  // 16 GPUs: mesh dim 0 inter-node
  const double d = kBigBytes;
  // S(0)S(0)S(1) -> S(0)RR: gather mesh dim 2 (D/4 gathered), then mesh dim 1 (D/2).
  EXPECT_DOUBLE_EQ(nccl_cost("S(0)S(0)S(1)", "S(0)RR", mesh, kBig),
                   all_gather_us(d / 4, mesh, 2) + all_gather_us(d / 2, mesh, 1));
  EXPECT_DOUBLE_EQ(redistribute_cost_us(spec("S(0)S(1)P", kBig), spec("S(0)S(1)P", kBig), mesh),
                   0.0);
}

// Every pair of placements on a 2x2x2 mesh for a rank-2 tensor gets a schedule; the cost is
// finite exactly when no mesh dim goes S -> P or P(x) -> P(y).
TEST(RedistributeNccl, AllPairsOnThreeDimMeshHaveSchedules) {
  Mesh mesh = make_mesh({2, 2, 2}, "a100");
  const std::vector<Placement> options = {Placement::replicate(), Placement::shard(0),
                                          Placement::shard(1),
                                          Placement::partial(ReduceOp::kSum),
                                          Placement::partial(ReduceOp::kMax)};
  std::vector<std::vector<Placement>> all;
  for (const auto& a : options)
    for (const auto& b : options)
      for (const auto& c : options) all.push_back({a, b, c});
  const TensorMeta meta{{64, 32}, DType::kF32};
  for (const auto& f : all) {
    for (const auto& t : all) {
      bool possible = true;
      for (size_t m = 0; m < 3; ++m) {
        if (f[m].is_shard() && t[m].is_partial()) possible = false;
        if (f[m].is_partial() && t[m].is_partial() && !(f[m] == t[m])) possible = false;
      }
      const ShardingSpec from{f, meta};
      const ShardingSpec to{t, meta};
      double c = 0;
      ASSERT_NO_THROW(c = redistribute_cost_us(from, to, mesh))
          << from.to_string() << " -> " << to.to_string();
      EXPECT_EQ(std::isinf(c), !possible) << from.to_string() << " -> " << to.to_string();
      EXPECT_GE(c, 0.0);
      if (f == t) {
        EXPECT_EQ(c, 0.0);
      }
      // Bus bytes never exceed gathering, reducing and re-scattering everything.
      if (possible) {
        EXPECT_LE(redistribute_bytes(from, to, mesh), 3.0 * 2 * static_cast<double>(meta.bytes()))
            << from.to_string() << " -> " << to.to_string();
      }
    }
  }
}

/// The path's states as strings.
std::vector<std::string> path_strings(const char* from, const char* to, const Mesh& mesh,
                                      std::vector<int64_t> shape = {64, 64, 64}) {
  std::vector<std::string> out;
  for (const auto& state : redistribute_path(spec(from, shape), spec(to, shape), mesh))
    out.push_back(placements_to_string(state));
  return out;
}

/// The runtime follows these states one DTensor redistribution at a time; each must be one of
/// the planned collectives (or a free slice), in the planned order.
TEST(RedistributePath, StatesBetweenThePlannedCollectives) {
  const Mesh mesh = make_mesh({2, 4});
  // Reduce-scatter over dp on the tp-sharded gradient, then move tp's split (FSDP + TP's
  // gradient): DTensor would gather over tp first, 4x the bytes.
  EXPECT_EQ(path_strings("P(sum)S(1)", "S(0)S(0)", mesh),
            (std::vector<std::string>{"S(0)S(1)", "S(0)S(0)"}));
  // An all-to-all over dp while the tensor is still split over tp, then the tp gather.
  EXPECT_EQ(path_strings("S(2)S(1)", "S(0)R", mesh),
            (std::vector<std::string>{"S(0)S(1)", "S(0)R"}));
  // A free slice comes first, so the all-to-all moves a quarter of the bytes.
  EXPECT_EQ(path_strings("RS(1)", "S(0)S(0)", mesh),
            (std::vector<std::string>{"S(0)S(1)", "S(0)S(0)"}));
  // Partial -> Replicate all-reduces run at the smallest size, one mesh dim at a time.
  EXPECT_EQ(path_strings("P(sum)P(sum)", "RR", mesh),
            (std::vector<std::string>{"RP(sum)", "RR"}));
  EXPECT_EQ(path_strings("S(0)R", "S(0)R", mesh), std::vector<std::string>{});
  EXPECT_TRUE(path_strings("S(0)R", "P(sum)R", mesh).empty());  // impossible
}

/// The path has one state per planned collective plus the free slices, and ends at `to`.
TEST(RedistributePath, OneStatePerStepEndingAtTheTarget) {
  const Mesh mesh = make_mesh({2, 2, 2});
  const char* specs[] = {"RRR", "S(0)RR", "RS(0)S(1)", "P(sum)S(0)R", "S(1)S(0)S(0)", "P(sum)P(sum)S(2)",
                         "S(2)S(2)R", "RRP(sum)"};
  for (const char* from : specs)
    for (const char* to : specs) {
      const ShardingSpec f = spec(from, {64, 64, 64}), t = spec(to, {64, 64, 64});
      const RedistributePlan plan = plan_redistribute(f, t, mesh);
      const auto path = redistribute_path(f, t, mesh);
      if (plan.impossible) {
        EXPECT_TRUE(path.empty()) << from << " -> " << to;
        continue;
      }
      EXPECT_GE(path.size(), static_cast<size_t>(plan.num_steps)) << from << " -> " << to;
      if (!path.empty()) {
        EXPECT_EQ(placements_to_string(path.back()), t.to_string()) << from << " -> " << to;
      }
    }
}

}  // namespace
}  // namespace autoshard

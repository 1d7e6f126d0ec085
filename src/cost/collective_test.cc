#include "cost/collective.h"

#include <gtest/gtest.h>

#include "cost/test_util.h"

namespace autoshard {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using testing::make_mesh;

TEST(CommModel, NamesRoundTrip) {
  for (CommModel m : {CommModel::kNccl, CommModel::kDtensor})
    EXPECT_EQ(parse_comm_model(comm_model_name(m)), m);
  EXPECT_EQ(parse_comm_model("DTensor"), CommModel::kDtensor);
  EXPECT_FALSE(parse_comm_model("mpi").has_value());
  EXPECT_EQ(collective_name(Collective::kReduceScatter), "reduce_scatter");
}

// cost-model.md §1: bf16 [8192, 4096] = 64 MiB on (8,).
TEST(DtensorCollectives, ValidationFigures) {
  Mesh mesh = make_mesh({8}, "a100");
  const double bytes = 8192.0 * 4096 * 2;
  EXPECT_NEAR(all_gather_us(bytes, mesh, 0, CommModel::kDtensor), 634.375, 0.01);
  EXPECT_NEAR(reduce_scatter_us(bytes, mesh, 0, CommModel::kDtensor), 634.375, 0.01);
  EXPECT_NEAR(all_reduce_us(bytes, mesh, 0, CommModel::kDtensor), 1262.149, 0.01);
  // DTensor has no all-to-all cost: all-gather formula.
  EXPECT_NEAR(all_to_all_us(bytes, mesh, 0, CommModel::kDtensor), 634.375, 0.01);
  Mesh four = make_mesh({4}, "a100");
  const double fp32 = 1024.0 * 1024 * 4;
  EXPECT_NEAR(all_gather_us(fp32, four, 0, CommModel::kDtensor), 41.806, 0.01);
  EXPECT_NEAR(all_reduce_us(fp32, four, 0, CommModel::kDtensor), 77.012, 0.01);
}

TEST(DtensorCollectives, InterNodeDimUsesReducedBandwidthAndNetworkLatency) {
  Mesh mesh = make_mesh({2, 8}, "a100");  // 16 GPUs, 8 per host: dim 0 crosses hosts
  ASSERT_TRUE(mesh.dim(0).inter_node);
  ASSERT_FALSE(mesh.dim(1).inter_node);
  // 6.6 + 1 * 2.7 + (1 GiB * 1/2) / (87.7 * 0.22) * 1e6
  EXPECT_NEAR(all_gather_us(kGiB, mesh, 0, CommModel::kDtensor), 25924.092, 0.01);
  // Hardware figures do not matter to the dtensor profile.
  Mesh h100 = make_mesh({2, 8}, "h100");
  EXPECT_DOUBLE_EQ(all_gather_us(kGiB, h100, 0, CommModel::kDtensor),
                   all_gather_us(kGiB, mesh, 0, CommModel::kDtensor));
}

TEST(DtensorCollectives, SingleDeviceDimStillPaysBaseLatency) {
  Mesh mesh = make_mesh({1, 8}, "a100");
  EXPECT_DOUBLE_EQ(all_gather_us(kGiB, mesh, 0, CommModel::kDtensor), 6.6);
}

// cost-model.md §2 checks, within 2%.
TEST(NcclCollectives, MeasuredBusBandwidthChecks) {
  Mesh a100 = make_mesh({8}, "a100");  // busbw 230 GB/s
  EXPECT_NEAR(all_reduce_us(kGiB, a100, 0), 8170.0, 8170.0 * 0.02);
  Mesh h100 = make_mesh({8}, "h100");  // ring AG busbw 370 GB/s
  EXPECT_NEAR(all_gather_us(kGiB, h100, 0), 2539.0, 2539.0 * 0.02);
}

TEST(NcclCollectives, RingFormulas) {
  Mesh mesh = make_mesh({8}, "h100");
  const double s = 64.0 * 1024 * 1024;
  const double bw = 370e3;  // bytes per us
  EXPECT_NEAR(all_gather_us(s, mesh, 0), 6.6 + 7 * 0.6 + 7.0 / 8 * s / bw, 1e-9);
  EXPECT_NEAR(reduce_scatter_us(s, mesh, 0), 6.6 + 7 * 0.6 + 7.0 / 8 * s / bw, 1e-9);
  EXPECT_NEAR(all_reduce_us(s, mesh, 0), 6.6 + 14 * 0.6 + 14.0 / 8 * s / bw, 1e-9);
  EXPECT_NEAR(all_to_all_us(s, mesh, 0), 7 * 0.6 + 7.0 / 8 * s / bw, 1e-9);
}

TEST(NcclCollectives, InterNodeDimUsesItsOwnFigures) {
  Mesh mesh = make_mesh({2, 8}, "h100");
  const double s = kGiB;
  EXPECT_NEAR(all_reduce_us(s, mesh, 0), 6.6 + 2 * 2.7 + 1.0 * s / 47e3, 1e-6);
  EXPECT_GT(all_reduce_us(s, mesh, 0), all_reduce_us(s, mesh, 1));
}

TEST(NcclCollectives, SingleDeviceIsFree) {
  Mesh mesh = make_mesh({1, 8}, "a100");
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter,
                       Collective::kAllReduce, Collective::kAllToAll})
    EXPECT_EQ(collective_time_us(c, kGiB, mesh, 0), 0.0);
}

TEST(NcclCollectives, BusBytes) {
  EXPECT_DOUBLE_EQ(collective_bus_bytes(Collective::kAllGather, 800, 8), 700);
  EXPECT_DOUBLE_EQ(collective_bus_bytes(Collective::kAllReduce, 800, 8), 1400);
  EXPECT_DOUBLE_EQ(collective_bus_bytes(Collective::kAllToAll, 800, 1), 0);
}

}  // namespace
}  // namespace autoshard

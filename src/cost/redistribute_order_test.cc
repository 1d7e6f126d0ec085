/// Redistribution between specs with a shard order (strided shards, placement/placement.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cost/dtensor_planner.h"
#include "cost/redistribute.h"
#include "cost/test_util.h"

namespace autoshard {
namespace {

using testing::make_mesh;
using testing::spec;

const std::vector<int64_t> kW = {14336, 4096};  // a LLaMA-3 8B w1, bf16
constexpr double kWBytes = 14336.0 * 4096 * 2;

// FSDP2 over TP: tp (mesh dim 1) cuts first, dp cuts each tp shard.  Unsharding dp is one
// all-gather on dp; in the default order the same move gathers tp and dp and slices tp again.
TEST(RedistributeOrder, FsdpUnshardOfTpWeightIsOneGather) {
  Mesh mesh = make_mesh({8, 8});
  RedistributePlan plan = plan_redistribute(spec("_S(0,8)S(0)", kW), spec("RS(0)", kW), mesh);
  ASSERT_EQ(plan.num_steps, 1);
  EXPECT_EQ(plan.steps[0].kind, Collective::kAllGather);
  EXPECT_EQ(plan.steps[0].dim, 0);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, kWBytes / 8);
  const double ordered = redistribute_cost_us(spec("_S(0,8)S(0)", kW), spec("RS(0)", kW), mesh);
  EXPECT_DOUBLE_EQ(ordered, all_gather_us(kWBytes / 8, mesh, 0));
  EXPECT_GT(redistribute_cost_us(spec("S(0)S(0)", kW), spec("RS(0)", kW), mesh), ordered);
  // The reshard after the step is a free slice; in the default order it is not.
  EXPECT_EQ(redistribute_cost_us(spec("RS(0)", kW), spec("_S(0,8)S(0)", kW), mesh), 0.0);
  EXPECT_GT(redistribute_cost_us(spec("RS(0)", kW), spec("S(0)S(0)", kW), mesh), 0.0);

  // DTensor: one step, all_gather on dp of GiB = bytes / 64 / 1024^3 * 8 (torch's order).
  const double dt = redistribute_cost_us(spec("_S(0,8)S(0)", kW), spec("RS(0)", kW), mesh,
                                         CommModel::kDtensor);
  const double gib = kWBytes / 64 / 1024 / 1024 / 1024 * 8;
  EXPECT_EQ(dt, dtensor_collective_gib_us(Collective::kAllGather, gib, mesh, 0));
  EXPECT_GT(redistribute_cost_us(spec("S(0)S(0)", kW), spec("RS(0)", kW), mesh,
                                 CommModel::kDtensor),
            2 * dt);
  const RedistributePlan dplan =
      plan_redistribute_dtensor(spec("_S(0,8)S(0)", kW), spec("RS(0)", kW), mesh);
  ASSERT_EQ(dplan.num_steps, 1);
  EXPECT_EQ(dplan.steps[0].dim, 0);
}

// Changing only the order of one tensor dim's cuts moves data: undo to the common prefix.
TEST(RedistributeOrder, ReorderingNeedsGathers) {
  Mesh mesh = make_mesh({2, 4}, "a100");
  const double d = kWBytes;
  // S(0)S(0) (dp outer) -> _S(0,4)S(0) (tp outer): no common prefix, gather tp then dp (the
  // innermost first), then slice tp, then dp.
  RedistributePlan plan = plan_redistribute(spec("S(0)S(0)", kW), spec("_S(0,4)S(0)", kW), mesh);
  ASSERT_EQ(plan.num_steps, 2);
  EXPECT_EQ(plan.steps[0].dim, 1);
  EXPECT_DOUBLE_EQ(plan.steps[0].bytes, d / 2);
  EXPECT_EQ(plan.steps[1].dim, 0);
  EXPECT_DOUBLE_EQ(plan.steps[1].bytes, d);
  // On three mesh dims, S(0)RS(0) is cut by mesh dims 0, 2.  Adding mesh dim 1 innermost
  // (order 0, 2, 1: S(0)_S(0,2)S(0)) is a free slice; adding it between them (the default
  // order 0, 1, 2) first undoes mesh dim 2's cut.
  Mesh three = make_mesh({2, 2, 2}, "a100");
  EXPECT_EQ(redistribute_cost_us(spec("S(0)RS(0)", kW), spec("S(0)_S(0,2)S(0)", kW), three), 0.0);
  EXPECT_DOUBLE_EQ(redistribute_cost_us(spec("S(0)RS(0)", kW), spec("S(0)S(0)S(0)", kW), three),
                   all_gather_us(d / 2, three, 2));
  EXPECT_GT(redistribute_cost_us(spec("S(0)RS(0)", kW), spec("_S(0,2)S(0)S(0)", kW), three), 0.0);
}

TEST(RedistributeOrder, UndecodableSplitFactorsThrow) {
  Mesh mesh = make_mesh({2, 4});
  EXPECT_THROW(redistribute_cost_us(spec("_S(0,3)S(0)", kW), spec("RR", kW), mesh),
               std::invalid_argument);
  EXPECT_THROW(redistribute_cost_us(spec("RR", kW), spec("_S(0,2)S(1)", kW), mesh,
                                    CommModel::kDtensor),
               std::invalid_argument);
}

/// Every spec of a rank-2 tensor on `mesh` from R, S(0), S(1), P(sum), in every shard order.
std::vector<std::vector<Placement>> all_ordered_specs(const Mesh& mesh) {
  const std::vector<Placement> options = {Placement::replicate(), Placement::shard(0),
                                          Placement::shard(1), Placement::partial()};
  std::vector<std::vector<Placement>> plain{{}};
  for (int32_t m = 0; m < mesh.ndim(); ++m) {
    std::vector<std::vector<Placement>> next;
    for (const auto& p : plain)
      for (const auto& o : options) {
        next.push_back(p);
        next.back().push_back(o);
      }
    plain = std::move(next);
  }
  std::vector<std::vector<Placement>> out;
  for (const auto& p : plain) {
    ShardOrder base = *decode_shard_order(p, mesh);
    // Every combination of permutations of each entry.
    std::vector<ShardOrder> orders{base};
    for (size_t e = 0; e < base.size(); ++e) {
      std::vector<ShardOrder> more;
      for (const ShardOrder& o : orders) {
        std::vector<int32_t> perm = base[e].mesh_dims;
        std::sort(perm.begin(), perm.end());
        do {
          more.push_back(o);
          more.back()[e].mesh_dims = perm;
        } while (std::next_permutation(perm.begin(), perm.end()));
      }
      orders = std::move(more);
    }
    for (const ShardOrder& o : orders) out.push_back(encode_shard_order(p, o, mesh));
  }
  return out;
}

// Every pair of ordered specs gets a schedule in both profiles; impossible exactly when a mesh
// dim goes S -> P or P(x) -> P(y) (nccl); equal specs cost 0; a plan never needs more than the
// full gather-reduce-scatter.
TEST(RedistributeOrder, AllOrderedPairsHaveSchedules) {
  Mesh mesh = make_mesh({2, 2, 2}, "a100");
  const auto all = all_ordered_specs(mesh);
  // 64 plain specs; 18 with one tensor dim cut twice have a second order, 2 with one cut three
  // times have 5 more: 92.
  EXPECT_EQ(all.size(), 92u);
  const TensorMeta meta{{64, 32}, DType::kF32};
  int dtensor_checked = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = 0; j < all.size(); ++j) {
      const ShardingSpec from{all[i], meta}, to{all[j], meta};
      bool possible = true;
      for (size_t m = 0; m < 3; ++m)
        if (all[i][m].is_shard() && all[j][m].is_partial()) possible = false;
      double c = 0;
      ASSERT_NO_THROW(c = redistribute_cost_us(from, to, mesh))
          << from.to_string() << " -> " << to.to_string();
      EXPECT_EQ(std::isinf(c), !possible) << from.to_string() << " -> " << to.to_string();
      if (i == j) {
        EXPECT_EQ(c, 0.0);
      }
      if (possible) {
        EXPECT_LE(redistribute_bytes(from, to, mesh), 3.0 * 2 * static_cast<double>(meta.bytes()));
      }
      if ((i * all.size() + j) % 7 == 0) {  // a sample through DTensor's planner
        double dt = 0;
        ASSERT_NO_THROW(dt = redistribute_cost_us(from, to, mesh, CommModel::kDtensor))
            << from.to_string() << " -> " << to.to_string();
        EXPECT_GE(dt, 0.0);
        if (i == j) {
          EXPECT_EQ(dt, 0.0);
        }
        ++dtensor_checked;
      }
    }
  }
  EXPECT_GT(dtensor_checked, 1000);
}

}  // namespace
}  // namespace autoshard

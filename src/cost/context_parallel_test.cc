#include "cost/context_parallel.h"

#include <gtest/gtest.h>

#include "cost/test_util.h"

namespace autoshard {
namespace {

using testing::make_mesh;

// Hand-computed on h100, one 4-rank NVLink dim: bus bandwidth 370 GB/s = 370e3 B/us, hop
// latency 0.6 us, ring base latency 6.6 us (mesh/hardware.cc, cost/collective.h).

CpAttentionInput ring(double compute_us, double kv_bytes) {
  CpAttentionInput in;
  in.kind = CpKind::kRing;
  in.compute_us = compute_us;
  in.kv_bytes = kv_bytes;
  return in;
}

TEST(CpKind, NamesRoundTrip) {
  for (CpKind k : {CpKind::kRing, CpKind::kAllGather}) EXPECT_EQ(parse_cp_kind(cp_kind_name(k)), k);
  EXPECT_EQ(cp_kind_name(CpKind::kAllGather), "allgather");
  EXPECT_FALSE(parse_cp_kind("alltoall").has_value());
}

TEST(CpAttention, HopIsLatencyPlusBytesOverBusBandwidth) {
  const Mesh m = make_mesh({4});
  EXPECT_NEAR(p2p_hop_us(37e6, m, 0), 0.6 + 100.0, 1e-9);
  EXPECT_DOUBLE_EQ(p2p_hop_us(37e6, make_mesh({1}), 0), 0.0);
  // dtensor: 0.6 us + GiB / 87.7 GB/s.
  EXPECT_NEAR(p2p_hop_us(1024.0 * 1024 * 1024, m, 0, CommModel::kDtensor), 0.6 + 1e6 / 87.7, 1e-6);
}

TEST(CpAttention, RingHidesTransfersShorterThanAChunk) {
  // C = 1000 us, c = 250 per step; t = 100.6: (P-1) max(c, t) + c = C, nothing exposed.
  const CpAttentionTime t = cp_attention_time(ring(1000, 37e6), make_mesh({4}), 0);
  EXPECT_NEAR(t.compute_us, 1000, 1e-9);
  EXPECT_NEAR(t.exposed_us, 0, 1e-9);
  EXPECT_NEAR(t.transfer_us, 3 * 100.6, 1e-9);
  EXPECT_NEAR(t.total_us(), 1000, 1e-9);
}

TEST(CpAttention, RingExposesTransferMinusComputePerStep) {
  // t = 0.6 + 370e6 / 370e3 = 1000.6 > c = 250: 3 x 1000.6 + 250 = 3251.8.
  const CpAttentionTime t = cp_attention_time(ring(1000, 370e6), make_mesh({4}), 0);
  EXPECT_NEAR(t.total_us(), 3251.8, 1e-9);
  EXPECT_NEAR(t.exposed_us, 3 * (1000.6 - 250), 1e-9);
  EXPECT_NEAR(t.transfer_us, 3 * 1000.6, 1e-9);
}

TEST(CpAttention, UnbalancedCausalRingIsPricedByTheLastRank) {
  // Without the head-tail layout the last rank computes its diagonal chunk (250) and three
  // full chunks (500 each): 1750 = C (2P-1)/P; the lock-step ring takes as long.
  CpAttentionInput in = ring(1000, 37e6);
  in.causal = true;
  in.load_balance = false;
  const CpAttentionTime t = cp_attention_time(in, make_mesh({4}), 0);
  EXPECT_NEAR(t.compute_us, 1750, 1e-9);
  EXPECT_NEAR(t.total_us(), 1750, 1e-9);
  in.load_balance = true;
  EXPECT_NEAR(cp_attention_time(in, make_mesh({4}), 0).total_us(), 1000, 1e-9);
  // Non-causal attention is balanced with or without the layout.
  in.causal = false;
  in.load_balance = false;
  EXPECT_NEAR(cp_attention_time(in, make_mesh({4}), 0).total_us(), 1000, 1e-9);
}

TEST(CpAttention, RingBackwardPassesKvAndGradsThenSendsGradsHome) {
  // Per step K/V and dK/dV: t = 0.6 + 74e6 / 370e3 = 200.6 < c = 625; the last hop of dK/dV
  // (100.6) is exposed.
  CpAttentionInput in = ring(2500, 37e6);
  in.backward = true;
  in.dkv_bytes = 37e6;
  const CpAttentionTime t = cp_attention_time(in, make_mesh({4}), 0);
  EXPECT_NEAR(t.compute_us, 2500, 1e-9);
  EXPECT_NEAR(t.exposed_us, 100.6, 1e-9);
  EXPECT_NEAR(t.transfer_us, 3 * 200.6 + 100.6, 1e-9);
}

TEST(CpAttention, AllGatherHidesBehindTheLocalChunkOnly) {
  // all_gather of 4 x 37e6 B: 6.6 + 3 x 0.6 + 3/4 x 148e6 / 370e3 = 308.4, behind the local
  // chunk's 250 us: 58.4 exposed.
  CpAttentionInput in = ring(1000, 37e6);
  in.kind = CpKind::kAllGather;
  const CpAttentionTime f = cp_attention_time(in, make_mesh({4}), 0);
  EXPECT_NEAR(f.transfer_us, 308.4, 1e-9);
  EXPECT_NEAR(f.exposed_us, 58.4, 1e-9);
  EXPECT_NEAR(f.total_us(), 1058.4, 1e-9);
  // The backward gathers K/V again (58.4 exposed) and reduce-scatters dK/dV (same size) after.
  in.backward = true;
  in.dkv_bytes = 37e6;
  const CpAttentionTime b = cp_attention_time(in, make_mesh({4}), 0);
  EXPECT_NEAR(b.exposed_us, 58.4 + 308.4, 1e-9);
  EXPECT_NEAR(b.transfer_us, 616.8, 1e-9);
  // A chunk longer than the gather hides it entirely.
  in.backward = false;
  in.compute_us = 4000;
  EXPECT_NEAR(cp_attention_time(in, make_mesh({4}), 0).exposed_us, 0, 1e-9);
}

TEST(CpAttention, OneRankIsPlainAttention) {
  const CpAttentionTime t = cp_attention_time(ring(1000, 37e6), make_mesh({1}), 0);
  EXPECT_DOUBLE_EQ(t.total_us(), 1000);
  EXPECT_DOUBLE_EQ(t.transfer_us, 0);
}

TEST(CpBuffers, RingDoubleBuffersAllGatherHoldsTheWholeSequence) {
  // kv = 8 MB of K/V shards, dkv = 6 MB of dK/dV shards per rank.
  CpAttentionInput in = ring(1000, 8e6);
  // Ring forward: P = 2 receives one chunk (the last), P >= 3 holds the current chunk and the
  // next in flight: 8 MB, then 2 x 8 = 16 MB whatever P.
  EXPECT_EQ(cp_buffer_bytes(in, 2), 8'000'000);
  EXPECT_EQ(cp_buffer_bytes(in, 3), 16'000'000);
  EXPECT_EQ(cp_buffer_bytes(in, 8), 16'000'000);
  // Ring backward: + the dK/dV accumulator and the one in flight, 2 x 6 = 12 MB.
  in.backward = true;
  in.dkv_bytes = 6e6;
  EXPECT_EQ(cp_buffer_bytes(in, 2), 20'000'000);
  EXPECT_EQ(cp_buffer_bytes(in, 8), 28'000'000);
  // All-gather backward: P x (kv + dkv) = 4 x 14 MB; forward P x kv = 4 x 8 MB.
  in.kind = CpKind::kAllGather;
  EXPECT_EQ(cp_buffer_bytes(in, 4), 56'000'000);
  in.backward = false;
  EXPECT_EQ(cp_buffer_bytes(in, 4), 32'000'000);
  // Ring holds less than all-gather from P = 2 on (1 vs 2 chunks there).
  for (int64_t p : {2, 3, 4, 8}) {
    CpAttentionInput r = in;
    r.kind = CpKind::kRing;
    EXPECT_LT(cp_buffer_bytes(r, p), cp_buffer_bytes(in, p)) << p;
  }
  // One rank: plain attention, nothing extra.
  EXPECT_EQ(cp_buffer_bytes(in, 1), 0);
}

}  // namespace
}  // namespace autoshard

#include "pipeline/pipeline_timeline.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace autoshard {
namespace {

StageTimes equal_stages(int32_t S, double f, double b, double p2p = 0, double w = 0) {
  return {std::vector<double>(static_cast<size_t>(S), f), std::vector<double>(static_cast<size_t>(S), b),
          std::vector<double>(static_cast<size_t>(S), w), p2p};
}

/// Most microbatches whose forward ran and backward did not, on one rank, in stage units.
int32_t peak_inflight(const PipelineTimeline& tl, int32_t rank) {
  int32_t live = 0, peak = 0;
  for (const PipelineOp& o : tl.ops) {
    if (o.rank != rank) continue;
    live += o.backward() ? -1 : 1;
    peak = std::max(peak, live);
  }
  return peak;
}

TEST(PipelineTimeline, GPipeAndOneFOneBTakeMPlusPMinusOneStages) {
  // Equal stages: (M + P - 1) (f + b), the closed form of pipeline_schedule.h.
  for (auto s : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    for (auto [P, M] : {std::pair{4, 8}, std::pair{4, 2}, std::pair{1, 3}, std::pair{3, 7}}) {
      PipelineTimeline tl = schedule_timeline(s, P, 1, M, equal_stages(P, 1.0, 2.0));
      EXPECT_DOUBLE_EQ(tl.makespan_us, (M + P - 1) * 3.0) << schedule_name(s) << P << M;
      EXPECT_DOUBLE_EQ(tl.makespan_us,
                       pipelined_step_us(std::vector<double>(P, 3.0), P, 1, M));
      EXPECT_EQ(tl.ops.size(), static_cast<size_t>(2 * P * M));
    }
  }
}

TEST(PipelineTimeline, InterleavedBubbleShrinksByV) {
  // P = 4 ranks, v = 2 chunks each, M = 8: each chunk costs 1/v of the rank's f and b.
  const int32_t P = 4, v = 2, M = 8;
  PipelineTimeline tl = schedule_timeline(PipelineSchedule::kInterleaved1F1B, P, v, M,
                                          equal_stages(P * v, 0.5, 0.5));
  const double rank_us = 2.0;  // f + b of one rank's two chunks
  EXPECT_DOUBLE_EQ(tl.makespan_us, M * rank_us + (P - 1) * rank_us / v);
  EXPECT_DOUBLE_EQ(tl.makespan_us,
                   pipelined_step_us(std::vector<double>(P * v, 1.0), P, v, M));
  EXPECT_LT(tl.makespan_us, schedule_timeline(PipelineSchedule::k1F1B, P, 1, M,
                                              equal_stages(P, 1.0, 1.0)).makespan_us);
}

TEST(PipelineTimeline, InflightActivationsMatchTheScheduleFormula) {
  for (auto [s, P, v, M] : {std::tuple{PipelineSchedule::k1F1B, 4, 1, 8},
                            std::tuple{PipelineSchedule::k1F1B, 4, 1, 2},
                            std::tuple{PipelineSchedule::kGPipe, 4, 1, 6},
                            std::tuple{PipelineSchedule::kInterleaved1F1B, 4, 2, 8},
                            std::tuple{PipelineSchedule::kInterleaved1F1B, 2, 3, 4}}) {
    PipelineTimeline tl = schedule_timeline(s, P, v, M, equal_stages(P * v, 1.0, 2.0));
    for (int32_t r = 0; r < P; ++r)  // the formula counts whole-rank microbatches (v stages)
      EXPECT_DOUBLE_EQ(peak_inflight(tl, r) / static_cast<double>(v),
                       inflight_microbatches(s, P, v, M, r))
          << schedule_name(s) << " P=" << P << " v=" << v << " M=" << M << " rank " << r;
  }
}

TEST(PipelineTimeline, DependenciesHoldAndTransfersAreCharged) {
  // Unequal stages and a transfer: every op starts after its inputs (+ p2p across ranks) and
  // after the rank's previous op; the last stage's first forward waits for the transfers.
  const int32_t P = 3, M = 4;
  StageTimes t{{1.0, 3.0, 2.0}, {2.0, 5.0, 4.0}, {}, 0.25};
  PipelineTimeline tl = schedule_timeline(PipelineSchedule::k1F1B, P, 1, M, t);
  auto find = [&](int32_t stage, int32_t mb, bool backward) {
    return *std::find_if(tl.ops.begin(), tl.ops.end(), [&](const PipelineOp& o) {
      return o.stage == stage && o.microbatch == mb && o.backward() == backward;
    });
  };
  EXPECT_DOUBLE_EQ(find(2, 0, false).start_us, 1.0 + 0.25 + 3.0 + 0.25);
  for (const PipelineOp& o : tl.ops) {
    if (!o.backward() && o.stage > 0) {
      EXPECT_GE(o.start_us, find(o.stage - 1, o.microbatch, false).end_us + 0.25);
    }
    if (o.backward() && o.stage < P - 1) {
      EXPECT_GE(o.start_us, find(o.stage + 1, o.microbatch, true).end_us + 0.25);
    }
    if (o.backward()) {
      EXPECT_GE(o.start_us, find(o.stage, o.microbatch, false).end_us);
    }
  }
  // The middle stage is the bottleneck: its 4 microbatches run back to back at the end.
  EXPECT_GE(tl.makespan_us, M * (3.0 + 5.0));
}

/// A rank's order as "stage{F|I|W}microbatch ..." (torch's action notation, I = our B).
std::string order_string(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank) {
  std::string out;
  for (const PipelineOp& o : rank_op_order(s, P, v, M, rank)) {
    if (!out.empty()) out += ' ';
    out += std::to_string(o.stage) +
           (o.kind == PipeOpKind::kF ? "F" : o.kind == PipeOpKind::kB ? "I" : o.kind == PipeOpKind::kW ? "W" : "B") +
           std::to_string(o.microbatch);
  }
  return out;
}

TEST(PipelineTimeline, ZeroBubbleOrdersAreTorchs) {
  // What torch 2.13's torch.distributed.pipelining._schedule_visualizer.get_schedule_ops
  // returns (None slots dropped) for ("InterleavedZeroBubble", P=3, M=3, v=2) and
  // ("ZBVZeroBubble", P=2, M=3): the orders were checked this way for P 2..8, M 1..16, v 2..4.
  const std::vector<std::string> zb1p{
      "0F0 0F1 0F2 3F0 3F1 3F2 3I0 3W0 3I1 3W1 3I2 3W2 0I0 0W0 0I1 0W1 0I2 0W2",
      "1F0 1F1 1F2 4F0 4F1 4I0 4F2 4I1 4W0 4I2 4W1 1I0 4W2 1I1 1W0 1I2 1W1 1W2",
      "2F0 2F1 2F2 5F0 5I0 5F1 5I1 5F2 5I2 5W0 2I0 5W1 2I1 5W2 2I2 2W0 2W1 2W2"};
  for (int32_t r = 0; r < 3; ++r)
    EXPECT_EQ(order_string(PipelineSchedule::kInterleavedZeroBubble, 3, 2, 3, r), zb1p[static_cast<size_t>(r)]);
  const std::vector<std::string> zbv{
      "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 3F2 3I2 3W2 0I1 0W1 0I2 0W2",
      "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1I1 2I2 1I2 1W1 2W2 1W2"};
  for (int32_t r = 0; r < 2; ++r)
    EXPECT_EQ(order_string(PipelineSchedule::kZBVZeroBubble, 2, 2, 3, r), zbv[static_cast<size_t>(r)]);
  // ("DualPipeV", P=2, M=4), its overlapped pairs (OVERLAP_F_B) flattened in their order; B is
  // a FULL_BACKWARD (input and weight gradients in one op).
  const std::vector<std::string> dpv{
      "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3",
      "1F0 2F0 1F1 2F1 1F2 2B0 2F2 1B0 1F3 2B1 2F3 1B1 2B2 1B2 2I3 1I3 2W3 1W3"};
  for (int32_t r = 0; r < 2; ++r)
    EXPECT_EQ(order_string(PipelineSchedule::kDualPipeV, 2, 2, 4, r), dpv[static_cast<size_t>(r)]);
}

TEST(PipelineTimeline, DualPipeVIsZeroBubbleWithEqualPhases) {
  // f = b = w per stage, M >= 2P (torch's requirement): the same makespan as ZB-V, the formula
  // of pipeline_schedule.h; every (stage, microbatch) runs F and either one whole backward
  // or B then W; in flight counted on the order.
  const auto s = PipelineSchedule::kDualPipeV;
  for (auto [P, M] : {std::pair{2, 4}, std::pair{3, 6}, std::pair{4, 8}, std::pair{4, 13}, std::pair{8, 16}}) {
    const PipelineTimeline tl = schedule_timeline(s, P, 2, M, equal_stages(2 * P, 0.5, 0.5, 0, 0.5));
    EXPECT_NEAR(tl.makespan_us, M * 3.0 + (P - 1) * 1.0 / 2, 1e-9) << P << " " << M;
    std::map<std::pair<int32_t, int32_t>, std::string> kinds;
    for (const PipelineOp& o : tl.ops) {
      kinds[{o.stage, o.microbatch}] += o.kind == PipeOpKind::kF ? "F" : o.kind == PipeOpKind::kB ? "I"
                                        : o.kind == PipeOpKind::kW ? "W" : "B";
      EXPECT_EQ(o.rank, stage_rank(s, P, o.stage));
    }
    ASSERT_EQ(kinds.size(), static_cast<size_t>(2 * P * M));
    for (const auto& [key, k] : kinds) EXPECT_TRUE(k == "FB" || k == "FIW") << key.first << " " << key.second << " " << k;
  }
  EXPECT_NE(schedule_problem(s, 4, 2, 7), "");  // fewer microbatches than stages
  EXPECT_GT(inflight_microbatches(s, 4, 2, 8, 0), 0);
}

/// Stages of cost c each, a third forward and two thirds backward (w: that share of the backward
/// deferred to W).
StageTimes stages_of(const std::vector<double>& c, double w_share = 0) {
  StageTimes t;
  for (double x : c) {
    t.forward_us.push_back(x / 3);
    t.backward_us.push_back(2 * x / 3 * (1 - w_share));
    t.weight_us.push_back(2 * x / 3 * w_share);
  }
  return t;
}

TEST(PipelineTimeline, TheFormulaIsNoBoundOfTheTimelineForUnevenStages) {
  // Interleaved 1F1B, P = 2, v = 2, equal rank sums 8: the formula says the same for the equal
  // and the uneven chunks; the timeline runs the uneven ones longer (rank 1 waits for rank 0's
  // long chunk; issue 25's 70B split is this).
  const auto i1 = PipelineSchedule::kInterleaved1F1B;
  const std::vector<double> equal{4, 4, 4, 4}, uneven{1, 7, 7, 1};
  EXPECT_DOUBLE_EQ(pipelined_step_us(equal, 2, 2, 4), pipelined_step_us(uneven, 2, 2, 4));
  EXPECT_NEAR(schedule_timeline(i1, 2, 2, 4, stages_of(equal)).makespan_us, pipelined_step_us(equal, 2, 2, 4), 1e-9);
  EXPECT_GT(schedule_timeline(i1, 2, 2, 4, stages_of(uneven)).makespan_us, pipelined_step_us(uneven, 2, 2, 4) + 1);
  // And no upper bound either: 1F1B with its slowest stage first runs below Alpa's latency.
  const std::vector<double> slow_first{3, 1, 1, 1};
  EXPECT_LT(schedule_timeline(PipelineSchedule::k1F1B, 4, 1, 4, stages_of(slow_first)).makespan_us,
            pipelined_step_us(slow_first, 4, 1, 4) - 1);
}

TEST(PipelineTimeline, TheBusiestRanksWorkBoundsEverySplit) {
  // The planner's bound (pipeline/pipeline.cc busiest_rank_bound): M times the busiest rank's
  // stage costs, the formula with no fill-and-drain, is at most the timeline for any stages;
  // so is each rank's work after the stages before it.
  uint64_t x = 12345;
  auto next = [&x] { x = x * 6364136223846793005ULL + 1442695040888963407ULL; return static_cast<int32_t>(x >> 33); };
  for (PipelineSchedule s : all_schedules())
    for (int32_t i = 0; i < 40; ++i) {
      const int32_t P = 2 + next() % 4, v = stages_per_rank_options(s).front() == 1 ? 1 : (v_shaped(s) ? 2 : 2 + next() % 3);
      int32_t M = P * (1 + next() % 3);
      if (s == PipelineSchedule::kDualPipeV) M = std::max(M, 2 * P);
      std::vector<double> c;
      for (int32_t k = 0; k < P * v; ++k) c.push_back(1 + next() % 9);
      const double tl = schedule_timeline(s, P, v, M, stages_of(c, splits_backward(s) ? 0.5 : 0)).makespan_us;
      EXPECT_LE(pipelined_step_us(s, c, P, v, M, 0.0), tl + 1e-9) << schedule_name(s) << " " << P << " " << v << " " << M;
      // The stages before rank r's first (stage r) fill ahead of its work: their forwards, and
      // with whole backwards their backwards drain after it (split_ranks_head_bound,
      // split_ranks_head_tail_bound); a third of each stage is its forward here.
      double before = 0;
      for (int32_t r = 0; r < P; ++r) {
        double R = 0;
        for (int32_t q = 0; q < P * v; ++q)
          if (stage_rank(s, P, q) == r) R += c[static_cast<size_t>(q)];
        EXPECT_LE(M * R + before, tl + 1e-9) << schedule_name(s) << " " << P << " " << v << " " << M << " rank " << r;
        before += splits_backward(s) ? c[static_cast<size_t>(r)] / 3 : c[static_cast<size_t>(r)];
      }
    }
}

TEST(PipelineTimeline, ZeroBubbleMakespanIsTheFormula) {
  // Equal stages, rank times f, b, w (each of the v stages 1/v of them): the timeline of
  // torch's ZB1P order is M (f + b + w) + (P - 1) max(f + b - w, f, b) / v for any phase mix,
  // and pipelined_step_us with bubble_factor says the same.
  const auto s = PipelineSchedule::kInterleavedZeroBubble;
  for (auto [P, v, M] : {std::tuple{4, 2, 8}, std::tuple{4, 3, 8}, std::tuple{2, 2, 4}, std::tuple{8, 2, 16},
                         std::tuple{3, 4, 6}}) {
    for (auto [f, b, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{1.0, 2.0, 1.0}, std::tuple{1.0, 1.0, 2.0},
                           std::tuple{2.0, 1.0, 1.0}, std::tuple{1.0, 2.0, 0.5}, std::tuple{0.3, 1.0, 1.0}}) {
      const int32_t S = P * v;
      const PipelineTimeline tl = schedule_timeline(s, P, v, M, equal_stages(S, f / v, b / v, 0, w / v));
      const double bubble = (P - 1) * std::max({f + b - w, f, b}) / v;
      EXPECT_NEAR(tl.makespan_us, M * (f + b + w) + bubble, 1e-9) << P << v << M << " " << f << b << w;
      const std::vector<double> fs(static_cast<size_t>(S), f / v), bs(static_cast<size_t>(S), b / v),
          ws(static_cast<size_t>(S), w / v), c(static_cast<size_t>(S), (f + b + w) / v);
      EXPECT_NEAR(pipelined_step_us(s, c, P, v, M, bubble_factor(s, fs, bs, ws)), tl.makespan_us, 1e-9);
    }
  }
}

TEST(PipelineTimeline, ZbvIsZeroBubbleWithEqualPhases) {
  // f = b = w per stage and M >= 2P - 2: the V schedule's timeline is the same formula; with
  // W at zero it degenerates to interleaved 1F1B's (P - 1)(f + b) / 2 fill and drain.
  const auto s = PipelineSchedule::kZBVZeroBubble;
  for (auto [P, M] : {std::pair{4, 8}, std::pair{4, 6}, std::pair{2, 4}, std::pair{8, 16}, std::pair{3, 9}}) {
    const PipelineTimeline tl = schedule_timeline(s, P, 2, M, equal_stages(2 * P, 0.5, 0.5, 0, 0.5));
    EXPECT_NEAR(tl.makespan_us, M * 3.0 + (P - 1) * 1.0 / 2, 1e-9) << P << " " << M;
    const PipelineTimeline no_w = schedule_timeline(s, P, 2, M, equal_stages(2 * P, 0.5, 0.5, 0, 0.0));
    EXPECT_NEAR(no_w.makespan_us, M * 2.0 + (P - 1) * 2.0 / 2, 1e-9) << P << " " << M;
  }
  // Unequal phases: longer than the formula (the order assumes equal phases), never shorter.
  const PipelineTimeline tl = schedule_timeline(s, 4, 2, 8, equal_stages(8, 1.0, 0.5, 0, 0.5));
  EXPECT_GT(tl.makespan_us, 8 * 4.0 + 3 * std::max({2.0 + 1.0 - 1.0, 2.0, 1.0}) / 2);
}

TEST(PipelineTimeline, ZeroBubbleOrdersRunEveryOpOnceInDependencyOrder) {
  // Every F, B and W of every (stage, microbatch) once, on its V or looped rank; W after its B,
  // B after its F and the next stage's B; the W times are charged to W, not to B.
  for (auto [s, P, v, M] : {std::tuple{PipelineSchedule::kZBVZeroBubble, 4, 2, 5},
                            std::tuple{PipelineSchedule::kZBVZeroBubble, 3, 2, 2},
                            std::tuple{PipelineSchedule::kInterleavedZeroBubble, 4, 2, 8},
                            std::tuple{PipelineSchedule::kInterleavedZeroBubble, 3, 2, 4}}) {
    const PipelineTimeline tl = schedule_timeline(s, P, v, M, equal_stages(P * v, 1.0, 2.0, 0.5, 3.0));
    ASSERT_EQ(tl.ops.size(), static_cast<size_t>(3 * P * v * M)) << schedule_name(s);
    auto find = [&](int32_t stage, int32_t mb, PipeOpKind k) {
      return *std::find_if(tl.ops.begin(), tl.ops.end(), [&](const PipelineOp& o) {
        return o.stage == stage && o.microbatch == mb && o.kind == k;
      });
    };
    for (const PipelineOp& o : tl.ops) {
      EXPECT_EQ(o.rank, stage_rank(s, P, o.stage));
      const double len = o.kind == PipeOpKind::kF ? 1.0 : o.kind == PipeOpKind::kB ? 2.0 : 3.0;
      EXPECT_DOUBLE_EQ(o.end_us - o.start_us, len);
      if (o.kind == PipeOpKind::kW) {
        EXPECT_GE(o.start_us, find(o.stage, o.microbatch, PipeOpKind::kB).end_us);
      }
      if (o.kind == PipeOpKind::kB && o.stage + 1 < P * v) {
        EXPECT_GE(o.start_us, find(o.stage + 1, o.microbatch, PipeOpKind::kB).end_us);
      }
    }
  }
  EXPECT_EQ(stage_rank(PipelineSchedule::kZBVZeroBubble, 4, 7), 0);  // the V: last stage on rank 0
  EXPECT_EQ(stage_rank(PipelineSchedule::kZBVZeroBubble, 4, 4), 3);
}

TEST(PipelineTimeline, ZeroBubbleInflightIsCountedOnTheOrder) {
  // The schedule's in-flight figures are the peaks of the order (live from F to W, deferred
  // from B to W), e.g. ZB1P P = 4, v = 2, M = 8: every rank holds 8 stage-microbatches = 4
  // ranks' worth (1F1B's rank 0), and rank r defers r + 1 W; ZB-V rank r defers 2r + 1.
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kInterleavedZeroBubble, 4, 2, 8, r), 4.0);
    EXPECT_DOUBLE_EQ(deferred_microbatches(PipelineSchedule::kInterleavedZeroBubble, 4, 2, 8, r), (r + 1) / 2.0);
    EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kZBVZeroBubble, 4, 2, 8, r), 4.0);
    EXPECT_DOUBLE_EQ(deferred_microbatches(PipelineSchedule::kZBVZeroBubble, 4, 2, 8, r), (2 * r + 1) / 2.0);
  }
  EXPECT_DOUBLE_EQ(deferred_microbatches(PipelineSchedule::k1F1B, 4, 1, 8, 0), 0.0);
  // The peak of a timeline's own ops (all ranks' orders) agrees.
  const PipelineTimeline tl = schedule_timeline(PipelineSchedule::kZBVZeroBubble, 3, 2, 4, equal_stages(6, 1, 1, 0, 1));
  for (int32_t r = 0; r < 3; ++r) {
    std::vector<PipelineOp> mine;
    for (const PipelineOp& o : tl.ops)
      if (o.rank == r) mine.push_back(o);
    EXPECT_DOUBLE_EQ(order_inflight_peak(mine, PipelineSchedule::kZBVZeroBubble).live / 2.0,
                     inflight_microbatches(PipelineSchedule::kZBVZeroBubble, 3, 2, 4, r));
  }
}

TEST(PipelineTimeline, RejectsWhatTheScheduleCannotRun) {
  EXPECT_THROW(rank_op_order(PipelineSchedule::kZBVZeroBubble, 4, 3, 8, 0), std::invalid_argument);
  EXPECT_THROW(rank_op_order(PipelineSchedule::kInterleavedZeroBubble, 3, 2, 10, 0),
               std::invalid_argument);  // 10 microbatches, 3 rounds
  EXPECT_THROW(rank_op_order(PipelineSchedule::kInterleaved1F1B, 4, 2, 6, 0),
               std::invalid_argument);  // M not a multiple of P
  EXPECT_THROW(schedule_timeline(PipelineSchedule::k1F1B, 2, 1, 4, equal_stages(3, 1, 1)),
               std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

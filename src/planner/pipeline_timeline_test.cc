#include "planner/pipeline_timeline.h"

#include <algorithm>
#include <tuple>

#include <gtest/gtest.h>

namespace autoshard {
namespace {

StageTimes equal_stages(int32_t S, double f, double b, double p2p = 0) {
  return {std::vector<double>(static_cast<size_t>(S), f),
          std::vector<double>(static_cast<size_t>(S), b), p2p};
}

/// Most microbatches whose forward ran and backward did not, on one rank, in stage units.
int32_t peak_inflight(const PipelineTimeline& tl, int32_t rank) {
  int32_t live = 0, peak = 0;
  for (const PipelineOp& o : tl.ops) {
    if (o.rank != rank) continue;
    live += o.backward ? -1 : 1;
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
  StageTimes t{{1.0, 3.0, 2.0}, {2.0, 5.0, 4.0}, 0.25};
  PipelineTimeline tl = schedule_timeline(PipelineSchedule::k1F1B, P, 1, M, t);
  auto find = [&](int32_t stage, int32_t mb, bool backward) {
    return *std::find_if(tl.ops.begin(), tl.ops.end(), [&](const PipelineOp& o) {
      return o.stage == stage && o.microbatch == mb && o.backward == backward;
    });
  };
  EXPECT_DOUBLE_EQ(find(2, 0, false).start_us, 1.0 + 0.25 + 3.0 + 0.25);
  for (const PipelineOp& o : tl.ops) {
    if (!o.backward && o.stage > 0) {
      EXPECT_GE(o.start_us, find(o.stage - 1, o.microbatch, false).end_us + 0.25);
    }
    if (o.backward && o.stage < P - 1) {
      EXPECT_GE(o.start_us, find(o.stage + 1, o.microbatch, true).end_us + 0.25);
    }
    if (o.backward) {
      EXPECT_GE(o.start_us, find(o.stage, o.microbatch, false).end_us);
    }
  }
  // The middle stage is the bottleneck: its 4 microbatches run back to back at the end.
  EXPECT_GE(tl.makespan_us, M * (3.0 + 5.0));
}

TEST(PipelineTimeline, RejectsWhatTheScheduleCannotRun) {
  EXPECT_THROW(rank_op_order(PipelineSchedule::kInterleaved1F1B, 4, 2, 6, 0),
               std::invalid_argument);  // M not a multiple of P
  EXPECT_THROW(schedule_timeline(PipelineSchedule::k1F1B, 2, 1, 4, equal_stages(3, 1, 1)),
               std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

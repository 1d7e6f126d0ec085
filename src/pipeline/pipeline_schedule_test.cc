// Golden values of the schedule formulas, computed by hand in the comments.
#include "pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

TEST(PipelineSchedule, EqualStagesHaveTheGPipeBubble) {
  // P = 4 stages of 10 us, M = 8: (M + P - 1) * 10 = 110; bubble (P - 1) * 10 = 30.
  const std::vector<double> c(4, 10.0);
  EXPECT_DOUBLE_EQ(pipelined_step_us(c, 4, 1, 8), 110.0);
  EXPECT_DOUBLE_EQ(bubble_us(c, 4, 1, 8), 30.0);
}

TEST(PipelineSchedule, UnequalStagesFollowAlpasLatency) {
  // sum 50 + (M - 1) * max 20 = 50 + 60 = 110.
  EXPECT_DOUBLE_EQ(pipelined_step_us({10, 20, 10, 10}, 4, 1, 4), 110.0);
}

TEST(PipelineSchedule, InterleavingDividesTheBubbleByV) {
  // P = 2, v = 2, four stages of 5 us: ranks hold 10 us each; M * 10 + (20 - 10) / 2 = 45,
  // i.e. the bubble 5 = (P - 1) / (v M) of the ideal 40 (Narayanan et al., SC'21).
  const std::vector<double> c(4, 5.0);
  EXPECT_DOUBLE_EQ(pipelined_step_us(c, 2, 2, 4), 45.0);
  EXPECT_DOUBLE_EQ(bubble_us(c, 2, 2, 4) / (4 * 10.0), 1.0 / 8);
  // Stage i runs on rank i mod P: {1, 9, 1, 9} puts 18 on rank 1: 4 * 18 + (20 - 18) / 2 = 73.
  EXPECT_DOUBLE_EQ(pipelined_step_us({1, 9, 1, 9}, 2, 2, 4), 73.0);
}

TEST(PipelineSchedule, InflightActivations) {
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::k1F1B, 4, 1, 8, r), 4 - r);
    EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kGPipe, 4, 1, 8, r), 8);
  }
  EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::k1F1B, 4, 1, 2, 0), 2);  // min(P - r, M)
  // Megatron's warm-up 2 (P - r - 1) + (v - 1) P, plus one: rank 0 of P = 4, v = 2: 6 + 4 + 1
  // = 11 stage-microbatches of half the rank each: 5.5; rank 3: (0 + 4 + 1) / 2 = 2.5.
  EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 0), 5.5);
  EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 3), 2.5);
  // Capped by v M: M = 4 -> at most 8 stage-microbatches = 4.
  EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 4, 0), 4.0);
}

TEST(PipelineSchedule, InflightPerStageFollowsTorchsOrder) {
  // One stage per rank: the rank's count.
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::k1F1B, 4, 1, 8, 1), 3);
  // Interleaved1F1B, P = 2, v = 2, M = 2.  Rank 1 (stages 1 and 3) warms up with
  // 2 (P - r - 1) + (v - 1) P = 2 forwards of stage 1, then F(3, 0) B(3, 0) F(3, 1) B(3, 1)
  // and the backwards of stage 1: its peak of 3 holds two microbatches of stage 1 and one of
  // stage 3 (1.5 each on average).  Rank 0 runs all four forwards first: two of each.
  EXPECT_DOUBLE_EQ(inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 2, 2, 2, 1), 1.5);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 2, 2, 2, 1), 2);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 2, 2, 2, 3), 1);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 2, 2, 2, 0), 2);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 2, 2, 2, 2), 2);
  // P = 4, v = 2, M = 8, last rank (stages 3, 7): 4 warm-up forwards of stage 3, then stage 7
  // runs F and B in turn: peak 5 = 4 of stage 3 + 1 of stage 7 (the later moment with 5 of
  // stage 3 and none of stage 7 ties; the last stage's is kept).  Rank 0 (stages 0, 4): 10
  // warm-up forwards (stage 0 m0-3, stage 4 m0-3, stage 0 m4-5), then F(0, 6): 7 + 4 = 11.
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 3), 4);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 7), 1);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 0), 7);
  EXPECT_DOUBLE_EQ(stage_inflight_microbatches(PipelineSchedule::kInterleaved1F1B, 4, 2, 8, 4), 4);
  // Each rank's stages add up to v x its count, for every schedule with several per rank.
  for (PipelineSchedule s : {PipelineSchedule::kInterleaved1F1B, PipelineSchedule::kInterleavedZeroBubble,
                             PipelineSchedule::kZBVZeroBubble, PipelineSchedule::kDualPipeV})
    for (int32_t r = 0; r < 4; ++r) {
      double sum = 0;
      for (int32_t st = 0; st < 8; ++st)
        if (stage_rank(s, 4, st) == r) sum += stage_inflight_microbatches(s, 4, 2, 8, st);
      EXPECT_GE(sum, 2 * inflight_microbatches(s, 4, 2, 8, r)) << schedule_name(s) << " rank " << r;
      EXPECT_LE(sum, 2 * inflight_microbatches(s, 4, 2, 8, r) + 1) << schedule_name(s) << " rank " << r;
    }
}

TEST(PipelineSchedule, NamesAndRequirements) {
  EXPECT_EQ(parse_schedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(parse_schedule("Interleaved1F1B"), PipelineSchedule::kInterleaved1F1B);
  EXPECT_EQ(parse_schedule("gpipe"), PipelineSchedule::kGPipe);
  EXPECT_FALSE(parse_schedule("zb"));
  EXPECT_EQ(schedule_name(PipelineSchedule::k1F1B), "1F1B");
  EXPECT_EQ(schedule_problem(PipelineSchedule::k1F1B, 4, 1, 3), "");
  EXPECT_NE(schedule_problem(PipelineSchedule::k1F1B, 4, 2, 8), "");
  EXPECT_NE(schedule_problem(PipelineSchedule::kInterleaved1F1B, 4, 1, 8), "");
  EXPECT_NE(schedule_problem(PipelineSchedule::kInterleaved1F1B, 4, 2, 6), "");  // M % P
  EXPECT_EQ(schedule_problem(PipelineSchedule::kInterleaved1F1B, 4, 2, 8), "");
  // The zero-bubble schedules, by the docs' names and torch's class names.
  EXPECT_EQ(parse_schedule("InterleavedZeroBubble"), PipelineSchedule::kInterleavedZeroBubble);
  EXPECT_EQ(parse_schedule("ScheduleZBVZeroBubble"), PipelineSchedule::kZBVZeroBubble);
  EXPECT_EQ(schedule_name(PipelineSchedule::kZBVZeroBubble), "ZBVZeroBubble");
  EXPECT_NE(schedule_problem(PipelineSchedule::kZBVZeroBubble, 4, 3, 8), "");  // exactly 2 per rank
  EXPECT_EQ(schedule_problem(PipelineSchedule::kZBVZeroBubble, 4, 2, 3), "");
  EXPECT_EQ(schedule_problem(PipelineSchedule::kInterleavedZeroBubble, 4, 3, 6), "");  // 1 round of 6
  EXPECT_NE(schedule_problem(PipelineSchedule::kInterleavedZeroBubble, 3, 2, 10), "");  // 3 rounds
  EXPECT_NE(schedule_problem(PipelineSchedule::kInterleavedZeroBubble, 4, 1, 8), "");
  EXPECT_EQ(parse_schedule("ScheduleDualPipeV"), PipelineSchedule::kDualPipeV);
  EXPECT_NE(schedule_problem(PipelineSchedule::kDualPipeV, 4, 2, 7), "");  // M >= 2P
  EXPECT_EQ(schedule_problem(PipelineSchedule::kDualPipeV, 4, 2, 8), "");
  EXPECT_EQ(stage_rank(PipelineSchedule::kDualPipeV, 4, 7), 0);
  EXPECT_TRUE(splits_backward(PipelineSchedule::kZBVZeroBubble));
  EXPECT_FALSE(splits_backward(PipelineSchedule::kInterleaved1F1B));
}

TEST(PipelineSchedule, ZeroBubbleKeepsPartOfTheFillAndDrain) {
  // Two stages with f, b, w = (1, 1, 1) and (2, 1, 1): k = (max(1, 1, 1) + max(2, 2, 1)) / (3 + 4)
  // = 3 / 7; 1F1B-type schedules keep it all.
  const auto zb = PipelineSchedule::kInterleavedZeroBubble;
  EXPECT_DOUBLE_EQ(bubble_factor(zb, {1, 2}, {1, 1}, {1, 1}), 3.0 / 7);
  EXPECT_DOUBLE_EQ(bubble_factor(PipelineSchedule::k1F1B, {1, 2}, {1, 1}, {1, 1}), 1.0);
  // P = 2, v = 2, stages of 5: 4 * 10 + k (20 - 10) / 2.
  const std::vector<double> c(4, 5.0);
  EXPECT_DOUBLE_EQ(pipelined_step_us(zb, c, 2, 2, 4, 0.5), 42.5);
  EXPECT_DOUBLE_EQ(bubble_us(zb, c, 2, 2, 4, 0.5), 2.5);
  // The V puts stages 0 and 3 on rank 0: {1, 9, 9, 1} gives ranks 2 and 18 (looped: 10, 10).
  EXPECT_DOUBLE_EQ(pipelined_step_us(PipelineSchedule::kZBVZeroBubble, {1, 9, 9, 1}, 2, 2, 4, 1.0),
                   4 * 18 + (20 - 18) / 2.0);
  EXPECT_DOUBLE_EQ(pipelined_step_us(zb, {1, 9, 9, 1}, 2, 2, 4, 1.0), 4 * 10 + 10 / 2.0);
}

}  // namespace
}  // namespace autoshard

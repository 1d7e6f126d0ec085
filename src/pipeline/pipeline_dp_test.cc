// The stage-split DP on hand-made cost tables with the optimum worked out by hand.
#include "pipeline/pipeline_dp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

namespace autoshard {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(PipelineDp, TwoStages) {
  StageCostTable c;
  c.first = {kInf, 1, 5, 9, 12};
  c.last = {kInf, 4, 6, 7, 10};
  // Splits of 5 layers, (first, last): (1,4) 1+10=11, latency 11+3*10=41; (2,3) 5+7=12,
  // 12+3*7=33; (3,2) 9+6=15, 15+3*9=42; (4,1) 12+4=16, 16+3*12=52.
  const StageSplit lat = best_split_latency(c, 5, 2, 4);
  EXPECT_EQ(lat.layers, (std::vector<int32_t>{2, 3}));
  EXPECT_DOUBLE_EQ(lat.value, 33);
  const StageSplit sum = best_split_sum(c, 5, 2);
  EXPECT_EQ(sum.layers, (std::vector<int32_t>{1, 4}));
  EXPECT_DOUBLE_EQ(sum.value, 11);
}

TEST(PipelineDp, HeadTailBoundIsTheBestSplitsFillAndDrain) {
  StageCostTable c;
  c.first = {kInf, 1, 5, 9, 12};
  c.last = {kInf, 4, 6, 7, 10};
  // max(M c_0, M c_1 + c_0) with M = 4 over (1,4) 40+1=41, (2,3) 28+5=33 (vs 20), (3,2)
  // max(36, 24+9)=36, (4,1) 48: the least is 33.
  EXPECT_NEAR(split_head_tail_bound(c, 5, 2, 4), 33, 33e-9);
  EXPECT_LE(split_head_tail_bound(c, 5, 2, 4), 33);
  EXPECT_EQ(split_head_tail_bound(c, 1, 2, 4), kInf);  // too few layers
}

TEST(PipelineDp, ThreeStagesWithAMiddleKind) {
  StageCostTable c;
  c.first = {kInf, 1, 5, 9};
  c.mid = {kInf, 2, 5, 8};
  c.last = {kInf, 4, 6, 7};
  // 4 layers, M = 3: (2,1,1) 5+2+4=11 +2*5=21; (1,2,1) 1+5+4=10 +2*5=20; (1,1,2) 1+2+6=9
  // +2*6=21.
  const StageSplit s = best_split_latency(c, 4, 3, 3);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{1, 2, 1}));
  EXPECT_DOUBLE_EQ(s.value, 20);
  EXPECT_EQ(split_costs(c, s.layers), (std::vector<double>{1, 5, 4}));
}

TEST(PipelineDp, RanksOfAnInterleavedSplit) {
  StageCostTable c;
  c.first = {kInf, 3, 5};
  c.mid = {kInf, 2, 3};
  c.last = {kInf, 4, 6};
  // P = 2, v = 2, L = 5, M = 2: stages 0, 2 on rank 0 and 1, 3 on rank 1; one stage gets two
  // layers.  T = 1.5 max R + (R0 + R1) / 2:  s0: R = (7, 6) -> 17;  s1: (5, 7) -> 16.5;
  // s2: (6, 6) -> 15;  s3: (5, 8) -> 18.5.
  const StageSplit s = best_split_ranks(c, 5, 2, 2, 2);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{1, 1, 2, 1}));
  EXPECT_DOUBLE_EQ(s.value, 15);
  // v = 1: the same optimum as Alpa's latency DP (TwoStages' table: {2, 3}, 33).
  c.first = {kInf, 1, 5, 9, 12};
  c.last = {kInf, 4, 6, 7, 10};
  const StageSplit one = best_split_ranks(c, 5, 2, 1, 4);
  EXPECT_EQ(one.layers, (std::vector<int32_t>{2, 3}));
  EXPECT_DOUBLE_EQ(one.value, 33);
}

TEST(PipelineDp, VShapeAndBubbleFactor) {
  StageCostTable c;
  c.first = {kInf, 3, 5};
  c.mid = {kInf, 2, 3};
  c.last = {kInf, 4, 6};
  // ZB-V: rank 0 holds stages 0 and 3 (first, last), rank 1 stages 1 and 2.  T = (M - k/2)
  // max R + k (R0 + R1) / 2 with M = 2, k = 1:  s0 two layers: R = (9, 4) -> 20; s1: (7, 5) ->
  // 16.5; s2: (7, 5) -> 16.5; s3: (9, 4) -> 20.  The tie goes to s1 (rank 1's first stage).
  const StageSplit s = best_split_ranks(c, 5, 2, 2, 2, 1.0, true);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{1, 2, 1, 1}));
  EXPECT_DOUBLE_EQ(s.value, 16.5);
  // k = 0.5 (a zero-bubble schedule keeps half the fill and drain): 1.75 * 7 + 0.25 * 12.
  EXPECT_DOUBLE_EQ(best_split_ranks(c, 5, 2, 2, 2, 0.5, true).value, 15.25);
  EXPECT_TRUE(best_split_ranks(c, 5, 2, 1, 2, 1.0, true).layers.empty());  // a V needs v = 2
}

TEST(PipelineDp, PerStageTablesPriceEachRankApart) {
  // RanksOfAnInterleavedSplit's tables per position give its optimum (1, 1, 2, 1), 15.
  StageCostTable c;
  c.stages = {{kInf, 3, 5}, {kInf, 2, 3}, {kInf, 2, 3}, {kInf, 4, 6}};
  StageSplit s = best_split_ranks(c, 5, 2, 2, 2);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{1, 1, 2, 1}));
  EXPECT_DOUBLE_EQ(s.value, 15);
  // Rank 0 cannot hold 2 layers in its second stage (say, its memory with more microbatches
  // in flight): the next best puts them on rank 1, s1 -> R = (5, 7): 1.5 x 7 + 12 / 2 = 16.5.
  c.stages[2] = {kInf, 2, kInf};
  s = best_split_ranks(c, 5, 2, 2, 2);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{1, 2, 1, 1}));
  EXPECT_DOUBLE_EQ(s.value, 16.5);
  // The latency DP reads them too: TwoStages with the first stage unable to hold 2 layers:
  // (1, 4) 11 + 3 x 10 = 41, (3, 2) 42, (4, 1) 52.
  StageCostTable t;
  t.stages = {{kInf, 1, kInf, 9, 12}, {kInf, 4, 6, 7, 10}};
  const StageSplit lat = best_split_latency(t, 5, 2, 4);
  EXPECT_EQ(lat.layers, (std::vector<int32_t>{1, 4}));
  EXPECT_DOUBLE_EQ(lat.value, 41);
}

TEST(PipelineDp, InfeasibleEntriesAndTooFewLayers) {
  StageCostTable c;
  c.first = {kInf, kInf, 5, 9};
  c.last = {kInf, 4, kInf, 7};
  // Only (2, 1) avoids the infinite entries: 5 + 4 + (M - 1) * 5 = 14 for M = 2.
  const StageSplit s = best_split_latency(c, 3, 2, 2);
  EXPECT_EQ(s.layers, (std::vector<int32_t>{2, 1}));
  EXPECT_DOUBLE_EQ(s.value, 14);
  EXPECT_TRUE(best_split_latency(c, 1, 2, 2).layers.empty());
  c.first = {kInf, kInf, kInf, kInf};
  EXPECT_TRUE(best_split_latency(c, 3, 2, 2).layers.empty());
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

/// Every split of L layers into P v stages (looped: stage s on rank s mod P), and of those the
/// least max over ranks of M R_q + sum_{s < q} c_s: what split_ranks_head_tail_bound bounds.
double brute_ranks_head_tail(const StageCostTable& c, int32_t L, int32_t P, int32_t v, int32_t M) {
  const int32_t S = P * v;
  double best = kInf;
  std::vector<int32_t> k(static_cast<size_t>(S), 1);
  std::function<void(int32_t, int32_t)> go = [&](int32_t s, int32_t left) {
    if (s == S - 1) {
      k[static_cast<size_t>(s)] = left;
      double worst = 0, head = 0;
      for (int32_t q = 0; q < P; ++q) {
        double R = 0;
        for (int32_t j = 0; j < v; ++j) R += c.cost(q + j * P, S, k[static_cast<size_t>(q + j * P)]);
        worst = std::max(worst, M * R + head);
        head += c.cost(q, S, k[static_cast<size_t>(q)]);
      }
      best = std::min(best, worst);
      return;
    }
    for (int32_t n = 1; n <= left - (S - 1 - s); ++n) {
      k[static_cast<size_t>(s)] = n;
      go(s + 1, left - n);
    }
  };
  go(0, L);
  return best;
}

TEST(PipelineDp, InterleavedHeadTailBoundIsTheFillAndDrainOfEqualStages) {
  // Equal stages of cost 10 per layer: with L = P v layers each stage has one, every rank
  // R = 10 v, and the last rank waits for P - 1 stages: M 10 v + 10 (P - 1).
  StageCostTable c;
  c.first = c.mid = c.last = {kInf, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  EXPECT_NEAR(split_ranks_head_tail_bound(c, 8, 4, 2, 6), 6 * 20 + 30, 1e-6);
  // v = 1 is split_head_tail_bound.
  EXPECT_NEAR(split_ranks_head_tail_bound(c, 6, 3, 1, 4), split_head_tail_bound(c, 6, 3, 4), 1e-6);
  EXPECT_EQ(split_ranks_head_tail_bound(c, 3, 2, 2, 4), kInf);  // too few layers
}

TEST(PipelineDp, ZeroBubbleHeadBoundWaitsForTheForwardsAlone) {
  // Equal one-layer stages of cost 9 whose forward takes 3 at least: the last rank waits for
  // P - 1 forwards, and nothing after its work (a W may end it).
  StageCostTable c, fwd, none;
  c.first = c.mid = c.last = {kInf, 9, 18, 27, 36, 45};
  fwd.first = fwd.mid = fwd.last = {kInf, 3, 6, 9, 12, 15};
  none.first = none.mid = none.last = {kInf, 0, 0, 0, 0, 0};
  EXPECT_NEAR(split_ranks_head_bound(c, fwd, 8, 4, 2, 6), 6 * 18 + 3 * 3, 1e-6);
  EXPECT_NEAR(split_ranks_head_bound(c, fwd, 8, 4, 2, 6, true), 6 * 18 + 3 * 3, 1e-6);  // in a V too
  // With the whole stage as the head it is the head-tail bound; with no head, the busiest rank.
  EXPECT_NEAR(split_ranks_head_bound(c, c, 8, 4, 2, 6), split_ranks_head_tail_bound(c, 8, 4, 2, 6), 1e-6);
  EXPECT_NEAR(split_ranks_head_bound(c, none, 8, 4, 2, 6), best_split_ranks(c, 8, 4, 2, 6, 0.0).value, 1e-6);
}

TEST(PipelineDp, InterleavedHeadTailBoundNeverExceedsAnySplit) {
  // Uneven kinds (the first and last stages dearer), concave in layers: the bound lies between
  // the busiest rank's work alone and the best split's true max_q (M R_q + head_q).
  StageCostTable c;
  c.first = {kInf, 14, 25, 35, 44, 52, 59, 65};
  c.mid = {kInf, 10, 19, 27, 34, 40, 45, 49};
  c.last = {kInf, 17, 28, 38, 47, 55, 62, 68};
  for (int32_t L : {6, 7, 9}) {
    const double bound = split_ranks_head_tail_bound(c, L, 3, 2, 4);
    const double brute = brute_ranks_head_tail(c, L, 3, 2, 4);
    const double busiest = best_split_ranks(c, L, 3, 2, 4, 0.0).value;
    EXPECT_LE(bound, brute * (1 + 1e-9)) << L;
    EXPECT_GE(bound, busiest * (1 - 1e-9)) << L;
    EXPECT_GT(bound, busiest) << L;  // the fill adds something here
  }
}

TEST(PipelineDp, RankFloorsRaiseTheRanksWork) {
  // Equal one-layer stages of cost 10, P = 2, v = 2, L = 4: each rank's stage costs sum to 20.
  StageCostTable c;
  c.first = c.mid = c.last = {kInf, 10, 20, 30};
  EXPECT_DOUBLE_EQ(rank_least_sums({&c.mid, &c.mid}, 4)[2], 20);
  EXPECT_DOUBLE_EQ(rank_least_sums({&c.mid, &c.mid}, 4)[4], 40);
  EXPECT_EQ(rank_least_sums({&c.mid, &c.mid}, 4)[1], kInf);  // two stages need two layers
  // Rank 0's work is at least 26 with 2 layers (its memory, say), 50 with 3; rank 1 as its stages.
  const RankFloors floors{{0, 0, 26, 50, 80}, {0, 0, 0, 0, 0}};
  const RankFloors none{{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}};
  // Busiest rank alone (factor 0): M max R = 3 x 26 (2 + 2 layers; 3 + 1 leaves rank 1 one
  // layer for two stages).
  EXPECT_DOUBLE_EQ(best_split_ranks(c, 4, 2, 2, 3, 0.0).value, 60);
  EXPECT_DOUBLE_EQ(best_split_ranks(c, 4, 2, 2, 3, 0.0, false, &floors).value, 78);
  EXPECT_DOUBLE_EQ(best_split_ranks(c, 4, 2, 2, 3, 0.0, false, &none).value, 60);
  // With the fill and drain: rank 1 waits for rank 0's first stage (10): max(3 x 26, 3 x 20 +
  // 10) = 78, against max(60, 70) = 70 without the floors.
  EXPECT_NEAR(split_ranks_head_tail_bound(c, 4, 2, 2, 3), 70, 1e-6);
  EXPECT_NEAR(split_ranks_head_tail_bound(c, 4, 2, 2, 3, false, &floors), 78, 1e-6);
  EXPECT_NEAR(split_ranks_head_tail_bound(c, 4, 2, 2, 3, false, &none), 70, 1e-6);
}

}  // namespace
}  // namespace autoshard

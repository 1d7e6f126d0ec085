// The rank trade's choice (pipeline_layout.h least_work_that_fits) on hand-made ranks: which
// stage recomputes more so that another recomputes less, with a rank's passing work held once.
#include <gtest/gtest.h>

#include <vector>

#include "pipeline/pipeline_layout.h"

namespace autoshard {
namespace {

using pipeline_detail::least_work_that_fits;
using pipeline_detail::TradeOption;

TradeOption trade_option(int64_t budget, double us, double need, double transient) {
  return TradeOption{budget, us, need, transient};
}

TEST(RankTrade, OneStageRecomputesMoreSoThatAnotherRecomputesLess) {
  // Stage A keeps 13 microbatches in flight: one more region recomputed costs it 4 us and frees
  // 14 bytes.  Stage B keeps 8: one region fewer saves it 6 us for 9 bytes.  Now the rank needs
  // (50 - 2) + (45 - 3) + 3 = 93 of 100: B alone cannot take 9 more (102), A's 14 make room
  // (88), and the pair works 438 against 440 us.  B's cheapest option (70 bytes) fits with
  // nothing.
  const std::vector<std::vector<TradeOption>> options = {
      {trade_option(-1, 220, 50, 2), trade_option(36, 224, 36, 2)},
      {trade_option(-1, 220, 45, 3), trade_option(54, 214, 54, 3), trade_option(70, 210, 70, 3)},
  };
  const auto best = least_work_that_fits(options, 100);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].budget, 36);
  EXPECT_EQ(best[1].budget, 54);
  // The pair needs 88: it fits a limit of 88; at 87 nothing beats the plans now (A's trade
  // alone is slower, B's alone needs 102).
  EXPECT_EQ(least_work_that_fits(options, 88).size(), 2u);
  EXPECT_TRUE(least_work_that_fits(options, 87).empty());
}

TEST(RankTrade, PassingWorkIsHeldOnceNotPerStage) {
  // Two stages of 40 bytes, 10 of them passing work each: the rank holds 30 + 30 + 10 = 70,
  // not 80.  At a limit of 75 one stage can take 5 more bytes for 10 us less; summing the
  // stages' needs (85) would forbid it.
  const std::vector<std::vector<TradeOption>> options = {
      {trade_option(-1, 100, 40, 10), trade_option(45, 90, 45, 10)},
      {trade_option(-1, 100, 40, 10), trade_option(45, 90, 45, 10)},
  };
  const auto best = least_work_that_fits(options, 75);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].budget, 45);  // the first of two equal trades, in the fixed order
  EXPECT_EQ(best[1].budget, -1);
  EXPECT_EQ(least_work_that_fits(options, 80).size(), 2u);
  EXPECT_EQ(least_work_that_fits(options, 80)[1].budget, 45);  // both at 80
}

TEST(RankTrade, NothingBetterThatFitsIsNoTrade) {
  // Every faster option needs more than the room left; a slower one that fits is no trade.
  const std::vector<std::vector<TradeOption>> options = {
      {trade_option(-1, 100, 40, 0), trade_option(50, 95, 50, 0), trade_option(30, 110, 30, 0)},
      {trade_option(-1, 100, 40, 0), trade_option(50, 95, 50, 0)},
  };
  EXPECT_TRUE(least_work_that_fits(options, 85).empty());
  EXPECT_EQ(least_work_that_fits(options, 90).size(), 2u);
}

TEST(RankTrade, ManyStagesAreBoundedAndStillFit) {
  // 20 stages of 3 options each (3^20 combinations): the ladders are cut to at most 65536
  // combinations, and the answer still fits and works less than now.
  std::vector<std::vector<TradeOption>> options(
      20, {trade_option(-1, 100, 10, 0), trade_option(12, 97, 12, 0), trade_option(8, 104, 8, 0)});
  const auto best = least_work_that_fits(options, 205);
  ASSERT_EQ(best.size(), 20u);
  double work = 0, need = 0;
  for (const TradeOption& o : best) work += o.us, need += o.need;
  EXPECT_LE(need, 205);
  EXPECT_LT(work, 2000);
}

}  // namespace
}  // namespace autoshard

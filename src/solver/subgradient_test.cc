#include "solver/subgradient.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

TEST(Subgradient, PolyakStepAndProjection) {
  Subgradient sg(/*patience=*/2, /*shrink=*/0.5);
  std::vector<double> lambda{0.0, 1.0, 0.0};
  std::vector<double> g{3.0, -4.0, -2.0};
  Subgradient::project(lambda, g);  // the third price is 0 and g pushes it down: dropped
  EXPECT_EQ(g, (std::vector<double>{3.0, -4.0, 0.0}));
  // step = 1 * (10 - 5) / 25 = 0.2 -> (0.6, 1 - 0.8, 0)
  ASSERT_TRUE(sg.step(lambda, g, /*target=*/10, /*dual=*/5));
  EXPECT_DOUBLE_EQ(lambda[0], 0.6);
  EXPECT_DOUBLE_EQ(lambda[1], 0.2);
  EXPECT_DOUBLE_EQ(lambda[2], 0.0);
  // A longer step clips at zero.
  ASSERT_TRUE(sg.step(lambda, g, 30, 5));  // step 1: (3.6, max(0, 0.2 - 4), 0)
  EXPECT_DOUBLE_EQ(lambda[0], 3.6);
  EXPECT_DOUBLE_EQ(lambda[1], 0.0);
  EXPECT_FALSE(sg.step(lambda, {0.0, 0.0, 0.0}, 30, 5));  // no direction
}

TEST(Subgradient, ThetaShrinksAfterPatienceWithoutProgress) {
  Subgradient sg(/*patience=*/2, /*shrink=*/0.5);
  EXPECT_TRUE(sg.record(1));
  EXPECT_FALSE(sg.record(0.5));
  EXPECT_DOUBLE_EQ(sg.theta(), 1.0);
  EXPECT_FALSE(sg.record(1));  // equal is no progress
  EXPECT_DOUBLE_EQ(sg.theta(), 0.5);
  EXPECT_TRUE(sg.record(2));
  EXPECT_DOUBLE_EQ(sg.best(), 2);
  std::vector<double> lambda{0.0};
  ASSERT_TRUE(sg.step(lambda, {1.0}, 4, 2));  // 0.5 * (4 - 2) / 1
  EXPECT_DOUBLE_EQ(lambda[0], 1.0);
}

}  // namespace
}  // namespace autoshard

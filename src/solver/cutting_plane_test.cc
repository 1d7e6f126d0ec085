// Kelley's master LP on planes whose maximum is known by hand.
#include "solver/cutting_plane.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

TEST(CuttingPlane, MaximumOfTwoPlanesInOneDimension) {
  // min(1 + mu, 3 - mu) on [0, 1] rises all the way: mu = 1, value 2.
  const std::vector<PlaneCut> cuts{{1, {1}}, {3, {-1}}};
  CutMaximum m = maximize_cut_model(cuts, 1);
  ASSERT_EQ(m.mu.size(), 1u);
  EXPECT_NEAR(m.mu[0], 1, 1e-9);
  EXPECT_NEAR(m.value, 2, 1e-9);
  // A trust region [0, 0.5] stops it at its edge.
  m = maximize_cut_model(cuts, 1, {0}, {0.5});
  EXPECT_NEAR(m.mu[0], 0.5, 1e-9);
  EXPECT_NEAR(m.value, 1.5, 1e-9);
}

TEST(CuttingPlane, TwoDimensionsMeetAtTheCrossing) {
  // min(2 mu0, 2 mu1, 3 - mu0 - mu1): by symmetry mu0 = mu1 = m, and 2 m = 3 - 2 m at
  // m = 0.75, value 1.5.
  const std::vector<PlaneCut> cuts{{0, {2, 0}}, {0, {0, 2}}, {3, {-1, -1}}};
  CutMaximum m = maximize_cut_model(cuts, 2);
  EXPECT_NEAR(m.value, 1.5, 1e-9);
  EXPECT_NEAR(m.mu[0], 0.75, 1e-9);
  EXPECT_NEAR(m.mu[1], 0.75, 1e-9);
}

TEST(CuttingPlane, RejectsNoCutsAndWrongSizes) {
  EXPECT_THROW(maximize_cut_model({}, 1), std::invalid_argument);
  EXPECT_THROW(maximize_cut_model({{1, {1, 2}}}, 1), std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

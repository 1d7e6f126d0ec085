#include "pipeline/pipeline_choice.h"

#include <gtest/gtest.h>


namespace autoshard {
namespace {

/// Candidates with their assembled figures; records which were assembled.
struct Table {
  std::vector<double> pre;
  std::vector<AssembledFigures> after;
  std::vector<size_t> asked;
  size_t pick() {
    return fastest_fitting(pre, [&](size_t i) {
      asked.push_back(i);
      return after[i];
    });
  }
};

TEST(PipelineChoice, TheFastestKeptWhenItFits) {
  Table t{{16.6, 17.4, 22.8}, {{16.6, true}, {17.4, true}, {22.8, true}}, {}};
  EXPECT_EQ(t.pick(), 0u);
  EXPECT_EQ(t.asked, (std::vector<size_t>{0}));  // 17.4 >= 16.6: not assembled
}

TEST(PipelineChoice, AFasterCandidateOverTheLimitGivesWayToOneThatFits) {
  // The 405B case: ZB-V first by its pre-assembly step, 220 s and over the limit assembled.
  Table t{{17.4, 16.6, 22.8, 19.2}, {{17.4, true}, {220.4, false}, {22.8, true}, {19.2, true}}, {}};
  EXPECT_EQ(t.pick(), 0u);
  EXPECT_EQ(t.asked, (std::vector<size_t>{1, 0}));  // by pre-assembly step; 19.2 >= 17.4 stops
}

TEST(PipelineChoice, AReplanThatSlowsAFitKeepsLookingBelowIt) {
  // Candidate 0 fits only after a re-plan that makes it slower than candidate 1 assembled.
  Table t{{10, 11, 15}, {{14, true}, {11, true}, {15, true}}, {}};
  EXPECT_EQ(t.pick(), 1u);
  EXPECT_EQ(t.asked, (std::vector<size_t>{0, 1}));
}

TEST(PipelineChoice, NoneFitsTheFastestAssembledIsKept) {
  Table t{{10, 11, 12}, {{30, false}, {12, false}, {13, false}}, {}};
  EXPECT_EQ(t.pick(), 1u);
  EXPECT_EQ(t.asked, (std::vector<size_t>{0, 1, 2}));
}

TEST(PipelineChoice, TiesKeepTheFirstAndNoCandidateIsAnError) {
  Table t{{10, 10}, {{10, true}, {10, true}}, {}};
  EXPECT_EQ(t.pick(), 0u);
  EXPECT_EQ(t.asked, (std::vector<size_t>{0}));
  EXPECT_THROW(fastest_fitting({}, [](size_t) { return AssembledFigures{}; }), std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

#include "solver/memory_rows.h"

#include <gtest/gtest.h>

#include <utility>

namespace autoshard {
namespace {

TEST(MemoryRows, KeepOnlyMaximalLiveSets) {
  Problem p;
  // Intervals: [0,4) [1,3) [2,6) [5,7): maximal live sets {0,1,2} at t=2, {2,3} at t=5.
  for (auto [s, e] : {std::pair{0, 4}, {1, 3}, {2, 6}, {5, 7}})
    p.nodes.push_back({"", {0, 0}, {1, 2}, s, e});
  p.usage_limit = 100;
  auto rows = memory_rows(p, {}, false);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].nodes, (std::vector<PNodeIdx>{0, 1, 2}));
  EXPECT_EQ(rows[1].nodes, (std::vector<PNodeIdx>{2, 3}));
  EXPECT_TRUE(memory_rows(p, {}, true).empty());  // limit 100 never binds
  // A base bump at [6,7) makes t=6 a row of its own ({3} + 5 is not dominated by {2,3} + 0).
  auto rows2 = memory_rows(p, {{6, 7, 5}}, false);
  ASSERT_EQ(rows2.size(), 3u);
  EXPECT_EQ(rows2[2].offset, 5);
}

/// The minimal possible peak takes every node at its least usage; rows_peak at a choice.
TEST(MemoryRows, PeaksOverRows) {
  Problem p;
  p.nodes.push_back({"", {0, 0}, {3, 1}, 0, 2});
  p.nodes.push_back({"", {0, 0}, {2, 5}, 1, 3});
  const auto rows = memory_rows(p, {{0, 3, 10}}, false);
  EXPECT_EQ(min_possible_peak(p, rows), 10 + 1 + 2);
  EXPECT_EQ(rows_peak(p, rows, {0, 1}), 10 + 3 + 5);
  EXPECT_EQ(rows_peak(p, rows, {1, 0}), 10 + 1 + 2);
}

}  // namespace
}  // namespace autoshard

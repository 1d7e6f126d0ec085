#include "pipeline/pipeline_progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace autoshard {
namespace {

TEST(PipelineProgress, CountsSolvesAndKeepsTheBest) {
  std::vector<PipelineProgress> seen;
  PipelineProgressTracker t([&](const PipelineProgress& p) { seen.push_back(p); });
  t.searching("1F1B");
  t.started(3);
  t.finished();
  t.evaluated(200.0, 150.0);
  t.evaluated(180.0, 160.0);  // a better step, a higher bound: the bound so far stays the least
  t.evaluated(190.0, 140.0);
  ASSERT_EQ(seen.size(), 6u);
  const PipelineProgress& last = seen.back();
  EXPECT_EQ(last.solves_done, 1);
  EXPECT_EQ(last.solves_started, 3);
  EXPECT_EQ(last.searching, "1F1B");
  EXPECT_DOUBLE_EQ(last.best_step_us, 180.0);
  EXPECT_DOUBLE_EQ(last.bound_us, 140.0);
  EXPECT_GE(last.elapsed_s, seen.front().elapsed_s);
}

TEST(PipelineProgress, SequentialSolvesRaiseTheTotalWithTheDone) {
  PipelineProgress last;
  PipelineProgressTracker t([&](const PipelineProgress& p) { last = p; });
  t.finished();  // a solve nobody announced: started follows done
  t.finished();
  EXPECT_EQ(last.solves_done, 2);
  EXPECT_EQ(last.solves_started, 2);
  EXPECT_FALSE(std::isfinite(last.best_step_us));
}

TEST(PipelineProgress, ThreadsReportOneAtATime) {
  int calls = 0, inside = 0, most_inside = 0;
  PipelineProgressTracker t([&](const PipelineProgress&) {
    ++calls;
    most_inside = std::max(most_inside, ++inside);
    --inside;
  });
  t.started(400);
  std::vector<std::thread> ws;
  for (int w = 0; w < 4; ++w)
    ws.emplace_back([&] {
      for (int i = 0; i < 100; ++i) t.finished();
    });
  for (auto& w : ws) w.join();
  EXPECT_EQ(calls, 401);
  EXPECT_EQ(most_inside, 1);
}

}  // namespace
}  // namespace autoshard

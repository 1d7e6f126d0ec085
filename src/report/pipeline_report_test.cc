// The pipeline section of report.html on a real pipelined plan of a built-in model.
#include "report/pipeline_report.h"

#include <gtest/gtest.h>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/sharding_optimizer.h"
#include "report/report.h"

namespace autoshard {
namespace {

PipelinePlan small_pipeline(std::optional<PipelineSchedule> schedule) {
  ModelOptions mo;
  mo.layers = 4;
  mo.batch = 1;
  mo.seq = 128;
  PipelineOptions po;
  po.microbatches = 4;
  po.schedule = schedule;
  return plan_pipeline(build_model("llama3-8b", mo),
                       Mesh({2, 2}, {"pp", "dp"}, *hardware_preset("h100")), PlannerOptions{}, po);
}

TEST(PipelineReport, TimelineHasEveryOpAndEndsAtTheStep) {
  const PipelinePlan pl = small_pipeline(PipelineSchedule::k1F1B);
  const int32_t shown = bottleneck_stage(pl);
  const auto j = pipeline_report_json(pl, shown);
  EXPECT_EQ(j["schedule"], "1F1B");
  ASSERT_EQ(j["ranks"].size(), 2u);
  size_t rects = 0;
  for (const auto& r : j["ranks"]) rects += r["rects"].size();
  EXPECT_EQ(rects, 2u * pl.stages.size() * 4);  // a forward and a backward per stage and mb
  // Two stages, 1F1B: the op-by-op schedule ends where the closed form says (to rounding).
  EXPECT_NEAR(j["timeline_us"].get<double>(), pl.step_us, 1e-2);
  EXPECT_EQ(j["stages"].size(), pl.stages.size());
  // The forward/backward split keeps each stage's microbatch time.
  const StageTimes t = stage_times(pl);
  for (size_t s = 0; s < pl.stages.size(); ++s) {
    EXPECT_NEAR(t.forward_us[s] + t.backward_us[s] + t.weight_us[s], pl.stages[s].solve->microbatch_us, 1e-6);
    EXPECT_GT(t.backward_us[s] + t.weight_us[s], t.forward_us[s]);  // a training backward costs more
  }
}

TEST(PipelineReport, ZeroBubbleDrawsTheWeightGradientsApart) {
  const PipelinePlan pl = small_pipeline(PipelineSchedule::kZBVZeroBubble);
  const auto j = pipeline_report_json(pl, bottleneck_stage(pl));
  size_t rects = 0, weights = 0;
  for (const auto& r : j["ranks"])
    for (const auto& x : r["rects"]) {
      ++rects;
      weights += x[2].get<std::string>().rfind("W ", 0) == 0;
    }
  EXPECT_EQ(rects, 3u * pl.stages.size() * 4);  // F, B and W per stage and microbatch
  EXPECT_EQ(weights, pl.stages.size() * 4);
  // The V's timeline is no faster than the busiest rank's own work.
  EXPECT_GE(j["timeline_us"].get<double>() + 1e-2, pl.step_us - pl.bubble_us);
}

TEST(PipelineReport, PageShowsThePipelineAndTheBottleneckStage) {
  const PipelinePlan pl = small_pipeline(std::nullopt);
  const int32_t shown = bottleneck_stage(pl);
  const StageSolve& s = *pl.stages[static_cast<size_t>(shown)].solve;
  ASSERT_TRUE(s.optimizer && s.plan.has_solution);
  const std::string html = render_pipeline_report_html(*s.optimizer, s.plan, pl, shown);
  EXPECT_NE(html.find("<h2>Pipeline schedule</h2>"), std::string::npos);
  EXPECT_NE(html.find("\"pipeline\":{\"schedule\""), std::string::npos);
  EXPECT_EQ(html, render_pipeline_report_html(*s.optimizer, s.plan, pl, shown));  // same bytes
  // A plan without pipeline stages has no pipeline section.
  const std::string plain = render_report_html(*s.optimizer, s.plan);
  EXPECT_EQ(plain.find("Pipeline schedule"), std::string::npos);
}

}  // namespace
}  // namespace autoshard

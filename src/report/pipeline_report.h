#pragma once
/// The pipelined plan in report.html: the stages (layers, pp rank, time per microbatch,
/// transfers, memory) and the schedule drawn as a timeline per pp rank (planner/
/// pipeline_timeline.h), shown above the simulated step of the bottleneck stage, whose
/// intra-operator plan the rest of the page shows.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/pipeline.h"
#include "pipeline/pipeline_timeline.h"

namespace autoshard {

class ShardingOptimizer;

/// The stage whose rank is busiest (ties: the lowest index): the bottleneck of the schedule.
int32_t bottleneck_stage(const PipelinePlan& pl);

/// {"schedule", "P", "v", "M", "step_us", "bubble_us", "lower_bound_us", "gap",
///  "timeline_us", "shown_stage", "stages": [...], "ranks": [{"name", "rects": [[start, end,
///  label ("F|B|W stage s mb m"), backward (B or W)], ...]}]}: the data the page's pipeline section draws.
nlohmann::ordered_json pipeline_report_json(const PipelinePlan& pl, int32_t shown_stage);

/// report.html for a pipelined plan: the pipeline section, then the usual page for stage
/// `shown_stage`, whose optimizer and plan are `stage_opt` and `stage_plan`.
std::string render_pipeline_report_html(ShardingOptimizer& stage_opt, const Plan& stage_plan,
                                         const PipelinePlan& pl, int32_t shown_stage);

}  // namespace autoshard

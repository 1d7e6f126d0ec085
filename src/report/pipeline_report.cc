#include "report/pipeline_report.h"

#include <algorithm>
#include <string>

#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"
#include "report/report.h"
#include "report/report_data.h"

namespace autoshard {
namespace {

using Json = nlohmann::ordered_json;

std::string layers_label(const PipelinePlan& pl, const PipelineStage& st) {
  std::string s = pl.layers[static_cast<size_t>(st.lo)];
  if (st.hi - st.lo > 1) s += ".." + pl.layers[static_cast<size_t>(st.hi - 1)];
  s += " (" + std::to_string(st.hi - st.lo) + ")";
  if (st.first) s += " +first";
  if (st.last) s += " +last";
  return s;
}

Json stage_rows(const PipelinePlan& pl) {
  Json rows = Json::array();
  for (const PipelineStage& st : pl.stages) {
    rows.push_back({st.index, st.pp_rank, layers_label(pl, st), round_milli(st.solve->microbatch_us),
                    round_milli(st.solve->p2p_us), round_milli(st.solve->once_us),
                    round_milli(st.inflight),
                    pl.rank_peak_bytes[static_cast<size_t>(st.pp_rank)]});
  }
  return rows;
}

/// One row of rectangles per pp rank: [start, end, "F s2 m3", backward].
Json rank_rows(const PipelinePlan& pl, const PipelineTimeline& tl) {
  Json ranks = Json::array();
  for (int32_t r = 0; r < pl.P; ++r) {
    Json rects = Json::array();
    for (const PipelineOp& o : tl.ops) {
      if (o.rank != r) continue;
      rects.push_back({round_milli(o.start_us), round_milli(o.end_us),
                       std::string(o.kind == PipeOpKind::kF ? "F" : o.kind == PipeOpKind::kW ? "W" : "B") +
                           " stage " + std::to_string(o.stage) + " mb " + std::to_string(o.microbatch),
                       o.backward()});
    }
    ranks.push_back({{"name", "pp " + std::to_string(r)}, {"rects", std::move(rects)}});
  }
  return ranks;
}

}  // namespace

int32_t bottleneck_stage(const PipelinePlan& pl) {
  std::vector<double> rank_us(static_cast<size_t>(pl.P), 0.0);
  for (const PipelineStage& st : pl.stages)
    rank_us[static_cast<size_t>(st.pp_rank)] += st.solve->microbatch_us;
  const auto busiest = static_cast<int32_t>(
      std::max_element(rank_us.begin(), rank_us.end()) - rank_us.begin());
  for (const PipelineStage& st : pl.stages)
    if (st.pp_rank == busiest) return st.index;
  return 0;
}

Json pipeline_report_json(const PipelinePlan& pl, int32_t shown_stage) {
  const PipelineTimeline tl = stage_timeline(pl);
  Json j;
  j["schedule"] = std::string(schedule_name(pl.schedule));
  j["P"] = pl.P;
  j["v"] = pl.v;
  j["M"] = pl.M;
  j["step_us"] = round_milli(pl.step_us);
  j["bubble_us"] = round_milli(pl.bubble_us);
  j["lower_bound_us"] = round_milli(pl.lower_bound_us);
  j["gap"] = pl.gap;
  j["timeline_us"] = round_milli(tl.makespan_us);
  j["shown_stage"] = shown_stage;
  j["stages"] = stage_rows(pl);
  j["ranks"] = rank_rows(pl, tl);
  return j;
}

std::string render_pipeline_report_html(ShardingOptimizer& stage_opt, const Plan& stage_plan,
                                         const PipelinePlan& pl, int32_t shown_stage) {
  Json data = report_data(stage_opt, stage_plan, simulate_step(stage_opt, stage_plan));
  data["pipeline"] = pipeline_report_json(pl, shown_stage);
  return render_report_page(data);
}

}  // namespace autoshard

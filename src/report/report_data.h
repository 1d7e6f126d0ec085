#pragma once
/// The data behind report.html, as one JSON object the page's script renders (see report.h).
/// Everything is derived from the optimizer, the plan and its simulation; nothing depends on
/// wall-clock time, so the same plan gives the same bytes.
///
/// Sizes stay bounded for 24k-node graphs: the graph is drawn per block (a layer key, see
/// layer_key()) with consecutive identical layers collapsed into one group drawn once; the
/// strategy tables exist only for the nodes drawn; timelines are merged into at most a few
/// thousand rectangles; the node table is complete but the page paginates it.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/simulate.h"

namespace autoshard {

class ShardingOptimizer;

struct ReportLimits {
  int32_t max_drawn_groups = 24;     ///< blocks rendered with Graphviz
  int32_t max_block_nodes = 400;     ///< larger blocks are drawn forward-only, then not at all
  int32_t max_strategy_rows = 48;    ///< per strategy table (cheapest first, chosen always in)
  int32_t max_hotspots = 25;
  int32_t max_memory_points = 1500;
  int32_t max_timeline_rects = 3000; ///< per stream
};

/// One redistribution of the plan as the report and the trace name it.
struct EdgeView {
  int32_t edge = -1;        ///< BuiltProblem edge
  NodeIdx producer = kNoNode;
  NodeIdx consumer = kNoNode;
  int32_t slot = -1;        ///< -1: gradient agreement with the parameter `consumer`
  std::string from, to;     ///< placements
  double cost_us = 0;       ///< real redistribution time (not a discounted edge cost)
  double bytes = 0;         ///< sum of the collectives' bytes
  std::string collectives;  ///< "all_gather(dp) + reduce_scatter(tp)", "" when free
};

/// The tensor-moving edges of the plan (tensor uses and gradient agreements), in edge order.
std::vector<EdgeView> plan_edges(ShardingOptimizer& opt, const Plan& plan);

nlohmann::ordered_json report_data(ShardingOptimizer& opt, const Plan& plan,
                                   const StepSimulation& sim, const ReportLimits& limits = {});

/// Module path with numeric components replaced by '*' ("layers.3.attention" ->
/// "layers.*.attention"): the unit of the per-module breakdown.
std::string module_pattern(const std::string& module_path);

/// Rounds to 1e-3 (nanoseconds for times in microseconds): keeps the JSON blobs small; the page
/// and the trace viewer show fewer digits.  Infinities pass through.
double round_milli(double v);

}  // namespace autoshard

#pragma once
/// report.html: one self-contained page (inline CSS and script, the data as one JSON blob,
/// graphs laid out by Graphviz as inline SVG; no network access) that shows a plan: header
/// figures (simulated and additive step time, MFU, memory against the limit, solver proof),
/// the graph of one representative layer per group of identical layers, strategy tables,
/// cost breakdowns, communication hotspots, memory and step timelines, every parameter and a
/// searchable node table.  Same plan, same bytes.
#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/simulate.h"

namespace autoshard {

class ShardingOptimizer;

/// Simulates the plan (simulate_step with default options) and renders the page.  Throws
/// std::runtime_error when the plan has no solution.
std::string render_report_html(ShardingOptimizer& opt, const Plan& plan);
/// The same with a simulation already computed.
std::string render_report_html(ShardingOptimizer& opt, const Plan& plan, const StepSimulation& sim);
/// The page for report data (report_data(), plus a "pipeline" object for a pipelined plan:
/// report/pipeline_report.h).
std::string render_report_page(const nlohmann::ordered_json& data);

}  // namespace autoshard

#pragma once
/// Pieces shared by `autoshard plan` (cmd_plan.cc) and the commands on saved plans
/// (cmd_state.cc: show, explain, pin, diff, export).
#include <CLI/CLI.hpp>

#include <string>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/plan.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"

namespace autoshard::cli {

/// The text summary `plan` prints (defined in cmd_plan.cc).
/// `fit`: remedies of an infeasible budget (planner/fit_advice.h), one "to fit, ..." line each.
void print_summary(const Plan& plan, const Graph& g, const Mesh& mesh, const StepSimulation* sim = nullptr,
                   const std::vector<std::string>& fit = {});
/// The per-node table of --show-nodes (defined in cmd_plan.cc).
void print_nodes(const Plan& plan, const Graph& g);

/// `plan -o DIR`'s files besides report.html / trace.json: DIR/placements.json, DIR/plan.json
/// and DIR/plan.ap (the state), each written to a temporary and renamed.
void write_plan_outputs(ShardingOptimizer& opt, const Plan& plan, const std::string& dir,
                        ScheduleOptions schedule = {});

void register_state_commands(CLI::App& app);

}  // namespace autoshard::cli

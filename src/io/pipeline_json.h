#pragma once
/// JSON of a pipelined plan (planner/pipeline.h): placements.json with the "pipeline" section
/// and per-node "stage" keys of docs/pipeline-format.md (the Python runtime reads it), and the
/// summary printed by `plan --json` and written to plan.json.
#include <string>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/pipeline.h"

namespace autoshard {

/// placements.json: AutoParallel's schema over the full mesh (R on the pp dim), each node with
/// its "stage" (-1: copied by every stage that uses it), plus "pipeline" {mesh_dim, schedule,
/// microbatches, stages_per_rank, stages [{index, pp_rank, layers, first, last}]}.
std::string write_pipeline_placements_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh);

/// The plan's figures: schedule, step, bound, gap, and per stage its layers, devices, time per
/// microbatch, sends, once-per-step work, in-flight microbatches and memory.
nlohmann::ordered_json pipeline_summary_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh);

}  // namespace autoshard

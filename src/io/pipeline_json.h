#pragma once
/// JSON of a pipelined plan (pipeline/pipeline.h): placements.json with the "pipeline" section
/// and per-node "stage" keys of docs/pipeline-format.md (the Python runtime reads it), and the
/// summary printed by `plan --json` and written to plan.json.
#include <string>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "pipeline/pipeline.h"
#include "planner/prefetch_schedule.h"

namespace autoshard {

/// placements.json: AutoParallel's schema over the full mesh (R on the pp dim), each node with
/// its "stage" (-1: copied by every stage that uses it), plus "pipeline" {mesh_dim, schedule,
/// microbatches, stages_per_rank, stages [{index, pp_rank, layers, first, last}]}, and the
/// stages' schedules as one "schedule" section (pipeline_schedule).
std::string write_pipeline_placements_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh,
                                           const ScheduleOptions& schedule = {});

/// Every stage's prefetches and issue points (planner/prefetch_schedule.h, on its solved stage
/// plan) named in the full graph `g`, as one: each stage's buckets numbered after the previous
/// stages', an entry whose nodes lie outside the stage (a received activation's producer)
/// dropped, a node every stage copies scheduled once.  Each stage's graph holds its own
/// entries only, so the runtime applies the whole section to every stage.  Its reductions
/// are the gradients a pipeline reduces once per step, on the microbatches' sum
/// (StageSolve::once_us; the runtime's autoshard.deferred_grads), not in each backward: the
/// file lists them as "once_per_step" and its "reduce" stays empty.
PrefetchSchedule pipeline_schedule(const PipelinePlan& pl, const Graph& g, const ScheduleOptions& o);

/// The plan's figures: schedule, step, bound, gap, and per stage its layers, devices, time per
/// microbatch, sends, once-per-step work, in-flight microbatches and memory.
nlohmann::ordered_json pipeline_summary_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh);

}  // namespace autoshard

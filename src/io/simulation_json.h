#pragma once
/// The "simulation" object of `plan --json` and of the report: the simulated step
/// (planner/simulate.h) next to the additive objective the solver minimised, and MFU.
#include <nlohmann/json.hpp>

#include "mesh/mesh.h"
#include "planner/simulate.h"

namespace autoshard {

/// {"step_us", "additive_us", "compute_us", "comm_us", "exposed_comm_us", "overlap_us",
///  "model_flops", "mfu", "peak_memory_bytes", "prefetch_peak_bytes", "layers",
///  "prefetch_layers", "streams": [{"name", "events", "busy_us"}]}.
nlohmann::ordered_json simulation_summary_json(const StepSimulation& sim,
                                               const SimulationOptions& o = {});

}  // namespace autoshard

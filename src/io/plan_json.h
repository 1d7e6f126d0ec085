#pragma once
/// The `--json` summary of a plan: quality proof (objective, bound, gap, status), the
/// compute/communication split, peak memory, problem sizes and phase times, and every
/// parameter's placement.
#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/plan.h"

namespace autoshard {

/// A finite double as a JSON number; infinities and NaN (forbidden or absent costs) as null.
nlohmann::ordered_json number_or_null(double v);

nlohmann::ordered_json plan_summary_json(const Plan& plan, const Graph& g, const Mesh& mesh);

}  // namespace autoshard

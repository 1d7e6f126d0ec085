#pragma once
/// What would make an infeasible memory budget fit: one line per remedy, each with numbers the
/// planner computed, not guessed.
///
///  - a larger budget: the least peak proven (memory floor) and, when known, the peak of a
///    layout that reaches it or of the best layout found (a budget that large fits that layout);
///  - recomputation, when the solve did not consider it (--recompute none, or selective): the
///    memory floor with every layer region fully recomputed (a lower bound on what any
///    recomputing plan needs; the floor with auto's freedom is no lower);
///  - a larger mesh: the first dim grown 2x, 4x, 8x until the floor of the problem built on it
///    (same options and recomputation policy) fits; when the least-usage layout there is itself a valid plan, that plan fits (said so),
///    else the floor is only necessary (said so).
/// Each remedy builds problems (no solve), so asking costs about one problem build per line.
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

/// Remedies for `plan`, an infeasible answer of `opt` (empty unless plan.status is kInfeasible
/// with a memory limit).
std::vector<std::string> fit_suggestions(ShardingOptimizer& opt, const Plan& plan);

/// "77.16 GiB": bytes in the largest unit (KiB, MiB, GiB) that leaves at least 1, two decimals,
/// rounded up (a budget written this way holds it).
std::string bytes_ceil(int64_t bytes);

}  // namespace autoshard

#include "planner/schedule_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "planner/fit_advice.h"

namespace autoshard {

void count_schedule_peak(ShardingOptimizer& opt, Plan& plan, const StepSimulation& sim) {
  plan.peak_memory_bytes = std::max(plan.peak_memory_bytes, sim.peak_memory_bytes);
  opt.set_solution(plan, opt.solution_choice());
}

ScheduledPlan solve_within_schedule_memory(ShardingOptimizer& opt, const SimulationOptions& o,
                                           int max_resolves) {
  ScheduledPlan out;
  out.plan = opt.get_solution();
  if (!out.plan.has_solution) return out;
  out.sim = simulate_step(opt, out.plan, o);
  const int64_t limit = out.plan.memory_limit_bytes;
  const int64_t asked = opt.options().memory_limit_bytes;
  bool current = true;  // opt's solution is out.plan (a failed solve replaces it)
  for (int k = 0; k < max_resolves && limit > 0 && out.sim->peak_memory_bytes > limit; ++k) {
    // The solve's own limit less what the schedule adds on top of the solved peak.
    const int64_t lowered = out.plan.memory_limit_bytes - (out.sim->peak_memory_bytes - limit);
    if (lowered <= 0) break;
    opt.mutable_options().memory_limit_bytes = lowered;
    Plan again = opt.get_solution();
    if (!again.has_solution) {
      current = false;
      break;
    }
    out.plan = std::move(again);
    out.sim = simulate_step(opt, out.plan, o);
  }
  if (!current || (out.plan.memory_limit_bytes != limit && out.sim->peak_memory_bytes > limit)) {
    // No lower limit helped: give back the plan solved under the limit asked for (and leave
    // `opt` holding it).
    opt.mutable_options().memory_limit_bytes = asked;
    out.plan = opt.get_solution();
    out.sim = simulate_step(opt, out.plan, o);
  }
  out.plan.memory_limit_bytes = limit;
  if (limit > 0 && out.sim->peak_memory_bytes > limit)
    out.plan.warnings.push_back(fmt::format(
        "the scheduled step peaks at {} per device, over the {} limit (prefetched and bucketed "
        "collectives' buffers live together: try --prefetch-layers 0 or --bucket none)",
        bytes_ceil(out.sim->peak_memory_bytes), bytes_ceil(limit)));
  count_schedule_peak(opt, out.plan, *out.sim);
  return out;
}

}  // namespace autoshard

#pragma once
/// The memory limit held by the step the runtime runs, not only by the solved problem.
///
/// The problem prices each redistribution's buffer at its consumer.  The schedule the plan
/// carries (planner/prefetch_schedule.h) issues parameter gathers a layer ahead and merges a
/// layer's gathers into one bucket, so those buffers are live earlier and together: the
/// simulated step's memory (planner/simulate.h) is the peak the runtime reaches.  When that
/// peak is over the limit the plan is solved again under the limit less the excess, a few
/// times, as the pipeline planner does for its in-flight microbatches; the peak the plan
/// reports is the larger of the two.
#include <optional>

#include "planner/plan.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"

namespace autoshard {

/// A solved plan and the simulation of its scheduled step.
struct ScheduledPlan {
  Plan plan;
  std::optional<StepSimulation> sim;  ///< absent when the plan has no solution
};

/// The plan's peak with the schedule's buffers counted (the larger of the two), in `plan` and
/// in `opt`'s solution (which `plan` must be), so that a saved state says the same.
void count_schedule_peak(ShardingOptimizer& opt, Plan& plan, const StepSimulation& sim);

/// Solves `opt` (get_solution) and simulates the plan under `o`; while the simulated peak is
/// over the plan's memory limit, solves again under the limit less the excess (at most
/// `max_resolves` times).  The returned plan's memory_limit_bytes is the limit asked for and
/// its peak_memory_bytes includes the schedule's buffers; a plan still over the limit carries
/// a warning saying by how much.  `opt` is left with the options of the returned plan.
ScheduledPlan solve_within_schedule_memory(ShardingOptimizer& opt, const SimulationOptions& o,
                                           int max_resolves = 3);

}  // namespace autoshard

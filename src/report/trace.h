#pragma once
/// The simulated step as a Chrome trace (`{"traceEvents": [...]}`, opens in Perfetto and
/// chrome://tracing): one process, one thread (track) per stream -- compute, then one per
/// mesh dim's communication -- with complete ("X") events named by op or collective; `args`
/// carry the node, its placements and, for collectives, the bytes and the redistribution.
#include <string>

#include "planner/plan.h"
#include "planner/simulate.h"

namespace autoshard {

class ShardingOptimizer;

/// Simulates the plan (default options) and writes the trace.  Deterministic.
std::string chrome_trace_json(ShardingOptimizer& opt, const Plan& plan);
std::string chrome_trace_json(ShardingOptimizer& opt, const Plan& plan, const StepSimulation& sim);

}  // namespace autoshard

#pragma once
/// The simulated step's memory over time (StepSimulation::memory and its peaks), from the times
/// the step simulator's replay gave its ops, its recomputation and its redistributions.
#include <map>
#include <vector>

#include "ir/graph.h"
#include "planner/comm_streams.h"
#include "planner/problem_builder.h"
#include "planner/simulate.h"

namespace autoshard {

/// Node i's plan, as the step simulator reads it: a node it meets without one (an output node)
/// is an error naming it.
const NodePlan& sim_node_plan(const Graph& g, const Plan& plan, NodeIdx i);

/// When the replayed step ran each op and each recomputation.
struct ReplayTimes {
  const std::vector<double>& node_start;
  const std::vector<double>& node_end;
  const std::vector<double>& redone_end;          ///< end of a node's recomputation, or -1
  const std::map<NodeIdx, double>& block_start;  ///< point b -> start of the recomputation there
};

/// The step's memory timeline into sim.memory and its peaks.  The base is the plan's
/// live-interval usage per time point (node index), each point at the time its op (or the
/// recomputation before it) started; above it, the redistributions' destination buffers while
/// their jobs run and until their consumer ends, and context-parallel attentions' K/V buffers.
/// `aux_choice`: the recomputation's problem nodes' strategies (recompute_schedule).
void memory_timeline(const Graph& g, const BuiltProblem& bp, const Plan& plan, const Mesh& mesh,
                     const std::vector<StrategyIdx>& aux_choice, const std::vector<CommJob>& jobs,
                     const ReplayTimes& r, StepSimulation& sim);

}  // namespace autoshard

#pragma once
/// Repeated layers: identical transformer blocks are detected from the graph structure and tied
/// to one set of decisions.  The tied problem has one node per class of corresponding nodes;
/// its costs are the sums over the members (an exact multiplier), edges between classes are
/// summed, and an edge inside one class adds its diagonal to the class's cost.  A tie is a
/// restriction of the original problem, so every tied solution is a valid plan with exactly the
/// cost the tied problem reports.  Memory: a class counts m x its members' usage over the union
/// of their intervals (m = most members live at once) -- exact when all members share one
/// interval, otherwise a safe over-estimate (memory_exact = false).
///
/// Detection: ops are compared by a structural signature (op, attributes, input and output
/// shapes and dtypes, strategy list).  In the schedule, a run of ops that equals the run P
/// positions later (a tandem repeat, P = the layer's op count) pairs each op with its
/// counterpart in the next layer; forward, backward and optimizer repeats are found one after
/// the other.  Parameters and optimizer state follow the ops that read them.
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "planner/problem_builder.h"
#include "problem/problem.h"

namespace autoshard {

struct ClusteredProblem {
  Problem problem;
  std::vector<PNodeIdx> class_of;  ///< per original problem node: its node in `problem`
  int32_t num_classes_tied = 0;    ///< classes with more than one member
  bool memory_exact = true;        ///< class usages equal the members' (see above)

  /// Full assignment from a clustered one.
  std::vector<StrategyIdx> expand(const std::vector<StrategyIdx>& c) const;
  /// Clustered assignment from a full one (each class takes its first member's choice).
  std::vector<StrategyIdx> restrict(const std::vector<StrategyIdx>& full) const;
};

ClusteredProblem cluster_problem(const Graph& g, const BuiltProblem& bp);
/// The same with the ties found beforehand (they depend on the graph and the strategy lists,
/// not on costs: a problem whose costs were rescaled ties the same way).
ClusteredProblem cluster_problem(const BuiltProblem& bp,
                                 const std::vector<std::pair<NodeIdx, NodeIdx>>& ties);
/// No ties: the problem as built.
ClusteredProblem identity_cluster(const BuiltProblem& bp);

/// Pairs (a, b) of graph nodes found to correspond in consecutive repeated layers.
std::vector<std::pair<NodeIdx, NodeIdx>> find_layer_ties(const Graph& g, const BuiltProblem& bp);

}  // namespace autoshard

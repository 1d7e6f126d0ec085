#pragma once
/// Twin views: a view op that repeats an earlier one over the same tensor.  A traced linear
/// layer flattens its input ([b, s, k] -> [b*s, k]), so the q, k and v projections each view
/// the one normed activation, and w1 and w3 the other.  Priced as separate uses, a
/// redistribution of that activation would be paid once per projection, although one
/// redistributed copy serves them all: AutoParallel prices it once (an alias node in front of
/// a tensor's users), and the runtime reuses it (autoshard.apply, shared redistributions).  So
/// a twin is tied to its first twin (same strategy, problem_builder.h kTwinSlot) instead of
/// reading the tensor through an edge of its own.
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "planner/plan.h"
#include "planner/problem_builder.h"
#include "problem/problem.h"

namespace autoshard {

/// Per graph node: its first twin by the graph alone (a view op, is_alias_op, with one input,
/// the same op, attributes, output and input tensor and phase as an earlier one), or kNoNode.
std::vector<NodeIdx> graph_twins(const Graph& g);

/// Per graph node: the problem node of its first twin, or -1.  Twins are view ops
/// (is_alias_op) with one input, the same tensor, the same phase and the same node template
/// (`template_of`, per problem node: equal op, attributes and shapes; -1 for pinned nodes,
/// which are never twins); `pnode` maps graph nodes to problem nodes (-1: none).
std::vector<PNodeIdx> twin_views(const Graph& g, const std::vector<PNodeIdx>& pnode,
                                 const std::vector<int32_t>& template_of);

/// Marks each twin's NodePlan::twin in `plan` from the tie edges of `bp` (kTwinSlot).
void mark_twins(const BuiltProblem& bp, Plan& plan);

/// Zero-cost diagonal matrices (infinite elsewhere), one per strategy count, shared by the ties.
class TwinTies {
 public:
  std::shared_ptr<const std::vector<Cost>> diagonal(size_t n);

 private:
  std::map<size_t, std::shared_ptr<const std::vector<Cost>>> by_size_;
};

}  // namespace autoshard

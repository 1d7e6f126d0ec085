#pragma once
/// Builds the strategy-selection Problem from a graph and a mesh (Alpa's intra-op formulation):
/// one problem node per graph node (output nodes excepted) whose strategies are the op's
/// sharding strategies, node cost = compute time of the local shard, one problem edge per
/// tensor use whose matrix is the redistribution time from the producer's output spec to the
/// spec the consumer needs, memory = local bytes of the node's outputs, live from the producer
/// to its last consumer in schedule (node) order.
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/live_intervals.h"
#include "planner/options.h"
#include "problem/problem.h"
#include "strategy/strategy.h"

namespace autoshard {

struct BuiltProblem {
  /// Nodes with costs and usages.  Edges are NOT materialized here (repeated layers share
  /// their matrices; copying one matrix per edge costs gigabytes on 3-D meshes): see
  /// `edges` below and materialize_edges().
  Problem problem;
  /// One per tensor use / grad agreement / tie: its ends and a shared cost matrix
  /// (row-major |S_u| x |S_v|).
  struct Edge {
    PNodeIdx u = 0;
    PNodeIdx v = 0;
    std::shared_ptr<const std::vector<Cost>> costs;
  };
  std::vector<Edge> edges;
  std::vector<NodeIdx> graph_node;                ///< per problem node
  std::vector<PNodeIdx> pnode;                    ///< per graph node; -1 for output nodes
  /// Per problem node, after filtering; nodes built from one template share their list.
  std::vector<StrategyList> strategies;
  /// What each problem edge stands for: a tensor use (consumer input slot), or the
  /// parameter <- gradient agreement of a grad pair (slot -1).
  struct EdgeOrigin {
    NodeIdx consumer = kNoNode;
    int32_t slot = -1;
    TensorRef producer;
  };
  std::vector<EdgeOrigin> edge_origin;
  std::vector<std::string> fallback_ops;  ///< ops with no sharding rule (sorted, unique)
  /// Per problem node (shorter, or null entries, where none): per strategy, the part of the
  /// node's cost that is communication inside the op, not compute -- the exposed K/V
  /// transfers of a context-parallel attention (planner/cp_cost.h).  The overlap objective
  /// leaves it out of the compute window; nodes of one template share the vector.
  std::vector<std::shared_ptr<const std::vector<double>>> op_comm;
  double op_comm_us(PNodeIdx v, StrategyIdx q) const {
    const size_t i = static_cast<size_t>(v);
    if (i >= op_comm.size() || !op_comm[i]) return 0.0;
    return (*op_comm[i])[static_cast<size_t>(q)];
  }
  void set_op_comm(PNodeIdx v, std::shared_ptr<const std::vector<double>> c) {
    if (!c) return;
    if (op_comm.size() <= static_cast<size_t>(v)) op_comm.resize(static_cast<size_t>(v) + 1);
    op_comm[static_cast<size_t>(v)] = std::move(c);
  }
  int64_t memory_limit = 0;               ///< bytes per device; 0 = none
  bool has_optimizer = false;             ///< the graph updates its own parameters

  /// Activation recomputation (planner/recompute.h; empty unless PlannerOptions::recompute).
  /// One region per layer instance and activation class ("attention", "mlp"): its decision
  /// node picks one of `modes` (strategy k = modes[k]).
  struct RecomputeRegion {
    std::string layer;   ///< module prefix, e.g. "layers.3"
    std::string region;  ///< "attention" or "mlp"
    PNodeIdx decision = -1;
    NodeIdx first_op = kNoNode;  ///< the region's first forward op (ties follow it)
    std::vector<RecomputePolicy> modes;  ///< kNone (keep), kSelective, kFull, kSelectiveOp
  };
  std::vector<RecomputeRegion> recompute_regions;
  /// Auxiliary problem nodes of recomputation, each with strategies m * |S_owner| + q (mode m
  /// of its region, owner strategy q): the gap and tail nodes of a forward op, and the keep
  /// node of a tensor a region reads from outside.
  struct RecomputeAux {
    enum Role : uint8_t { kGap, kTail, kKeep };
    PNodeIdx node = -1;
    PNodeIdx owner = -1;  ///< the forward op's problem node
    int32_t region = -1;  ///< index into recompute_regions
    Role role = kGap;
  };
  std::vector<RecomputeAux> recompute_aux;
  /// Per graph node: which selective recomputation policies keep its output (flags of
  /// planner/recompute.h selective_saves; empty when there are no regions).
  std::vector<char> selective_saved;
  /// The K/V buffer nodes of context-parallel attention ops (planner/cp_memory.h): each live at
  /// its owner's time point only, tied to it by an edge of origin slot kMemoryTieSlot.
  struct CpBuffer {
    PNodeIdx node = -1;
    PNodeIdx owner = -1;  ///< the attention op's problem node
  };
  std::vector<CpBuffer> cp_buffers;
};

/// Edge origin slot of a memory tie: a zero-cost diagonal, infinite elsewhere, from a node to an
/// auxiliary copy that only carries memory (parameter-memory shadows, whose consumer is the
/// parameter, and context-parallel buffer nodes, whose consumer is the attention op).
inline constexpr int32_t kMemoryTieSlot = -2;

/// Edge origin slot of a twin's tie: node `consumer` repeats an earlier view op of the same
/// tensor (same op, attributes and input: a traced linear layer flattens its input, so q, k and
/// v each view the one normed activation).  Twins take the same strategy (zero-cost diagonal)
/// and read one redistribution of their input, which the runtime reuses (autoshard.apply's
/// shared redistributions), as AutoParallel prices a tensor with several users once (an alias
/// node in front of them).  The tie moves no tensor: simulation, schedule and reports skip it.
inline constexpr int32_t kTwinSlot = -4;

/// Most strategies one problem node may keep (see build_problem).
inline constexpr size_t kMaxStrategiesPerNode = 8192;
/// Most strategies all problem nodes together may have.  Nodes of one layer class share their
/// strategy list, but every node still carries a cost and a usage per strategy, and the
/// reductions and searches visit each of them, so this bounds the solver's work and memory
/// (the 4-D case below took 150 s and 9.3 GB before it existed).  llama3-70b on 8x8x8 has 2.4
/// million; on a 4-D mesh such as 4x8x8x4 it would have tens of millions.
inline constexpr int64_t kMaxStrategiesTotal = 6'000'000;

/// Throws std::runtime_error when a constraint names an unknown node or leaves a node without
/// any strategy, a node has more than kMaxStrategiesPerNode strategies, or all nodes together
/// more than kMaxStrategiesTotal.
BuiltProblem build_problem(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const std::vector<Constraint>& constraints);

/// The full Problem with one materialized edge per BuiltProblem edge (for small problems,
/// --no-cluster and tests).
Problem materialize_edges(const BuiltProblem& bp);
/// Total cost of a full assignment using the shared matrices.
Cost evaluate_cost(const BuiltProblem& bp, const std::vector<StrategyIdx>& choice);

}  // namespace autoshard

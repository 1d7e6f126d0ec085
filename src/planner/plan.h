#pragma once
/// The result of planning: a placement for every node plus the figures that prove its quality.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "solver/solver.h"
#include "strategy/strategy.h"

namespace autoshard {

struct NodePlan {
  NodeIdx node = kNoNode;
  StrategyIdx strategy = -1;  ///< index into the node's (filtered) strategy list
  Strategy chosen;            ///< output and input specs
  double compute_us = 0;      ///< compute time of this node under the chosen strategy
  double comm_us = 0;         ///< redistribution time paid on this node's inputs
  /// A twin view (planner/twin_views.h): the earlier view whose redistributed input this one
  /// reads; kNoNode for every other node.
  NodeIdx twin = kNoNode;
};

struct Plan {
  std::vector<std::optional<NodePlan>> nodes;  ///< per graph node; nullopt for output nodes
  SolveStatus status = SolveStatus::kInfeasible;
  /// Estimated step time: the objective the plan was chosen for (PlannerOptions::objective):
  /// with the overlap-aware objective additive_us - overlapped_us, else additive_us.
  double objective_us = 0;
  double additive_us = 0;      ///< compute + every redistribution (nothing overlapped)
  /// Communication the overlap model hides behind compute (planner/overlap.h); 0 when additive.
  double overlapped_us = 0;
  /// Solves the overlap-aware objective's dual took (planner/overlap_solve.h); 0: one solve of
  /// the additive objective.
  int32_t objective_solves = 0;
  /// A solve stopped at the time limit (or a phase at its share of it) rather than on its own
  /// limits: the plan may depend on the machine's speed and load (SolveResult::clock_stopped).
  /// Not saved with a plan.
  bool clock_stopped = false;
  /// objective_us is the overlap-aware step time (the options' objective when evaluated).
  bool overlap_aware = false;
  double lower_bound_us = 0;
  double gap = 0;
  double compute_us = 0;
  double comm_us = 0;
  int64_t peak_memory_bytes = 0;
  int64_t memory_limit_bytes = 0;  ///< 0: none
  /// When infeasible: the smallest peak of any layout found, an upper bound on the smallest
  /// achievable peak (-1 if none was found); it is the minimum when it equals the lower bound.
  int64_t min_peak_memory_bytes = -1;
  /// When infeasible: a proven lower bound on the smallest achievable peak (-1 if unknown).
  int64_t min_peak_lower_bound_bytes = -1;
  // Problem size.
  int32_t graph_nodes = 0;
  int32_t problem_nodes = 0;
  int32_t problem_edges = 0;
  int64_t alpa_variables = 0;
  int32_t clustered_nodes = 0;  ///< problem nodes after tying repeated layers
  int32_t reduced_nodes = 0;
  int32_t reduced_edges = 0;
  int64_t mip_variables = 0;
  int32_t layer_clusters = 0;   ///< number of repeated-layer classes found
  std::vector<std::pair<std::string, double>> phase_seconds;
  std::vector<std::string> warnings;
  bool checked = false;  ///< the independent check ran and agreed
  /// Activation recomputation (PlannerOptions::recompute): the part of compute_us + comm_us
  /// spent recomputing, and per layer its module prefix and "none" | "selective" | "full".
  double recompute_us = 0;
  std::vector<std::pair<std::string, std::string>> layer_recompute;
  /// The graph's forward ops that the backward re-executes (graph order): what a runtime
  /// must recompute to run the plan as planned (placements.json "recompute").
  std::vector<std::string> recomputed_nodes;

  bool has_solution = false;  ///< a placement was found (optimal, feasible or timed out)
};

}  // namespace autoshard

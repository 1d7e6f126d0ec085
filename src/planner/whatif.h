#pragma once
/// The what-if loop on a solved ShardingOptimizer: compare two plans, look at one node's
/// options and their costs, and ask "why not placement X here?".  Everything returns plain
/// value structs (the Python binding wraps them field by field) plus format_* functions that
/// print them as text for the CLI.
///
///   opt.get_solution();
///   auto names = opt.add_node_constraint("mm_3", parse_placements("S(0)R"));
///   Plan pinned = opt.resolve();
///   SolutionDiff d = diff_solutions(opt, base, pinned);   // grouped by layer
///   opt.remove_constraints(names);
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

/// Full problem assignment of `plan` in opt's current problem: main nodes take the plan's
/// strategy indices, auxiliary nodes (parameter-memory shadows, recomputation) are completed
/// as when loading placements.  When `plan` is opt.solution(), its stored assignment.
std::vector<StrategyIdx> plan_choice(ShardingOptimizer& opt, const Plan& plan);

/// The layer or module a node belongs to, for grouping: its module path up to the first
/// numeric component ("layers.3.attention.wq" -> "layers.3"), else its first component, else
/// "(no module)".
std::string layer_of(const Node& n);

struct NodeChange {
  std::string node;
  std::string op;            ///< op name, or the node kind ("parameter") for placeholders
  std::string module_path;
  std::string before;        ///< strategy name in plan a ("S(0)R <- S(0)R, RR")
  std::string after;         ///< in plan b
  bool placement_changed = false;  ///< false: only its input costs changed
  double compute_delta_us = 0;     ///< b - a
  double comm_delta_us = 0;        ///< b - a, redistributions on the node's inputs
};

struct LayerChanges {
  std::string layer;  ///< layer_of()
  std::vector<NodeChange> nodes;
  double delta_us = 0;  ///< sum of the nodes' compute and communication deltas
};

struct SolutionDiff {
  double objective_a_us = 0, objective_b_us = 0;
  double delta_us = 0;          ///< objective b - a
  double compute_delta_us = 0;  ///< b - a
  double comm_delta_us = 0;     ///< b - a
  int64_t peak_a_bytes = 0, peak_b_bytes = 0;
  int32_t placements_changed = 0;  ///< nodes whose strategy differs
  std::vector<LayerChanges> layers;  ///< in order of the first changed node
};

/// Changes from plan a to plan b (both plans of opt's graph).
SolutionDiff diff_solutions(ShardingOptimizer& opt, const Plan& a, const Plan& b);
/// `max_nodes` limits the node lines (0: all); the summary lines always print.
std::string format_diff(const SolutionDiff& d, size_t max_nodes = 0);

struct StrategyCost {
  StrategyIdx index = -1;
  std::string name;          ///< "S(0)R <- S(0)R, RR"
  std::string output;        ///< output_spec_string
  double compute_us = 0;
  /// Redistribution cost on the node's inputs given the producers' current strategies (the
  /// node's outgoing edges are not counted).
  double comm_us = 0;
  int64_t memory_bytes = 0;  ///< local bytes of the node's outputs per device
  bool chosen = false;
};

struct InputMatrix {
  int32_t slot = -1;          ///< input slot; -1: the parameter <- gradient agreement
  std::string producer;       ///< graph node name
  std::vector<std::string> producer_strategies;  ///< rows (output spec of each strategy)
  std::vector<std::string> consumer_strategies;  ///< columns (spec this node needs there)
  std::vector<double> costs;  ///< row-major |rows| x |columns|, us (+inf: forbidden)
  StrategyIdx producer_chosen = -1;
  StrategyIdx consumer_chosen = -1;
};

struct NodeCosts {
  std::string node;
  std::string op;
  std::string module_path;
  StrategyIdx chosen = -1;  ///< in the current solution (-1 without one)
  std::vector<StrategyCost> strategies;
  std::vector<InputMatrix> inputs;
};

/// Strategies of `node` with their costs under opt.solution() (solved first if needed).
/// Throws std::runtime_error for an unknown or unplanned (output) node.
NodeCosts node_costs(ShardingOptimizer& opt, const std::string& node);
/// Text table of node_costs; matrices wider or taller than `max_matrix` are cut (noted).
std::string format_node_costs(const NodeCosts& c, size_t max_matrix = 16);
/// format_node_costs(node_costs(opt, node)).
std::string print_costs_for_node(ShardingOptimizer& opt, const std::string& node);

struct Explanation {
  std::string node;
  std::string placement;       ///< the asked output placement ("S(0)R")
  std::string chosen;          ///< the node's output placement in the optimum
  bool already_chosen = false;  ///< the optimum already uses it
  bool feasible = true;         ///< a plan with the pin exists
  std::string infeasible_reason;
  double optimum_us = 0;        ///< opt.solution()'s objective
  double pinned_us = 0;         ///< best plan with the node pinned
  double delta_us = 0;          ///< pinned - optimum (>= 0 when the optimum is proven)
  std::string pinned_status;    ///< solve status of the pinned plan
  SolutionDiff diff;            ///< optimum -> pinned, by layer
};

/// "Why not `placement` for `node`?": solves with the node pinned, then removes the pin and
/// restores the previous solution (the optimizer is left as it was).
Explanation explain_placement(ShardingOptimizer& opt, const std::string& node,
                              const std::vector<Placement>& placement);
std::string format_explanation(const Explanation& e, size_t max_nodes = 40);

}  // namespace autoshard

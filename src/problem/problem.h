#pragma once
/// The strategy-selection problem, in the shape of the IOPDDL contest format: every node picks
/// one strategy; a strategy has a cost and a memory usage that counts at every time point of
/// the node's half-open interval [start, end); every edge adds a cost for the pair of choices of
/// its two ends; at every time point the sum of live usages must not exceed the usage limit.
/// The problem knows nothing about tensors: the planner and the IOPDDL reader both build it.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace autoshard {

/// Index of a node of a Problem (not of a Graph).
using PNodeIdx = int32_t;
/// Index of a strategy within one node.
using StrategyIdx = int32_t;
/// Index of an edge of a Problem.
using EdgeIdx = int32_t;
/// Any of these indices (or an int64 count) as a vector subscript.
inline size_t sz(int64_t x) { return static_cast<size_t>(x); }

/// Costs are doubles: planner costs are microseconds, IOPDDL costs are integers well inside
/// 2^53 (totals are re-checked in 128-bit integers by the IOPDDL evaluator).  A forbidden
/// choice or pair has cost +infinity.
using Cost = double;
inline constexpr Cost kInfCost = std::numeric_limits<double>::infinity();

struct ProblemNode {
  std::string name;              ///< optional, for reports and errors
  std::vector<Cost> costs;       ///< one per strategy
  std::vector<int64_t> usages;   ///< one per strategy (same length as costs)
  int64_t start = 0;             ///< usage counts at times start..end-1
  int64_t end = 0;

  StrategyIdx num_strategies() const { return static_cast<StrategyIdx>(costs.size()); }
};

struct ProblemEdge {
  PNodeIdx u = 0;
  PNodeIdx v = 0;
  /// Row-major |S_u| x |S_v|: costs[su * |S_v| + sv].
  std::vector<Cost> costs;
};

struct Problem {
  std::string name;
  std::vector<ProblemNode> nodes;
  std::vector<ProblemEdge> edges;
  int64_t usage_limit = -1;  ///< -1: no limit

  PNodeIdx num_nodes() const { return static_cast<PNodeIdx>(nodes.size()); }
  EdgeIdx num_edges() const { return static_cast<EdgeIdx>(edges.size()); }
  Cost edge_cost(const ProblemEdge& e, StrategyIdx su, StrategyIdx sv) const {
    return e.costs[static_cast<size_t>(su) * nodes[static_cast<size_t>(e.v)].costs.size() +
                   static_cast<size_t>(sv)];
  }
  /// Checks sizes and indices; returns an error message or the empty string.
  std::string validate() const;
};

/// Total cost of a full assignment (kInfCost if a forbidden choice or pair is used).  Does not
/// check memory; see peak_usage().
Cost evaluate_cost(const Problem& p, const std::vector<StrategyIdx>& choice);
/// Highest sum of live usages over time points before `horizon`, given one usage per node.
int64_t peak_of_usages(const Problem& p, const std::vector<int64_t>& usage,
                       int64_t horizon = std::numeric_limits<int64_t>::max());
/// Highest sum of live usages over time points before `horizon` for an assignment.
int64_t peak_usage(const Problem& p, const std::vector<StrategyIdx>& choice,
                   int64_t horizon = std::numeric_limits<int64_t>::max());
/// Each node's least-usage strategy (the first such among its finite-cost ones).  Its peak is a
/// lower bound on the peak of every assignment, since at every time point each live node uses
/// at least that much; edges may forbid the assignment itself.
std::vector<StrategyIdx> least_usage_choice(const Problem& p);
/// Number of strategy-selection variables and edge variables in Alpa's formulation (sum of
/// |S_v| over nodes and of |S_u|*|S_v| over edges), for reporting problem sizes.
int64_t alpa_variable_count(const Problem& p);

}  // namespace autoshard

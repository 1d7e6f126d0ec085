#pragma once
/// The exact reductions of a strategy-selection Problem: one set of rules with two outputs, a
/// smaller Problem (reduce(), for the MIP, the greedy, the Lagrangian and the minimal-peak
/// search) and a group model (reduce_to_groups(), for the anytime search and its bounds).
///
/// Memory is tracked as pieces: each node carries one piece per distinct interval of the nodes
/// it stands for, holding its usage per strategy above the piece's minimum; the minimum goes to
/// a constant base usage per time segment.  A piece lying only in segments where even the
/// largest usages fit the limit can never bind: it is dropped and its maximum goes to the base
/// (so the reduced problem never under-reports a usage).  A node without pieces is
/// "memory-free": its choice cannot change feasibility.
///
/// Rules (applied to a fixpoint with a work list; each keeps at least one optimal solution,
/// memory included; reduce_test.cc checks every rule against brute force on random problems):
///  - forbidden strategies: a strategy with cost +inf, or whose row in some incident edge is
///    all +inf, is removed (a node left without strategies proves the problem infeasible);
///  - overflowing strategies: a strategy whose usage above its piece's minimum exceeds the
///    room the base leaves under the limit in some segment of the piece is removed (the base
///    holds every other node's minimum, so that strategy overflows whatever they choose);
///  - parallel edges are summed into one edge;
///  - an edge whose matrix is a(p) + b(q) (all finite) is split into node costs and removed
///    (this also removes all-zero edges);
///  - single-strategy nodes are folded: their edge rows become neighbour node costs, their
///    cost a constant;
///  - dominated / duplicate strategies: a dominates b if cost_a <= cost_b, every incident edge
///    row of a is <= the row of b elementwise and a uses no more in every piece; ties keep the
///    lower index;
///  - elimination of a node v of degree 0, 1 or 2 ("degree" = distinct neighbours): degree 0
///    picks argmin cost, degree 1 adds min_q(c_v(q) + e(p,q)) to the neighbour's cost of p,
///    degree 2 replaces u - v - w by an edge u - w with the min-plus product
///    min_q(e1(p,q) + c_v(q) + e2(q,r)).  Memory safety: v must be memory-free, or every best
///    response (ties broken towards less usage) must use v's minimum in every piece; the
///    response is then optimal for cost and memory at once;
///  - merge: when every strategy of a neighbour h leaves exactly one finite choice at v, v is a
///    function of h; v's cost, pieces and edges move to h.  reduce() merges only where every
///    node keeps at most one piece, so that its output is again a Problem.
/// Eliminations and merges are recorded and undone in reverse by ReductionMap::map_back.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "problem/problem.h"
#include "solver/group_model.h"
#include "solver/memory_rows.h"

namespace autoshard {

/// A node removed by a reduction; its original strategy is a function of the final original
/// strategies of up to two other original nodes (`deps`), which are decided before it when
/// eliminations are undone in reverse order.
struct Elimination {
  PNodeIdx node = 0;                   ///< original node
  std::vector<PNodeIdx> deps;          ///< 0, 1 or 2 original nodes
  /// Per dep: original strategy -> position in that dep's strategy list at elimination time
  /// (-1 if it was already removed).
  std::vector<std::vector<StrategyIdx>> dep_pos;
  std::vector<StrategyIdx> dep_count;  ///< number of strategies of each dep at that time
  /// Original strategy of `node` for each combination of dep positions (row-major).
  std::vector<StrategyIdx> table;
};

/// How original assignments and reduced ones correspond.
struct ReductionMap {
  int32_t original_nodes = 0;
  std::vector<PNodeIdx> orig_node;                       ///< reduced node -> original node
  std::vector<std::vector<StrategyIdx>> orig_strategy;   ///< reduced (node, strategy) -> original
  std::vector<Elimination> eliminated;                   ///< in elimination order

  /// Original assignment from an assignment of the reduced problem.
  std::vector<StrategyIdx> map_back(const std::vector<StrategyIdx>& reduced_choice) const;
  /// Reduced assignment from an original one; empty if it uses a removed strategy of a
  /// surviving node (eliminated nodes are ignored: the reductions keep an optimal solution,
  /// not every solution).
  std::vector<StrategyIdx> map_forward(const std::vector<StrategyIdx>& original_choice) const;
};

struct ReducedProblem : ReductionMap {
  Problem problem;               ///< what is left; usage_limit as in the original
  std::vector<BaseUsage> base;   ///< constant usage of removed nodes and piece minima
  Cost constant_cost = 0;        ///< cost of removed nodes and edges
  /// Some node has no allowed strategy left: forbidden choices, or (with overflow) the usage
  /// limit, rule out every assignment.
  bool infeasible = false;
};

struct ReduceOptions {
  bool eliminate = true;   ///< degree-0/1/2 eliminations
  bool dominance = true;
  bool decompose = true;   ///< split additive edges into node costs
  bool merge = true;       ///< merge nodes that are functions of a neighbour
  /// Remove overflowing strategies (see above).  Off for the minimal-peak search, which runs
  /// the reductions with a limit of 0 to keep every varying usage.
  bool overflow = true;
  /// Degree-2 eliminations are skipped when they would create an edge with more entries than
  /// the two edges they remove plus this slack (keeps the MIP small), unless an edge u - w
  /// already exists.  reduce_to_groups() ignores it (the anytime search gains from any
  /// elimination).
  int64_t chain_growth_slack = 0;
  /// Reductions stop here, leaving the rest to the search (each applied rule is exact, so a
  /// partly reduced problem is still exact).  On 4-D meshes they would otherwise take minutes.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

/// Applies the reductions; always exact.  Every node of the result has one interval.
ReducedProblem reduce(const Problem& p, const ReduceOptions& opt = {});
/// The identity reduction (no rule applied), for skip_reductions.
ReducedProblem identity_reduction(const Problem& p);

/// The reductions as a group model, plus what is needed to expand its solutions.
class GroupReduction {
 public:
  explicit GroupReduction(const Problem& p, const ReduceOptions& opt = {});
  const GroupModel& model() const { return model_; }
  /// Original choice for a group-model choice (one strategy index per group).
  std::vector<StrategyIdx> expand(const std::vector<int32_t>& group_choice) const {
    return map_.map_back(group_choice);
  }
  /// Group-model choice of an original choice (each group takes the strategy its root node has
  /// in `choice`); empty when some root's strategy was dropped by the reductions.
  std::vector<int32_t> restrict(const std::vector<StrategyIdx>& choice) const {
    return map_.map_forward(choice);
  }
  /// The correspondence: group g stands for original node map().orig_node[g], its strategy s
  /// for map().orig_strategy[g][s].
  const ReductionMap& map() const { return map_; }
  /// One-line summary (sizes before and after).
  const std::string& summary() const { return summary_; }

 private:
  GroupModel model_;
  ReductionMap map_;
  std::string summary_;
};

}  // namespace autoshard

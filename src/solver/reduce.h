#pragma once
/// Exact reductions of a strategy-selection Problem, applied before the exact search.
///
/// Rules (applied to a fixpoint with a work list; each is exact, see reduce_test.cc which
/// checks every rule against brute force on random problems):
///  - forbidden strategies: a strategy with cost +inf, or whose row in some incident edge is
///    all +inf, is removed (a node left without strategies proves the problem infeasible);
///  - parallel edges are summed into one edge, stored with u < v (matrix transposed);
///  - an edge whose matrix is a(p) + b(q) (all finite) is split into node costs and removed
///    (this also removes all-zero edges);
///  - single-strategy nodes are folded: their edge rows become neighbour node costs, their
///    cost becomes a constant and their usage a constant "base usage" over their interval;
///  - duplicate / dominated strategies: a dominates b at v if cost_a <= cost_b, every
///    incident edge row of a is <= the row of b elementwise and usage_a <= usage_b (the usage
///    condition is dropped for memory-free nodes, below); ties keep the lower index;
///  - elimination of a node v of degree 0, 1 or 2 ("degree" = distinct neighbours):
///    degree 0 picks argmin cost, degree 1 adds min_q(c_v(q) + e(p,q)) to the neighbour's
///    cost of p, degree 2 replaces u - v - w by an edge u - w with the min-plus product
///    min_q(e1(p,q) + c_v(q) + e2(q,r)) (merged with an existing u - w edge).
///
/// MEMORY SAFETY.  An elimination chooses v's strategy from its neighbours' strategies by cost
/// alone, so it is only done when v's choice cannot change feasibility:
///  (a) v's usage is the same for all its remaining strategies (then it is a constant), or
///  (b) v is "memory-free": at every time point of v's interval the usage limit cannot bind,
///      i.e. base usage + sum over live nodes of their MAXIMUM usage <= limit (always true
///      without a limit, and for empty intervals).
///  (c) otherwise, only if every best response of v (ties broken towards lower usage) has
///      v's minimum usage: the response is then optimal for cost and for memory at once, and
///      v counts as that constant minimum usage.
/// In cases (a) and (b) v's maximum usage is moved into the base usage over its interval: for
/// (a) that is exact, for (b) it keeps every time point of v's interval non-binding (the
/// maximum profile is unchanged), and no other time point is touched; in case (c) the minimum
/// usage is moved (exact).  Memory-freedom is monotone:
/// reductions never raise any node's maximum usage, so a memory-free node stays memory-free;
/// it is recomputed after each fixpoint round and the rounds repeat while new nodes become
/// free.  Dominance drops the usage condition only for memory-free nodes, for the same reason.
/// The reduced problem keeps the original usage_limit; memory constraints of the reduced
/// problem are "base(t) + sum of live reduced usages <= limit" (see memory_rows()).
#include <chrono>
#include <cstdint>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

/// Constant usage counted over [start, end).
struct BaseUsage {
  int64_t start = 0;
  int64_t end = 0;
  int64_t usage = 0;
};

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

struct ReducedProblem {
  Problem problem;               ///< what is left; usage_limit as in the original
  std::vector<BaseUsage> base;   ///< constant usage of removed nodes
  Cost constant_cost = 0;        ///< cost of removed nodes and edges
  bool infeasible = false;       ///< some node has no allowed strategy left
  int32_t original_nodes = 0;
  std::vector<PNodeIdx> orig_node;                       ///< reduced node -> original node
  std::vector<std::vector<StrategyIdx>> orig_strategy;   ///< reduced (node, strategy) -> original
  std::vector<Elimination> eliminated;                   ///< in elimination order

  /// Original assignment from an assignment of the reduced problem.
  std::vector<StrategyIdx> map_back(const std::vector<StrategyIdx>& reduced_choice) const;
  /// Reduced assignment from an original one; empty if it uses a removed strategy of a
  /// surviving node (eliminated nodes are ignored).
  std::vector<StrategyIdx> map_forward(const std::vector<StrategyIdx>& original_choice) const;
};

struct ReduceOptions {
  bool eliminate = true;   ///< degree-0/1/2 eliminations
  bool dominance = true;
  bool decompose = true;   ///< split additive edges into node costs
  /// Degree-2 eliminations are skipped when they would create an edge with more entries than
  /// the two edges they remove plus this slack (keeps the MIP small), unless an edge u - w
  /// already exists.
  int64_t chain_growth_slack = 0;
  /// Reductions stop here, leaving the rest to the search (each applied rule is exact, so a
  /// partly reduced problem is still exact).  On 4-D meshes they would otherwise take minutes.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

/// Applies the reductions (or none when `identity`); always exact.
ReducedProblem reduce(const Problem& p, const ReduceOptions& opt = {});
/// The identity reduction (no rule applied), for skip_reductions.
ReducedProblem identity_reduction(const Problem& p);

/// One memory constraint: offset + sum over `nodes` of their usage <= limit.
struct MemoryRow {
  int64_t offset = 0;
  std::vector<PNodeIdx> nodes;
};

/// Memory constraints of a problem with constant base usage: one row per time point whose
/// live set is not dominated (a row is dominated by one whose live set contains it and whose
/// offset is not smaller; only neighbouring event points are compared, which keeps every
/// maximal row).  With `drop_slack`, rows that cannot bind (offset + sum of maximum usages
/// <= limit) are dropped.  Total size is the sum of maximal live set sizes.
std::vector<MemoryRow> memory_rows(const Problem& p, const std::vector<BaseUsage>& base,
                                   bool drop_slack);
/// Largest offset + sum of minimum usages over rows: a lower bound on any peak.
int64_t min_possible_peak(const Problem& p, const std::vector<MemoryRow>& rows);
/// Peak of an assignment under the rows (max over rows of offset + usages).
int64_t rows_peak(const Problem& p, const std::vector<MemoryRow>& rows,
                  const std::vector<StrategyIdx>& choice);

}  // namespace autoshard

#pragma once
/// Exact, memory-aware reductions for the anytime solver, producing a smaller "group" model.
///
/// A group stands for one surviving original node (its root) plus every node whose choice was
/// shown to be a function of the root's choice.  Its memory is a list of pieces, one per
/// original interval, each with a usage per group strategy (minus its minimum, which goes to a
/// fixed baseline).  Reductions, repeated until nothing changes (every one keeps at least one
/// optimal solution, memory included):
///  * drop strategies with infinite unary cost or with no finite partner across some edge;
///  * fold single-strategy groups into their neighbours' unary costs and the baseline;
///  * merge a node into a neighbour when each neighbour strategy leaves exactly one finite
///    choice at the node (the node becomes a function of the neighbour);
///  * eliminate memory-free leaves (min over their strategies) and memory-free degree-2 nodes
///    (min-plus product of their two edges);
///  * drop pieces that lie entirely in time segments where even the largest usages fit;
///  * drop dominated strategies (no more cost, no more usage anywhere, edge rows no larger).
/// The eliminations are recorded and undone in reverse by expand().
#include <cstdint>
#include <string>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

/// The reduced problem the anytime search works on.  Times are compressed into segments.
struct GroupModel {
  struct Piece {
    int32_t seg_lo = 0, seg_hi = 0;  ///< segments [seg_lo, seg_hi)
    std::vector<int64_t> du;         ///< usage per group strategy above the piece minimum
  };
  struct Edge {
    int32_t a = 0, b = 0;
    std::vector<Cost> m;  ///< |S_a| x |S_b| row-major, may contain +inf
  };
  std::vector<std::vector<Cost>> unary;    ///< per group, per strategy (finite)
  std::vector<std::vector<Piece>> pieces;  ///< per group
  std::vector<Edge> edges;
  std::vector<std::vector<std::pair<int32_t, bool>>> adj;  ///< (edge, group is side a)
  std::vector<int64_t> base;  ///< fixed usage per segment (segments that can never overflow hold a
                              ///< very negative value so they never bind)
  int64_t limit = -1;         ///< -1: none
  Cost offset = 0;            ///< cost of everything eliminated (added to every solution)
  bool infeasible = false;    ///< a node lost all its strategies: no finite solution exists

  int32_t num_groups() const { return static_cast<int32_t>(unary.size()); }
  int32_t num_segments() const { return static_cast<int32_t>(base.size()); }
  Cost edge_cost(const Edge& e, int32_t sa, int32_t sb) const {
    return e.m[static_cast<size_t>(sa) * unary[static_cast<size_t>(e.b)].size() + static_cast<size_t>(sb)];
  }
};

/// A reduction of a Problem: the group model plus what is needed to expand its solutions.
class AnytimeReduction {
 public:
  explicit AnytimeReduction(const Problem& p);
  const GroupModel& model() const { return model_; }
  /// Original choice for a group-model choice (one strategy index per group).
  std::vector<StrategyIdx> expand(const std::vector<int32_t>& group_choice) const;
  /// Group-model choice of an original choice: each group takes the strategy its root node has
  /// in `choice`.  Empty when some root's strategy was dropped by the reductions (the choice
  /// then has no image: the reductions keep an optimal solution, not every solution).
  std::vector<int32_t> restrict(const std::vector<StrategyIdx>& choice) const;
  /// One-line summary (sizes before and after).
  std::string summary() const { return summary_; }

  struct Record {
    enum Kind { kFixed, kFunction, kTable } kind = kFixed;
    int32_t node = 0;             ///< original node being reconstructed
    int32_t ref_a = -1, ref_b = -1;  ///< original nodes it depends on
    int32_t fixed = 0;            ///< kFixed: original strategy
    int32_t stride = 0;           ///< kTable: original |S_ref_b|
    std::vector<int32_t> table;   ///< indexed by original strategy of ref_a (and ref_b)
  };

 private:
  GroupModel model_;
  std::vector<Record> records_;
  std::vector<int32_t> group_root_;               ///< group -> original node
  std::vector<std::vector<int32_t>> group_ids_;   ///< group -> original strategy per strategy
  int32_t num_nodes_ = 0;
  std::string summary_;
};

}  // namespace autoshard

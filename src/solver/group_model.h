#pragma once
/// The group model: what the exact reductions (reduce.h, GroupReduction) leave of a Problem
/// for the anytime search, its bounds and its branch and bound.
///
/// A group stands for one surviving original node plus every node whose choice was shown to be
/// a function of it.  Its memory is a list of pieces, one per distinct interval of the nodes it
/// stands for, each with a usage per group strategy above the piece's minimum (the minimum is
/// in the per-segment baseline).  Times are compressed into segments: the intervals between
/// consecutive distinct interval ends of the original problem.
#include <cstdint>
#include <utility>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

struct GroupModel {
  /// Base usage of segments that can never overflow: far below any limit, so they never bind.
  static constexpr int64_t kNeverBinds = -(int64_t{1} << 60);

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
  /// Whether the limit can bind in segment t.
  bool can_bind(int32_t t) const { return base[static_cast<size_t>(t)] > kNeverBinds / 2; }
  Cost edge_cost(const Edge& e, int32_t sa, int32_t sb) const {
    return e.m[static_cast<size_t>(sa) * unary[static_cast<size_t>(e.b)].size() + static_cast<size_t>(sb)];
  }
};

/// Model cost of a group choice, offset included (+inf if a forbidden pair is used).
Cost group_cost(const GroupModel& m, const std::vector<int32_t>& x);
/// Usage of a group choice per time segment, base included.
std::vector<int64_t> group_usage(const GroupModel& m, const std::vector<int32_t>& x);
/// Whether a group choice's usage stays within the limit in every segment.
bool group_fits(const GroupModel& m, const std::vector<int32_t>& x);

}  // namespace autoshard

#pragma once
/// The working graph of the exact reductions (reducer.h) and the edits the rules are made of:
/// adding and removing edges and strategies, removing nodes, and the memory bookkeeping (pieces,
/// the base usage per segment, which segments can still bind).  Internal to the solver: the
/// rules themselves are in reducer.cc.
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "solver/reducer.h"

namespace autoshard::reduce_detail {

inline uint64_t edge_key(PNodeIdx x, PNodeIdx y) {
  if (x > y) std::swap(x, y);
  return (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
}

/// The base of the rules (reducer.cc): the Reduced it fills, the work list of nodes to revisit,
/// and the edits, which re-queue the nodes where a rule may fire anew.
class WorkGraph {
 protected:
  WorkGraph(const Problem& p, const ReduceOptions& opt, Reduced& out) : p_(p), opt_(opt), r_(out) {}

  WNode& node(PNodeIdx v) { return r_.nodes[sz(v)]; }
  WEdge& edge(int32_t id) { return r_.edges[sz(id)]; }
  PNodeIdx other(const WEdge& e, PNodeIdx x) const { return e.a == x ? e.b : e.a; }
  /// Entry of edge e when node x takes sx and the other end takes sy.
  Cost ev(const WEdge& e, PNodeIdx x, int32_t sx, int32_t sy) const {
    const size_t kb = sz(r_.nodes[sz(e.b)].k());
    return e.a == x ? e.m[sz(sx) * kb + sz(sy)] : e.m[sz(sy) * kb + sz(sx)];
  }

  void init();
  void enqueue(PNodeIdx v) {
    WNode& n = node(v);
    if (n.alive && !n.queued) {
      n.queued = true;
      queue_.push_back(v);
    }
  }
  void add_to_base(int32_t lo, int32_t hi, int64_t u) {
    base_diff_[sz(lo)] += u;
    base_diff_[sz(hi)] -= u;
  }
  /// Moves the piece's minimum to the base and keeps the rest, summed into a piece of the same
  /// interval if the node has one.
  void add_piece(WNode& n, WPiece pc);
  void add_edge(PNodeIdx a, PNodeIdx b, const std::vector<Cost>& m);
  void remove_edge(int32_t id);
  void remove_strategies(PNodeIdx v, const std::vector<char>& keep);
  Elimination start_elimination(PNodeIdx v, std::initializer_list<PNodeIdx> deps);
  /// Removes v and its edges.  Its pieces' minima are in the base already, and every rule that
  /// removes a node with pieces picks strategies at those minima.
  void kill(PNodeIdx v);
  /// Marks the segments where the largest usages of what is left can exceed the limit.
  void compute_binding();
  /// Drops pieces lying only in segments where the limit cannot bind; their maxima go to the
  /// base, which keeps those segments non-binding (reductions never raise a maximum, so a
  /// segment that cannot bind never will).  Returns true if any piece was dropped.
  bool drop_safe_pieces();
  /// Removes every strategy that overflows on its own: total usage in a segment is at least
  /// base + the piece's usage above its minimum, so a strategy whose piece usage exceeds
  /// limit - base in one of its segments is infeasible whatever the other nodes choose.  A
  /// parameter memory constraint (problem_builder.cc: one row of "shadow" usages at a private
  /// time point) at its default bound 1/devices leaves no room at all: this pins every
  /// parameter to its smallest local size, the row stops binding, and the search is again
  /// memory-free (AutoParallel's LLaMA-3 8B on 8x8: 60 s -> under a second).  Returns true if
  /// any strategy was removed.
  bool remove_overflowing();

  const Problem& p_;
  const ReduceOptions& opt_;
  Reduced& r_;
  std::vector<int64_t> base_diff_;       ///< base usage, as differences per segment
  std::vector<int32_t> binding_prefix_;  ///< binding segments before each segment
  std::unordered_map<uint64_t, int32_t> edge_index_;
  std::deque<PNodeIdx> queue_;
};

}  // namespace autoshard::reduce_detail

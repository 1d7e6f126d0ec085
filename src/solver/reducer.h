#pragma once
/// The working graph of the exact reductions (the rules are listed in reduce.h) and the run
/// that shrinks it; reduce.cc turns what is left into a Problem or a group model.  Internal to
/// the solver.
#include <cstdint>
#include <vector>

#include "problem/problem.h"
#include "solver/reduce.h"

namespace autoshard::reduce_detail {

/// Usage over segments [lo, hi) per current strategy, above its minimum (which is in the base).
struct WPiece {
  int32_t lo = 0, hi = 0;
  std::vector<int64_t> u;
};

struct WNode {
  bool alive = true;
  bool queued = false;
  std::vector<StrategyIdx> orig;  ///< original strategy of each current strategy
  std::vector<Cost> cost;
  std::vector<WPiece> pieces;     ///< memory that may still bind; none: memory-free
  std::vector<int32_t> adj;       ///< live incident edges (never two to the same neighbour)
  int32_t k() const { return static_cast<int32_t>(cost.size()); }
};

struct WEdge {
  bool alive = true;
  PNodeIdx a = 0, b = 0;
  std::vector<Cost> m;  ///< |S_a| x |S_b| row-major
};

/// What the rules leave: live nodes and edges, indexed as in the original problem.
struct Reduced {
  std::vector<WNode> nodes;
  std::vector<WEdge> edges;
  std::vector<int64_t> bounds;  ///< segment s is the time interval [bounds[s], bounds[s+1])
  std::vector<int64_t> base;    ///< constant usage per segment
  std::vector<char> binding;    ///< per segment: can the limit still bind there
  Cost constant_cost = 0;
  bool infeasible = false;
  int rounds = 0;
  std::vector<Elimination> eliminated;
};

/// Applies the rules to a fixpoint (or to opt.deadline).  With `single_interval`, merges keep
/// every node at one piece at most and degree-2 eliminations honour opt.chain_growth_slack.
Reduced run_reductions(const Problem& p, const ReduceOptions& opt, bool single_interval);

}  // namespace autoshard::reduce_detail

#pragma once
/// Sequential tree-reweighted message passing (TRW-S, Kolmogorov 2006) for the pairwise part of
/// a GroupModel (memory ignored), with optional extra unary costs (memory penalties).  Each
/// iteration is a forward and a backward pass over the groups in index order; the labeling is
/// the greedy one built during the forward pass (each group picks its best strategy given the
/// earlier groups' picks and the later groups' messages).  Messages persist across calls, so
/// changing the penalties and iterating again warm-starts from the previous messages.
#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "problem/problem.h"
#include "solver/edge_classes.h"
#include "solver/group_model.h"
#include "solver/reduce.h"

namespace autoshard {

class Trws {
 public:
  explicit Trws(const GroupModel& m);
  /// Runs `iters` iterations with unary costs m.unary + *pen (pen may be null).
  void iterate(int iters, const std::vector<std::vector<double>>* pen);
  /// Labeling from the last forward pass (all zeros before the first).
  const std::vector<int32_t>& labeling() const { return x_; }
  /// Lower bound on min over choices of (cost + *pen) without the model offset, memory ignored:
  /// the edge-split bound (lower_bound.h) of the energy reparametrised by the current messages.
  /// Valid for any messages.
  double lower_bound(const std::vector<std::vector<double>>* pen) const;
  /// Resets the messages to zero.
  void reset();
  /// Edge e's messages a->b (one per strategy of b) and b->a (one per strategy of a).
  std::vector<double>& to_b(size_t e) { return to_b_[e]; }
  std::vector<double>& to_a(size_t e) { return to_a_[e]; }

 private:
  const GroupModel& m_;
  std::vector<std::vector<double>> to_b_, to_a_;  ///< per edge: message a->b (|S_b|), b->a (|S_a|)
  /// Per edge, its strategies grouped by equal rows and equal columns (edge_classes.h) and the
  /// matrix of the classes: a message is the min-plus product over the classes, each class
  /// taking the least of its strategies' terms first.  Exact -- rounding is monotone, so
  /// min_s (w_s + c) = (min_s w_s) + c bit for bit -- and about 6x fewer products on
  /// llama3-405b's pipeline stages (a layer's strategies repeat few distinct input and
  /// output specs), where the messages were about half of planning.
  std::vector<EdgeClasses> classes_;
  /// Per edge, the class matrix transposed (column classes x row classes): the message b->a
  /// then reads rows, as a->b does, and vectorises.
  std::vector<std::vector<Cost>> classes_t_;
  /// Per edge, each row class's row of the matrix over every column (lower_bound's).
  std::vector<std::vector<Cost>> class_rows_;
  /// Scratch of iterate(): the least term per row class, the message per column class.
  std::vector<double> by_class_, out_class_;
  std::vector<double> gamma_;
  std::vector<int32_t> x_;
};

/// The messages a message passing ended with, by the nodes and strategies of the problem the
/// caller knows (before any reduction), so that the next one on a problem of the same shape
/// with other costs starts from them (the overlap objective's dual solves, overlap_solve.h).
/// Any messages are a valid start -- the bound holds for every reparametrisation -- so a
/// stale or partial memory costs iterations at worst, never correctness.
struct MessageMemory {
  struct EdgeMessages {
    std::vector<StrategyIdx> sa, sb;  ///< strategies of the edge's two nodes
    std::vector<double> to_b, to_a;   ///< per strategy of b, of a
  };
  std::map<std::pair<PNodeIdx, PNodeIdx>, EdgeMessages> edges;  ///< by (node a, node b)
  /// The message passing that left them did not meet its plan: its relaxation is not tight
  /// (a cold start does not close it either), so the next one continues from them.
  bool unproven = false;
};

/// TRW-S on a plain Problem, memory ignored, until its bound meets its labeling's cost.
struct MessagePassingResult {
  std::vector<StrategyIdx> choice;  ///< the cheapest labeling seen (empty if none is finite)
  Cost cost = kInfCost;             ///< evaluate_cost of choice
  Cost lower_bound = -kInfCost;     ///< the best bound seen (memory ignored)
  bool proven = false;              ///< cost - lower_bound within `tolerance` (relative)
  int iterations = 0;
  /// Stopped at `deadline` rather than at the proof, the iteration cap or the stall: how far
  /// it got depended on the machine's speed and load.
  bool clock_stopped = false;
};

/// The bound is the dual of the local-polytope LP, the MIP's relaxation (mip.h), so where that
/// relaxation is tight -- planner problems without binding memory usually are (their LP roots
/// are integral) -- the labeling reaches it and is proven optimal by weak duality, in
/// milliseconds where the LP takes a third of a second (docs/benchmarks.md, "Round 7").  Stops
/// at the proof, at `deadline`, at `max_iterations`, or when the bound has not risen for
/// `stall` iterations.
///
/// With `memory`, starts from its messages where an edge joins the same two nodes (unknown
/// strategies start at 0) and leaves its own there; `outer` maps p's nodes and strategies to
/// the memory's (p is then the reduction of the caller's problem), or null when p's are.
MessagePassingResult solve_by_message_passing(const Problem& p, std::chrono::steady_clock::time_point deadline,
                                              double tolerance, int max_iterations = 2000, int stall = 200,
                                              MessageMemory* memory = nullptr, const ReductionMap* outer = nullptr);

}  // namespace autoshard

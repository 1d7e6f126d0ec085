#pragma once
/// The overlap-aware step time: the objective the planner minimises by default.
///
/// The additive objective A(x) charges every redistribution as if the compute stream waited for
/// it.  A training step hides much of it: FSDP prefetches a layer's parameter gathers while the
/// previous layer computes, gradient reductions run while the backward goes on, and an
/// activation saved for the backward can be moved any time before its use.  The overlap model
/// cuts the schedule into the simulator's layer segments (layer_segments(); simulate.h) and
/// gives every segment s a *window* W_s(x) (the compute of its ops; a context-parallel
/// attention's exposed K/V wait, BuiltProblem::op_comm, is not compute) and the communication that
/// can run behind it, H_s(x):
///   - redistributions of parameters, buffers and inputs whose consumer is in segment s + 1
///     (issued one segment ahead, as simulate_step's prefetch of one layer);
///   - gradient agreements (DDP's all-reduce, FSDP's reduce-scatter) of gradients produced in
///     segment s - 1, and redistributions of op outputs whose consumer is two or more
///     segments after their producer's (segment s - 1): both are issued when produced and
///     waited for much later.
/// Everything else is on the critical path.  The step time is
///     T(x) = A(x) - sum_s min(H_s(x), W_s(x)),
/// i.e. each window hides its communication up to its compute, and the rest is exposed.  On a
/// chain of layers with one communication stream this is exactly what simulate_step replays
/// (overlap_test.cc); elsewhere it is an estimate that never hides more than the window's
/// compute: two mesh dims' streams running at once are counted as one, and compute stalled by
/// an activation's redistribution does not widen the window.
///
/// Since min(H, W) = min over mu in [0, 1] of mu H + (1 - mu) W, T(x) is the maximum over mu
/// of A(x) - sum_s [mu_s H_s(x) + (1 - mu_s) W_s(x)]: for a fixed mu that is an ordinary
/// strategy-selection problem (hidden edges scaled by 1 - mu, window nodes by mu), whose
/// optimum L(mu) is a lower bound on min T.  overlap_solve.cc maximises L over mu (segments of
/// one key share a mu) and keeps the best T of the plans it meets: bound and gap are proven.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// Module path up to its first numeric component ("layers.3.attention.wq" -> "layers.3"),
/// else its first component: what the simulator and the overlap model call a layer.
std::string layer_key(const std::string& module_path);

/// Per graph node, the index of its layer segment (runs of ops in schedule order sharing a
/// layer key; ops without a module path stay in the current run; the backward visits the
/// layers again as new segments); -1 for non-op nodes.  `num_segments` receives the count.
std::vector<int32_t> layer_segments(const Graph& g, int32_t* num_segments = nullptr);

/// Per graph node: 1 for an op that views placeholders only (the `t` of a weight its matmul
/// reads).  A redistribution from one moves the placeholder's data, so the simulator prefetches
/// it like the placeholder's own (FSDP gathers the weight, not its transpose).
std::vector<char> placeholder_views(const Graph& g);

/// One window and the communication that can hide behind it.
struct OverlapGroup {
  int32_t key = 0;                   ///< index into OverlapModel::keys (shared multiplier)
  std::vector<PNodeIdx> window;      ///< problem nodes of the segment's ops
  std::vector<int32_t> hidden;       ///< BuiltProblem edge indices
};

struct OverlapModel {
  std::vector<OverlapGroup> groups;  ///< only windows with some hideable communication
  /// Names of the keys ("forward layers.* (108 ops, 48 moves)"): segments of one phase and
  /// layer class with as many window ops and hideable moves (the repeats of one layer shape).
  std::vector<std::string> keys;
  bool empty() const { return groups.empty(); }
};

OverlapModel build_overlap_model(const Graph& g, const BuiltProblem& bp);

/// The sums of one assignment, per key: H (hideable communication), W (window compute), and
/// the part that is hidden, sum over the key's groups of min(H_s, W_s).
struct OverlapTerms {
  std::vector<double> hidden_us, window_us, overlapped_us;
  double overlapped_total_us = 0;
};
OverlapTerms overlap_terms(const OverlapModel& m, const BuiltProblem& bp,
                           const std::vector<StrategyIdx>& choice);

/// `bp` with the Lagrangian's costs for multipliers `mu` (one per key): the window nodes'
/// costs times mu, the hidden edges' matrices times 1 - mu.  `into` must be a copy of `bp`
/// (kept between calls so that only the scaled costs are written).
void scale_overlap_costs(const OverlapModel& m, const BuiltProblem& bp,
                         const std::vector<double>& mu, BuiltProblem& into);

}  // namespace autoshard

#pragma once
/// In-flight microbatches in a pipeline stage's memory model (pipeline/pipeline.h).
///
/// A pp rank running 1F1B or an interleaved schedule keeps the activations of f microbatches
/// (pipeline_schedule.h: inflight_microbatches): every microbatch it has run forward but not
/// yet backward.  What one microbatch keeps between its forward and its backward is what the
/// stage's one-microbatch problem holds live across the forward/backward boundary t* (the
/// first backward op): the problem nodes with start < t* < end that are not parameter state
/// (parameters, buffers: one copy per rank).  After recomputation those are the gap and keep
/// nodes of recompute.h whose mode keeps them, so the solver's recomputation decides them.
///
/// The stage's memory with f microbatches in flight is, at every time t of the microbatch,
///     true(t) = state + (f - 1) A + live(t),
/// A the kept bytes, live(t) the microbatch's own tensors (its kept ones among them).  The
/// solver sees one interval per node, so the problem is built with the kept nodes' usages
/// scaled by f instead:
///     scaled(t) = state + f kept(t) + other(t),   kept(t) <= A,
/// which equals true(t) at t* (every kept node is live there) and is below it elsewhere:
/// scaled(t) <= true(t) at every t.  Planning under a limit with the scaled usages is a
/// relaxation of the in-flight constraint (its bounds stay valid); its plan is then checked
/// against max_t true(t) (inflight_memory) and re-planned under a lower limit if over.
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "planner/plan.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// The first backward op's index: the forward/backward boundary t* of the microbatch's
/// schedule (a stage's received gradient is a placeholder, listed with the inputs).
int64_t forward_backward_boundary(const Graph& g);

/// Problem nodes whose usage counts at t* (start <= t* < end), state included (ascending).
std::vector<PNodeIdx> live_at_boundary(const Graph& g, const BuiltProblem& bp);
/// The usage at t* of `choice`: scaled(t*) above, which equals true(t*).  Every plan whose
/// in-flight peak fits a budget has boundary_usage <= budget (up to one byte per kept node,
/// the rounding of scale_inflight_usages): the one memory row the stage's Lagrangian bound
/// prices (PlannerOptions::boundary_memory_price, pipeline/stage_lagrange.cc).
int64_t boundary_usage(const Graph& g, const BuiltProblem& bp, const std::vector<StrategyIdx>& choice);
/// Adds us_per_byte x usage to the costs of live_at_boundary's nodes, and to their op_comm
/// (the overlap objective's windows are compute only).  build_problem calls it last for
/// PlannerOptions::boundary_memory_price > 0.
/// Also prices, per strategy, the deferred gradients (deferred_gradient_bytes) a node leaves
/// Partial: a later microbatch's t* holds them, and a rank's need counts them.
void price_boundary_usage(const Graph& g, const Mesh& mesh, double us_per_byte, BuiltProblem& bp);

/// Problem nodes one microbatch keeps across the forward/backward boundary (ascending).
std::vector<PNodeIdx> kept_across_boundary(const Graph& g, const BuiltProblem& bp);

/// Multiplies the usages of kept_across_boundary's nodes by `inflight` (>= 1), rounded up.
/// build_problem calls it for PlannerOptions::inflight_microbatches != 1.
void scale_inflight_usages(const Graph& g, double inflight, BuiltProblem& bp);

/// A plan's memory with `inflight` microbatches in flight (bp built with that factor).
struct InflightMemory {
  int64_t kept_bytes = 0;        ///< A: one microbatch's kept activations, per device
  int64_t microbatch_peak = 0;   ///< max_t (state + live(t)): one microbatch alone
  int64_t peak = 0;              ///< max_t true(t) = microbatch_peak + (f - 1) A
  /// One microbatch's usage at t* (state + live(t*)), at most microbatch_peak: what is above
  /// it at the peak is the microbatch's passing work, which a pp rank's stages do not hold at
  /// once (pipeline_layout.h rank_peaks).
  int64_t boundary_bytes = 0;
};
InflightMemory inflight_memory(const Graph& g, const BuiltProblem& bp, double inflight,
                               const std::vector<StrategyIdx>& choice);

/// Per device, the parameter gradients a pipelined step sums over its microbatches before
/// reducing them once (python/autoshard/deferred_grads.py): every backward tensor an optimizer
/// op reads that its producer leaves Partial (its reduction is deferred), at the producer's
/// local size.  They live from the first microbatch's backward to the step's end.
int64_t deferred_gradient_bytes(const Graph& g, const Plan& plan, const Mesh& mesh);
/// Parameters gathered once per step and kept over the microbatches
/// (PlannerOptions::params_gathered_once; FSDP2 with `reshard_after_forward=False` under a
/// pipeline, torchtitan's PP) hold, beside their shards, their gathered copy: the parameter
/// gathered over the FSDP dims, every mesh dim but tensor parallelism's (recipes.h
/// tensor_parallel_dim), so still split over tp.  Its bytes per device for a parameter laid out
/// as `have`; 0 when `have` is split over no FSDP dim (nothing to gather).
int64_t gathered_copy_bytes(const ShardingSpec& have, const Mesh& mesh);
/// The parameters a forward or backward op reads (the ones a step gathers), ascending.
std::vector<NodeIdx> gathered_parameters(const Graph& g);
/// Adds gathered_copy_bytes to the usages of gathered_parameters' problem nodes (state, live
/// all step).  build_problem calls it for PlannerOptions::params_gathered_once.
void add_gathered_usages(const Graph& g, const Mesh& mesh, BuiltProblem& bp);
/// Per device, the gathered copies `plan` keeps with its parameters gathered once per step.
int64_t gathered_parameter_bytes(const Graph& g, const Plan& plan, const Mesh& mesh);
/// The backward tensors optimizer ops read (each producer once): deferred where left Partial.
std::vector<TensorRef> deferred_gradient_tensors(const Graph& g);

}  // namespace autoshard

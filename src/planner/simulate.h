#pragma once
/// Step simulation: replays a plan as a schedule instead of adding its costs up.
///
/// The solver minimises an additive objective (every compute time plus every redistribution
/// time), which assumes nothing overlaps.  Real training steps overlap communication with
/// compute (FSDP prefetches the next layer's parameter all-gathers, DDP/FSDP reduce gradients
/// while the backward runs).  simulate_step() lays the chosen plan out on streams:
///
/// - one compute stream running the op nodes in graph (schedule) order, each for the compute
///   time the plan charges it;
/// - one communication stream per mesh dim.  Every problem edge (tensor use, or the
///   parameter <- gradient agreement) whose redistribution is not free becomes the collectives
///   of its `nccl` schedule (cost/redistribute.h plan_redistribute); each collective runs on
///   the stream of its mesh dim, one after the other (a redistribution over two mesh dims puts
///   its first step on the first dim's stream and the next step on the next dim's stream, once
///   the first has finished; the later step joins its stream's queue only then, as the
///   runtime issues DTensor's next collective after waiting the previous one, so it never
///   holds a place in line while it waits on another dim).  Under the `dtensor` comm model the
///   steps keep the `nccl`
///   schedule's dims and kinds and are scaled to DTensor's total.  Times are the real
///   redistribution times from the specs, not the (possibly discounted, see
///   PlannerOptions::overlap) edge costs of the problem;
/// - data dependencies: a redistribution is issued when its producer has finished; a stream
///   runs what was issued on it in the order it became ready (FIFO, as one NCCL communicator
///   does); an op starts when the compute stream is free, its direct inputs exist and every
///   redistribution whose wait point (prefetch_schedule.h wait_point, the schedule's
///   "wait_before") is this op has arrived -- a use's at its consumer;
/// - prefetch: a redistribution whose producer is a placeholder (parameter, buffer, input), or a
///   view op of placeholders only (the `t` of a weight that a linear layer's matmul reads), has
///   no producer to wait for; it is issued when the compute stream reaches the layer
///   `prefetch_layers` before its consumer's layer (FSDP's default of one layer ahead).  Layers
///   are runs of ops in schedule order sharing a layer key: the module path up to its first
///   numeric component ("layers.3.attention.wq" -> "layers.3"), else its first component; ops
///   without a module path stay in the current run.  The backward visits the layers again, so
///   its runs are new layers; a backward use is prefetched no earlier than the first backward
///   op that runs (first_backward_op: the runtime's backward is its own graph).  A prefetch of a
///   view of placeholders whose input is itself redistributed (a weight's `t` after the
///   weight's gather) waits for that redistribution;
/// - buckets: prefetched redistributions of one bucket (ScheduleOptions::bucketing) are issued
///   together, and every member after the first is credited its steps' fixed latency, so the
///   bucket pays each collective's latency once, as the merged collective the runtime issues;
///   the members' k-th steps are ready together (when the last one is) and run back to back,
///   as that one collective;
/// - gradient reductions need no special case: they are issued when the gradient is produced
///   and only the optimizer (or the end of the step) waits for them, so they overlap the rest
///   of the backward on their own stream.
///
/// Memory timeline (per device): the problem's live-interval usage of the chosen strategies
/// (what the memory constraint checks, time point = node index mapped to the node's start
/// time) plus, for every redistribution, its destination buffer from the start of its first
/// collective to the end of its consumer (for prefetched parameter all-gathers that is the
/// prefetched buffer), plus the K/V buffers a context-parallel attention holds while it runs
/// (cost/context_parallel.h cp_buffer_bytes), from its compute event's start to its end -- the
/// problem counts them at the op's time point (planner/cp_memory.h), so the peaks agree.
/// Events (stream, node, edge, times) are enough for the report and the Chrome trace to name
/// them.
///
/// Activation recomputation (PlannerOptions::recompute, planner/recompute.h) is replayed as
/// planned: the forward ops the plan re-executes run again on the compute stream, in graph
/// order, right before the region's point b (the backward's first read of a tensor the region
/// saved), each for the compute its gap node charges; the recomputation's redistributions
/// (edge origin slot kRecomputeSlot) go on the comm streams like any other, issued at b (or
/// once a recomputed producer is done), and the re-executed op waits for them.  The memory
/// timeline takes the recomputation's lifetimes from its gap, tail and keep nodes (time point
/// b maps to the start of the recomputation), so with no redistribution buffers its peak is
/// the plan's.  A redistribution from a re-executed op to a consumer at or after its point b
/// (a backward use) moves the recomputed tensor: it is issued when the recomputation produces
/// it, not after the forward (whose buffer would otherwise live through the whole step).
/// Each region's mode is read back from Plan::recomputed_nodes.
///
/// A context-parallel attention (planner/cp_cost.h) runs on the compute stream for its node
/// cost: its compute plus the exposed part of its K/V transfers, exactly what the objective
/// charges; the transfers themselves occupy its mesh dim's stream from the op's start.
///
/// Not modelled: kernel-level contention between a stream's collective and compute, and
/// collectives of different mesh dims sharing links.
#include <cstdint>
#include <string>
#include <vector>

#include "cost/collective.h"
#include "ir/graph.h"
#include "planner/overlap.h"
#include "planner/plan.h"
#include "planner/prefetch_schedule.h"

namespace autoshard {

class ShardingOptimizer;

/// The schedule the step runs: prefetch depth and buckets (planner/prefetch_schedule.h), the
/// same options placements.json's schedule is written with.
using SimulationOptions = ScheduleOptions;

/// Index of a stream: 0 is compute, 1 + d the communication stream of mesh dim d.
using StreamIdx = int32_t;

struct SimEvent {
  StreamIdx stream = 0;
  double start_us = 0;
  double end_us = 0;
  /// Compute events: the op node.  Communication events: the consumer node of the edge (for a
  /// gradient agreement edge, the parameter).
  NodeIdx node = kNoNode;
  /// Communication events: index into BuiltProblem::edges, the collective, its step within the
  /// redistribution, and its bytes (collective_time_us's convention); -1 / unused for compute.
  int32_t edge = -1;
  int32_t step = 0;
  Collective collective = Collective::kAllGather;
  double bytes = 0;
  bool prefetched = false;  ///< issued ahead of its consumer's layer (placeholder producer)
  /// Compute: the backward's re-execution of a forward op.  Communication: that re-execution's
  /// redistribution (edge origin slot kRecomputeSlot).
  bool recomputed = false;
  /// Communication: the K/V transfers inside a context-parallel attention (ring hops or its
  /// all-gather / reduce-scatter; no edge), whose exposed part the op's compute event holds.
  bool context_parallel = false;
};

struct MemoryPoint {
  double time_us = 0;
  int64_t bytes = 0;  ///< per device, from this time until the next point
};

struct StepSimulation {
  double step_us = 0;          ///< makespan: last compute or communication end
  double compute_us = 0;       ///< busy time of the compute stream
  double comm_us = 0;          ///< sum of all collective times (all streams)
  double exposed_comm_us = 0;  ///< step_us - compute_us: time compute waits for communication
  double additive_us = 0;      ///< the plan's additive cost (compute + every redistribution)
  int32_t num_layers = 0;      ///< layer runs found (the prefetch unit)
  std::vector<std::string> stream_names;      ///< "compute", "comm dp", ...
  std::vector<std::vector<SimEvent>> streams;  ///< per stream, in start order
  std::vector<MemoryPoint> memory;             ///< nondecreasing times
  int64_t peak_memory_bytes = 0;               ///< max of `memory`
  int64_t prefetch_peak_bytes = 0;             ///< largest total of live redistribution buffers
  double model_flops = 0;                      ///< model_flops(graph)
  double mfu = 0;                              ///< see mfu()
};

/// Simulates one training step of `plan` (which must have a solution and come from `opt`).
/// Throws std::runtime_error when the plan has no solution.
StepSimulation simulate_step(ShardingOptimizer& opt, const Plan& plan,
                             const SimulationOptions& o = {});

/// FLOPs of one step of the unsharded model: op_flops of every op node on global shapes.
double model_flops(const Graph& g);
/// The dtype carrying most of the model FLOPs (its peak is the MFU denominator).
DType dominant_flops_dtype(const Graph& g);
/// flops / (devices x peak FLOPS x step time); 0 when step_us <= 0.
double mfu(double flops, int64_t devices, double peak_flops_per_s, double step_us);

}  // namespace autoshard

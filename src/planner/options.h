#pragma once
/// Options of the planner: the knobs users know from Alpa / MASE / AutoParallel.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cost/collective.h"
#include "cost/memory.h"

namespace autoshard {

/// Activation recomputation policy (planner/recompute.h).  kNone: every activation the
/// backward reads is kept; kSelective: per layer region, everything but matmul and attention
/// outputs is recomputed in the backward; kSelectiveOp: the same but every other matmul of a
/// layer is recomputed too (torchtitan's and AutoParallel's op-level policy,
/// planner/recompute.h selective_saves); kFull: the region's whole forward is recomputed;
/// kAuto: the solver picks keep, kSelective or kFull per layer class and region.  kIfNeeded
/// (the default): plan as kNone when the memory-free optimum fits the budget (no
/// recomputation node is built and the plan is kNone's), else as kAuto
/// (ShardingOptimizer::get_solution).  An explicit kNone never recomputes.  (kSelectiveOp
/// comes last: state files store region modes by number.)
enum class RecomputePolicy : uint8_t { kNone, kSelective, kFull, kAuto, kIfNeeded, kSelectiveOp };

/// What the solver minimises.  kOverlap (default): the step time with the communication the
/// schedule hides behind compute discounted (planner/overlap.h), with a proven bound;
/// kAdditive: compute plus every redistribution (Alpa's objective).
enum class Objective : uint8_t { kOverlap, kAdditive };

struct PlannerOptions {
  CommModel comm_model = CommModel::kNccl;
  /// Per-device memory budget in bytes; -1 means the hardware's memory, 0 means no limit.
  int64_t memory_limit_bytes = -1;
  double time_limit_s = 60;
  /// Solves stop on their own work limits, time_limit_s being a safety net only
  /// (SolverOptions::work_limited; the overlap dual's solves by count): the plan then depends
  /// on the inputs alone unless Plan::clock_stopped.  The pipeline's stage solves set it.
  bool work_limited = false;
  /// Most solves of the overlap objective's dual (overlap_solve.h); 0: kMaxOverlapSolves.
  int overlap_solves = 0;
  double mip_gap = 0;
  /// Only a plan faster than this step time is wanted (the mesh search passes the best mesh's):
  /// the solver stops once it proves none exists, leaving lower_bound_us >= cutoff_us and, if
  /// any, the best assignment found so far (see SolverOptions::cutoff).  Not saved with a plan.
  double cutoff_us = std::numeric_limits<double>::infinity();
  int threads = 1;
  /// Drop the fully replicated strategy wherever a node has another one (MASE's option: forces
  /// every shardable tensor to be sharded and shrinks the search space).
  bool skip_fully_replicated = false;
  /// Tie identical repeated layers to one set of decisions (exact cost multiplier).
  bool cluster = true;
  /// Only allow shardings that split a dim evenly.
  bool require_divisible = false;
  /// Offer context-parallel attention strategies (StrategyOptions::context_parallel); off,
  /// the best plan without them (`--no-context-parallel`, the benchmarks' baseline).
  bool context_parallel = true;
  /// Offer non-default shard orders (strided shards, StrategyOptions::shard_orders) on the
  /// parameters' chains (parameter_chain_nodes): FSDP2-over-TP's _S(0,tp)S(0) weights, their
  /// casts, gradients and optimizer state (`--shard-orders`).  Off by default: it costs
  /// planning time (docs/benchmarks.md "Shard orders").
  bool shard_orders = false;
  /// Prefetch discount: redistributions of parameters (gathers FSDP prefetches behind the
  /// previous layer's compute) cost overlap_discount x their time in the objective.  The step
  /// simulation (planner/simulate.h) measures what it buys; docs/benchmarks.md "Step simulation".
  /// It is a variant of the additive objective: with it, `objective` is treated as kAdditive.
  bool overlap = false;
  double overlap_discount = 0.5;
  Objective objective = Objective::kOverlap;
  /// The objective in force (the prefetch discount implies the additive objective).
  Objective effective_objective() const { return overlap ? Objective::kAdditive : objective; }
  /// Activation recomputation (see RecomputePolicy).
  RecomputePolicy recompute = RecomputePolicy::kIfNeeded;
  /// Weight of the once-per-step work in the objective: the optimizer ops' compute and the
  /// redistributions into them (DDP's all-reduce, FSDP's reduce-scatter of gradients), and the
  /// parameter <- gradient agreements.  A pipeline stage's graph is one microbatch of M, whose
  /// step runs the forward and backward M times but the update once: planning it with 1 / M
  /// minimises its time per microbatch (pipeline/pipeline.h).  1: a plain step.
  double optimizer_cost_scale = 1.0;
  /// With optimizer_cost_scale: the redistributions out of the parameters (FSDP's all-gathers)
  /// are once-per-step work too, as where a pipeline runtime gathers a stage's parameters at
  /// its first microbatch and keeps them for the others: FSDP2 under torchtitan's pipeline
  /// (torchtitan/parallelisms/parallelize_llama.py apply_fsdp at 9dec370: `reshard_after_forward
  /// = False` with PP, "to avoid per-microbatch all-gathers"; torch's pipelining stage reshards
  /// and reduces only after the last backward).  Only gathers over the FSDP dims (not tp) are
  /// once; the gathered copies count in memory all step (inflight_memory.h gathered_copy_bytes).
  bool params_gathered_once = false;
  /// Extra cost of a node's output per strategy: latency_us + us_per_byte x the output's local
  /// bytes.  A pipeline stage sends its boundary tensors to the neighbouring stage each
  /// microbatch (pipeline/pipeline.h): the send's time depends on how the stage shards them.
  struct OutputCost {
    std::string node;
    int32_t output = 0;
    double latency_us = 0;
    double us_per_byte = 0;
  };
  std::vector<OutputCost> output_costs;
  /// Microbatches whose activations a pipeline rank keeps in flight (planner/inflight_memory.h):
  /// what one microbatch keeps across its forward/backward boundary counts this many times in
  /// the memory model, so recomputation is traded against the in-flight memory.  1: a plain step.
  double inflight_microbatches = 1.0;
  /// Microseconds per byte of usage at the forward/backward boundary added to the objective
  /// (planner/inflight_memory.h price_boundary_usage): the Lagrangian multiplier of that one
  /// memory row, for the pipeline's memory-aware stage bounds (pipeline/stage_lagrange.cc).
  /// Recomputation is then decided without a memory limit (it buys priced bytes).  0: none.
  double boundary_memory_price = 0;
  /// Memory of parameter state when the graph has no optimizer step of its own.
  OptimizerConfig optimizer;
  /// Verify the solution independently after solving (recompute cost and memory from scratch).
  bool run_checks = true;
  /// MASE's solution file (planner/solution_file.h): with a path, every solve writes its plan
  /// there, keyed by the problem's fingerprint; with preload_solution as well, a file whose
  /// fingerprint matches is reused without solving (a mismatch is ignored with a warning
  /// naming what differs: graph, mesh, hardware, options or constraints).
  bool preload_solution = false;
  std::string ilp_solution_file;
  /// Receives one-line progress messages from the phases (the CLI prints them on a terminal).
  std::function<void(std::string_view)> progress;
};

}  // namespace autoshard

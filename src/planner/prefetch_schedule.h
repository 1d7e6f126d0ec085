#pragma once
/// Where a rank issues each parameter redistribution: the prefetch part of the step's schedule,
/// written beside the placements (placements.json "schedule") so that the runtime issues the
/// collectives where the simulator and the overlap-aware objective assumed them.
///
/// A redistribution whose producer is a placeholder (parameter, buffer, input) or a view of
/// placeholders only (the `t` of a weight a matmul reads) waits for nothing computed in the
/// step, so it can run ahead of its consumer: FSDP issues a layer's parameter all-gathers while
/// the previous layer computes.  The rule (simulate.h "prefetch"): such a redistribution is
/// issued when the compute stream reaches the layer segment `prefetch_layers` before its
/// consumer's (layer_segments(), overlap.h), at that segment's first op; 0 issues it at its
/// consumer's segment.  Every other redistribution of a tensor use is issued when its producer
/// finishes (an IssueEntry names the producer; the runtime moves the collectives right after
/// it), so the exchange of an activation overlaps the ops between its producer and its
/// consumer.  The consumer waits for it where it reads it.
///
/// Buckets.  FSDP2 gathers a layer's parameters with one all-gather on one flat buffer, so a
/// layer pays one collective latency, not one per parameter.  Under Bucketing::kLayer the
/// prefetched redistributions issued at the same point with the same source and destination
/// placements and dtype (the same collectives on the same mesh dims) share a bucket: the
/// runtime runs each of their collective steps once on the concatenated shards, and the
/// simulator charges that step's latency once (bucket_latency_credit_us).  Gradient
/// reductions are bucketed the same way by the layer segment of the op producing the gradient
/// (FSDP2 reduce-scatters a layer's gradients together): a bucket is issued when its last
/// gradient exists.
///
/// Wait points.  Every entry also says before which op a rank waits for its collectives
/// (wait_point()): a tensor use's redistribution is waited right before its consumer, the
/// first op that reads the value, and a gradient reduction at the step's end (the optimizer
/// reads it).  The simulator blocks its compute stream there, the runtime places the use's
/// `wait_tensor` there, so the time between issue and wait -- what overlaps -- is one schedule
/// both read.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost/collective.h"
#include "ir/graph.h"
#include "placement/placement.h"
#include "planner/plan.h"

namespace autoshard {

/// How prefetched redistributions are grouped into collectives.
enum class Bucketing : uint8_t {
  kNone,   ///< one collective per redistribution step
  kLayer,  ///< one per issue point, placements and dtype (FSDP2's per-layer all-gather)
};

/// "none", "layer".
std::string_view bucketing_name(Bucketing b);
/// Parses "none" / "layer".
std::optional<Bucketing> parse_bucketing(std::string_view s);

/// The schedule's knobs, shared by the simulator and placements.json's schedule.
struct ScheduleOptions {
  int32_t prefetch_layers = 1;  ///< FSDP's default of one layer ahead
  Bucketing bucketing = Bucketing::kLayer;
  /// placements.json carries each multi-collective redistribution's planned path ("via"), so
  /// the runtime issues the collectives the plan priced; off for plans priced with the
  /// `dtensor` comm model, which charges DTensor's own order.
  bool planned_paths = true;
};

/// The bucket key of a prefetched redistribution issued before op `issue_before` (kNoNode:
/// before the first op; for a gradient reduction, the segment of the op producing it): equal
/// keys share a bucket under kLayer.
std::string bucket_key(NodeIdx issue_before, const ShardingSpec& from, const ShardingSpec& to);

/// What merging a bucket saves on one of its collective steps: every member after the first
/// no longer pays the step's fixed latency (the time of the collective on 0 bytes; the
/// models are affine in the bytes).  Never more than `member_us`.  All-gathers,
/// reduce-scatters and all-reduces merge (one flat buffer); an all-to-all does not (its
/// members' chunks would interleave per peer), so it saves nothing.
double bucket_latency_credit_us(Collective c, MeshDimIdx dim, const Mesh& mesh, CommModel model,
                                double member_us);

/// The segment at whose start a prefetchable redistribution into a consumer of segment
/// `consumer_segment` is issued (the simulator's rule; -1 for a consumer outside every
/// segment: before the first op).
int32_t prefetch_segment(int32_t consumer_segment, int32_t prefetch_layers);

/// The order a rank runs the step's nodes: the graph's (a topological order the tracer
/// recorded, forward then backward).  The simulator's compute stream takes the ops in this
/// order and placements.json's schedule lists it ("order"), so the runtime runs the ops in the
/// order the plan was priced in rather than one it derives; recomputed ops re-run before
/// their first backward use (the plan's "recompute"), collectives at their schedule entries.
std::vector<NodeIdx> run_order(const Graph& g);

/// The first backward op in schedule order that runs (not the loss's seed, which the runtime
/// replaces by the caller's gradient; kNoNode: none).  A backward consumer's prefetch is
/// issued no earlier than it: the runtime's backward is its own graph, run after the forward
/// returns, so nothing the backward reads is gathered during the forward (FSDP2 likewise
/// starts the backward's prefetches in the backward); a segment can straddle the boundary
/// (the loss and its gradient share one).
NodeIdx first_backward_op(const Graph& g);

/// Where prefetches are issued, the one rule of the simulator and of placements.json's
/// schedule (what the runtime runs): a prefetch into a consumer of layer segment c is issued
/// before the first op of segment prefetch_segment(c, prefetch_layers), and a backward
/// consumer's no earlier than first_backward_op.
class PrefetchPoints {
 public:
  explicit PrefetchPoints(const Graph& g);
  /// The op before which a prefetch into `consumer` is issued; kNoNode: before the first op.
  NodeIdx issue_at(const Graph& g, NodeIdx consumer, int32_t prefetch_layers) const;
  /// Each node's layer segment (layer_segments(), overlap.h; -1 outside every segment).
  const std::vector<int32_t>& segment() const { return segment_; }
  int32_t num_segments() const { return num_segments_; }

 private:
  int32_t num_segments_ = 0;
  std::vector<int32_t> segment_;
  std::vector<NodeIdx> first_op_;  ///< per segment
  NodeIdx first_backward_ = kNoNode;
};

/// Where a rank waits for the redistribution of tensor use (consumer, slot): before the op
/// returned (kNoNode: at the step's end).  A use (slot >= 0) is waited before its consumer;
/// a gradient reduction (slot -1, consumer = the parameter) at the step's end.  The schedule's
/// entries carry it and the simulator's compute stream waits there ("Wait points" above).
NodeIdx wait_point(const Graph& g, NodeIdx consumer, int32_t slot);

/// One prefetched redistribution: the tensor use (consumer, slot) and the op before which a
/// rank issues its collectives (kNoNode: before the step's first op).
struct PrefetchEntry {
  NodeIdx consumer = kNoNode;
  int32_t slot = 0;
  NodeIdx issue_before = kNoNode;
  int32_t bucket = 0;  ///< entries with one bucket run their collectives merged
  NodeIdx wait_before = kNoNode;  ///< wait_point(): the op before which a rank waits for it
};

/// One redistribution of a computed tensor: the tensor use (consumer, slot) and the op after
/// which a rank issues its collectives (the producer; on a recomputed producer, its re-execution
/// where the consumer is in the backward).
struct IssueEntry {
  NodeIdx consumer = kNoNode;
  int32_t slot = 0;
  NodeIdx issue_after = kNoNode;
  NodeIdx wait_before = kNoNode;  ///< wait_point(): the op before which a rank waits for it
};

/// One gradient reduction: a grad pair (Graph::grad_pairs) whose gradient's spec differs
/// from its parameter's.
struct ReductionEntry {
  NodeIdx param = kNoNode;
  NodeIdx producer = kNoNode;  ///< the op computing the gradient
  int32_t bucket = 0;          ///< numbered apart from the prefetch buckets
  NodeIdx wait_before = kNoNode;  ///< wait_point(): kNoNode, the step's end
};

/// A redistribution planned in two or more steps (cost/redistribute.h redistribute_path: local
/// slices and collectives), with the placements the tensor holds between them.
struct PathEntry {
  NodeIdx consumer = kNoNode;  ///< the op reading the tensor; for a gradient, the parameter
  int32_t slot = 0;            ///< its input slot; -1: the gradient reduced into the parameter
  std::vector<std::vector<Placement>> via;  ///< after each step but the last
};

/// Every tensor use and gradient reduction of `plan` planned in two or more steps, in
/// node order (uses) then grad-pair order (gradients).
std::vector<PathEntry> planned_paths(const Graph& g, const Plan& plan, const Mesh& mesh);

struct PrefetchSchedule {
  ScheduleOptions options;
  std::vector<PrefetchEntry> entries;  ///< in consumer order, slots ascending
  int32_t num_buckets = 0;             ///< buckets are numbered in order of first entry
  std::vector<IssueEntry> issues;      ///< in consumer order, slots ascending
  std::vector<ReductionEntry> reductions;  ///< in grad-pair order
  int32_t num_reduction_buckets = 0;
};

/// The gradient reductions of `plan` with their buckets (the rule above).
std::vector<ReductionEntry> reduction_buckets(const Graph& g, const Plan& plan, Bucketing b,
                                              int32_t* num_buckets = nullptr);

/// The schedule of `plan` (which must have a solution): its prefetched redistributions (every
/// tensor use read from a placeholder or a view of placeholders whose spec differs from its
/// producer's), the issue points of the other redistributions and the gradient reductions.
PrefetchSchedule prefetch_schedule(const Graph& g, const Plan& plan, const ScheduleOptions& o);

}  // namespace autoshard

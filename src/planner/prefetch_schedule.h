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
/// consumer's segment.  Every other redistribution is issued when its producer finishes and
/// needs no entry.  The consumer waits for it where it reads it.
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "planner/plan.h"

namespace autoshard {

/// The segment at whose start a prefetchable redistribution into a consumer of segment
/// `consumer_segment` is issued (the simulator's rule; -1 for a consumer outside every
/// segment: before the first op).
int32_t prefetch_segment(int32_t consumer_segment, int32_t prefetch_layers);

/// One prefetched redistribution: the tensor use (consumer, slot) and the op before which a
/// rank issues its collectives (kNoNode: before the step's first op).
struct PrefetchEntry {
  NodeIdx consumer = kNoNode;
  int32_t slot = 0;
  NodeIdx issue_before = kNoNode;
};

struct PrefetchSchedule {
  int32_t prefetch_layers = 1;
  std::vector<PrefetchEntry> entries;  ///< in consumer order, slots ascending
};

/// The prefetched redistributions of `plan` (which must have a solution): every tensor use
/// read from a placeholder or a view of placeholders whose spec differs from its producer's.
PrefetchSchedule prefetch_schedule(const Graph& g, const Plan& plan, int32_t prefetch_layers);

}  // namespace autoshard

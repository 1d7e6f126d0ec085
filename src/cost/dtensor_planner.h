#pragma once
/// DTensor 2.13's redistribution planner (torch/distributed/tensor/_redistribute.py), which the
/// `dtensor` comm model prices step by step: the transform list, one mesh dim per step.
///
/// Specs whose shard orders are both DTensor's default (no strided shard) get the greedy walk
/// (generate_greedy_transform_infos, see cost/redistribute.h).  Any other pair gets the
/// graph-based plan (generate_graph_based_transform_infos), as torch always does for a
/// non-default order: Dijkstra over states (placements plus shard order) whose edges are
/// DTensorRedistributePlanner.get_next_state's moves, each priced by one_step_redistribute_cost:
///   1. the innermost shard of tensor dim a moves to the innermost end of dim b (all-to-all),
///   2. the innermost shard of a dim is gathered (S -> R),
///   3. P -> R (all-reduce),  4. R -> S(d) as the innermost cut of d (free),
///   5. P -> S(d) as the innermost cut of d (reduce-scatter),
///   6. R -> P(op) for the reduce ops of the two specs, never mixing ops other than sum + avg.
/// Ties are broken as torch's heap does (cost, then push order), so the path is torch's own;
/// the edge costs use torch's arithmetic exactly (dtensor_collective_gib_us).  torch's cached
/// planner also remembers the reduce ops of earlier calls on the same mesh and tensor meta;
/// this one is a fresh planner per call.
#include <array>
#include <cstdint>

#include "mesh/mesh.h"
#include "placement/placement.h"

namespace autoshard {

/// One step of DTensor's transform list: mesh dim `dim` goes from `from` to `to` (plain
/// placements: shard order lives in the planner's states, as in torch's normalized specs).
struct DtensorStep {
  MeshDimIdx dim = 0;
  Placement from;
  Placement to;
};

struct DtensorSteps {
  static constexpr int32_t kMax = 48;
  std::array<DtensorStep, kMax> steps{};
  int32_t num = 0;
  bool found = true;  ///< false: the graph has no path (torch raises; callers say impossible)
};

/// DTensor's transform list from `from` to `to` (same mesh, tensor and decodable orders; the
/// caller checks).  Empty when the placements are equal.
DtensorSteps dtensor_transform_steps(const ShardingSpec& from, const ShardingSpec& to,
                                     const Mesh& mesh);

}  // namespace autoshard

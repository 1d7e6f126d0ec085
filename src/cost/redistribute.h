#pragma once
/// Cost of redistributing a tensor from one ShardingSpec to another on the same mesh.
///
/// Impossible transitions cost +infinity: a global shape or dtype mismatch, Shard -> Partial on
/// some mesh dim, Partial(x) -> Partial(y) with different reduce ops.  Specs with the wrong
/// number of placements, or a shard dim outside the tensor, are caller bugs:
/// std::invalid_argument.
///
/// Profile `dtensor`: exactly PyTorch DTensor's redistribute_cost as of torch 2.13
/// (torch/distributed/tensor/_collective_utils.py, see ../shared/reference/cost-model.md §1;
/// checked case by case against torch in tests/python/test_dtensor_crosscheck.py): 0 when `from`
/// is fully replicated or equal to `to`; otherwise start from b = global bytes / num_shards and
/// cost each step of DTensor's greedy transform list (_redistribute.py
/// generate_greedy_transform_infos: if `from` has a shard, mesh dims LAST TO FIRST, a dim whose
/// Shard(d) target sits under a different nesting of d going to Replicate instead; then FIRST TO
/// LAST for what is left; a 1-D mesh is one step): S->R b *= n then all_gather(b); S(i)->S(j)
/// all_gather(b) + 1 us (DTensor's penalty in place of an all-to-all); P->R all_reduce(b);
/// P->S reduce_scatter(b) then b /= n; R->S b /= n (free); R->P free; S->P and P(x)->P(y) inf.
/// It ignores uneven shards, as DTensor does.  Specs with a strided shard (a non-default shard
/// order, placement/placement.h) get torch's graph-based plan instead of the greedy walk
/// (cost/dtensor_planner.h), priced by the same per-step rules; torch 2.13's redistribute_cost
/// itself returns +inf for specs written with _StridedShard (its "temporary fix" while their
/// shard_order is None) and prices the same layout written as Shard placements plus an explicit
/// shard_order, which is what DTensor executes either way; this profile gives the latter.  DTensor's model has changed between releases
/// (e.g. pytorch PRs #169304, #173420, #178175); a plain first-to-last walk of the mesh dims
/// (this profile before the cross-check) prices e.g. S(0)P -> RR differently.  Pinned to 2.13.
///
/// Profile `nccl`: a schedule that is sound for N-D meshes, costed with the ring model.
/// Semantics: a tensor dim sharded on several mesh dims is split in its shard order (mesh-dim
/// order by default, the lower mesh dim the outer split; strided shards encode another order,
/// placement/placement.h).  Per mesh dim the moves are: S->R all-gather, P->R all-reduce,
/// P->S reduce-scatter, R->S local slice (free), R->P local (free), S(i)->S(j) all-to-all.
/// Nesting: a mesh dim may only leave or join the sharding of tensor dim d as its innermost
/// split, so for each tensor dim the longest common prefix (in shard order) of the current
/// and target mesh dims sharding it is kept, and every other current sharding of d is undone
/// innermost first before the target's remaining ones are added outermost first.  E.g. on a
/// (dp, tp) mesh S(0)S(0) -> RS(0) gathers tp, then dp, then slices on tp, while
/// _S(0,tp)S(0) -> RS(0) (tp the outer cut: FSDP2 over TP) is one all-gather on dp.
/// Order of the steps (greedy, shrink before grow):
///   1. apply every ready R->S local slice (free, shrinks the data), scanning mesh dims FIRST
///      TO LAST, until none is ready;
///   2. then ONE ready P->S reduce-scatter or S(i)->S(j) all-to-all (the latter when mesh dim m
///      may also leave i), the FIRST ready mesh dim; back to 1;
///   3. when no add is ready, all-gather ONE ready "remove", choosing the LAST ready mesh dim
///      (DTensor's last-to-first order for shard -> replicate), then go back to 1;
///   4. P->R all-reduces commute with all of the above, so each is charged at the smallest
///      per-device size reached along the schedule (initial, intermediate or final);
///   5. R->P is free.
/// Byte counts are the largest local shard (ceil split, like torch.chunk), which is what a
/// padded collective moves.
#include <array>
#include <cstdint>
#include <vector>

#include "cost/collective.h"
#include "mesh/mesh.h"
#include "placement/placement.h"

namespace autoshard {

/// Largest mesh rank the redistribution code accepts (fixed-size arrays, no heap).
inline constexpr int32_t kMaxMeshDims = 8;

/// One collective of a redistribution.  `bytes` follows collective_time_us's convention.
struct CommStep {
  Collective kind = Collective::kAllGather;
  MeshDimIdx dim = 0;
  double bytes = 0;
};

/// The `nccl`-profile schedule of collectives (free local steps are not listed).
struct RedistributePlan {
  static constexpr int32_t kMaxSteps = 3 * kMaxMeshDims;
  std::array<CommStep, kMaxSteps> steps{};
  int32_t num_steps = 0;
  bool impossible = false;
};

/// Builds the sound N-D schedule described above.  No heap allocation.  Specs whose split
/// factors decode to no shard order are std::invalid_argument.
RedistributePlan plan_redistribute(const ShardingSpec& from, const ShardingSpec& to,
                                   const Mesh& mesh);

/// The placements the tensor holds after each step of plan_redistribute(from, to, mesh), free
/// local slices included, the last one `to`'s: the path a runtime follows (one DTensor
/// redistribution per step, each one collective or none) to issue exactly the planned
/// collectives, where DTensor's own order would move more bytes (it gathers a tp-sharded
/// activation before reduce-scattering it over dp, for one).  Empty when impossible.
std::vector<std::vector<Placement>> redistribute_path(const ShardingSpec& from,
                                                      const ShardingSpec& to, const Mesh& mesh);

/// The collectives DTensor 2.13 issues for the redistribution (its greedy transform list, the
/// `dtensor` profile's walk): S->R all_gather, S(i)->S(j) all_to_all, P->R all_reduce, P->S
/// reduce_scatter, bytes per DTensor's tracking (b = local bytes, times n after a gather,
/// divided by n after a scatter or slice), in collective_time_us's convention.  What an
/// applied plan is audited against (python/autoshard/audit.py).  No heap allocation unless a
/// spec has a strided shard (then torch's graph search, cost/dtensor_planner.h).
RedistributePlan plan_redistribute_dtensor(const ShardingSpec& from, const ShardingSpec& to,
                                          const Mesh& mesh);

/// Time in microseconds to go from `from` to `to`; +infinity when impossible.
double redistribute_cost_us(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh,
                            CommModel model = CommModel::kNccl);

/// Bytes each device sends (ring bus bytes, see collective_bus_bytes) in the `nccl` schedule;
/// +infinity when impossible.
double redistribute_bytes(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh);

}  // namespace autoshard

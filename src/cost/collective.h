#pragma once
/// Time models of the collectives DTensor redistribution uses, over ONE mesh dim.
///
/// Two profiles (CommModel):
/// - `nccl` (default): the ring model of nccl-tests doc/PERFORMANCE.md with the mesh dim's own
///   measured bus bandwidth B (MeshDim::busbw_gbps, GB/s = 1e9 B/s) and per-hop latency
///   alpha (MeshDim::latency_us), plus the hardware's ring base latency
///   (Hardware::base_latency_us, NCCL tuning.cc LL ring: 6.6 us):
///     all_gather / reduce_scatter = base + (n-1)alpha + ((n-1)/n) S/B
///     all_reduce                  = base + 2(n-1)alpha + 2((n-1)/n) S/B
///     all_to_all                  = (n-1)alpha + ((n-1)/n) S/B
///   NCCL runs all-to-all as grouped point-to-point send/recv, not as a ring algorithm, so the
///   ring base latency of tuning.cc is not charged; one alpha per peer is.  n = 1 costs 0.
/// - `dtensor`: PyTorch DTensor's cost model (torch/distributed/tensor/_collective_utils.py,
///   MeshTopoInfo / allgather_cost / allreduce_cost / reduce_scatter_cost), reproduced exactly:
///   87.7 GB/s and 0.6 us per hop per mesh dim; an inter-node dim (MeshDim::inter_node, same
///   rule as MeshTopoInfo) gets 0.22x the bandwidth (19.294 GB/s) and 2.7 us per hop; base
///   6.6 us; the data term is (b (n-1)/n) / bw * 1e6 with b = bytes / 1024^3 (DTensor divides a
///   GiB figure by a GB/s figure; kept as is).  These constants ignore the Hardware.  DTensor
///   charges the base latency even when n = 1; so do we.  DTensor has no all-to-all cost (its
///   redistribute_cost charges Shard(i)->Shard(j) as allgather_cost + 1 us penalty), so
///   all_to_all here uses the all-gather formula; redistribute adds the penalty.
/// Figures and sources: ../shared/reference/cost-model.md §1-2.
///
/// Mixture of Experts (docs/moe.md): expert parallelism moves tokens to their experts and back
/// by the all-to-all of a capacity-padded dispatch tensor [E, B, C, D] between Shard(1) (the
/// batch rows) and Shard(0) (the experts), each device sending (n-1)/n of its local shard.  The
/// bytes are the tensor's static size, so every expert is charged its full capacity
/// C = capacity_factor * seq * top_k / E per batch row: the cost of UNIFORM routing (each
/// expert receives tokens * top_k / E, padded by the capacity factor) with every peer sent an
/// equal share.  Skewed routing (a hot expert's device receives more and its link finishes
/// last), dropped tokens and a dropless, jagged all-to-all of the exact counts are not modelled.
#include <cstdint>
#include <optional>
#include <string_view>

#include "mesh/mesh.h"

namespace autoshard {

enum class CommModel : uint8_t { kNccl, kDtensor };

/// "nccl", "dtensor".
std::string_view comm_model_name(CommModel m);
/// Parses "nccl" / "dtensor" (case-insensitive).
std::optional<CommModel> parse_comm_model(std::string_view s);

enum class Collective : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

/// "all_gather", "reduce_scatter", "all_reduce", "all_to_all".
std::string_view collective_name(Collective c);

/// Time in microseconds of collective `c` over mesh dim `dim`.  `bytes` is, per device:
/// the gathered (output) size for all_gather, the input size for reduce_scatter, the buffer
/// size for all_reduce and the (input = output) buffer size for all_to_all.
double collective_time_us(Collective c, double bytes, const Mesh& mesh, MeshDimIdx dim,
                          CommModel model = CommModel::kNccl);

inline double all_gather_us(double bytes, const Mesh& mesh, MeshDimIdx dim,
                            CommModel model = CommModel::kNccl) {
  return collective_time_us(Collective::kAllGather, bytes, mesh, dim, model);
}
inline double reduce_scatter_us(double bytes, const Mesh& mesh, MeshDimIdx dim,
                                CommModel model = CommModel::kNccl) {
  return collective_time_us(Collective::kReduceScatter, bytes, mesh, dim, model);
}
inline double all_reduce_us(double bytes, const Mesh& mesh, MeshDimIdx dim,
                            CommModel model = CommModel::kNccl) {
  return collective_time_us(Collective::kAllReduce, bytes, mesh, dim, model);
}
inline double all_to_all_us(double bytes, const Mesh& mesh, MeshDimIdx dim,
                            CommModel model = CommModel::kNccl) {
  return collective_time_us(Collective::kAllToAll, bytes, mesh, dim, model);
}

/// Bytes each device sends in a ring implementation (nccl-tests "bus bytes"):
/// (n-1)/n S for all_gather / reduce_scatter / all_to_all, 2(n-1)/n S for all_reduce.
double collective_bus_bytes(Collective c, double bytes, int64_t n);

/// DTensor's cost of `c` over mesh dim `dim` for `gib` GiB per device, evaluated in the same
/// order of binary64 operations as torch 2.13's allgather_cost / reduce_scatter_cost /
/// allreduce_cost (all_to_all: allgather_cost, as DTensor prices a shard-to-shard step), so
/// that equal inputs give bit-equal costs (DTensor's planner breaks cost ties by insertion
/// order, which only an exact replica of its arithmetic reproduces).
double dtensor_collective_gib_us(Collective c, double gib, const Mesh& mesh, MeshDimIdx dim);

/// DTensor MeshTopoInfo constants (_collective_utils.py).
inline constexpr double kDtensorBandwidthGBps = 87.7;
inline constexpr double kDtensorInterNodeFactor = 0.22;
inline constexpr double kDtensorHopLatencyUs = 0.6;
inline constexpr double kDtensorInterHopLatencyUs = 2.7;
inline constexpr double kDtensorBaseLatencyUs = 6.6;

}  // namespace autoshard

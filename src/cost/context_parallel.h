#pragma once
/// Time model of context-parallel (CP) attention: the sequence dim of q, k, v and the output
/// is split over one mesh dim of P ranks, and the keys/values every query needs travel between
/// the ranks INSIDE the attention op (no DTensor redistribution expresses it).  Two kinds, as
/// torch.distributed.tensor.experimental.context_parallel offers them (its rotate methods
/// "alltoall" = ring and "allgather"):
///
/// - ring (Ring Attention, Liu et al. 2023, arXiv:2310.01889): each rank computes its queries
///   against one K/V chunk per step while the next chunk arrives from its ring neighbour; P
///   compute steps and P-1 transfers, transfer i overlapped with compute step i-1:
///     T = sum_{i=0}^{P-2} max(c_i, t) + c_{P-1}
///   t = one point-to-point hop of the chunk (latency + bytes / bus bandwidth of the dim).  The
///   backward passes K/V and the partial dK/dV together (t covers both), and the finished
///   dK/dV take one more, unhidden, hop home.  Only max(0, t - c_i) per step is exposed.
/// - allgather (Llama 3, Dubey et al. 2024, section 3.3.2): K/V all-gathered over the dim,
///   the backward all-gathers them again and reduce-scatters dK/dV.  torch's implementation
///   (and torchtitan's help text for context_parallel_rotate_method: "all-gather all kv shards
///   on ranks after the first sub-SDPA computation") issues the gather while the rank attends
///   to its own chunk, so the gather hides behind that chunk's compute C/P:
///     T = max(all_gather(K, V), C/P) + C - C/P [+ reduce_scatter(dK, dV)].
///
/// Compute: C is one rank's attention of its queries against the whole sequence (the op's
/// FLOPs / P).  Causal attention with load balancing (the sequence cut into 2P chunks, rank r
/// holding chunks r and 2P-1-r: torch's head-tail layout, also Llama 3's) gives every rank the
/// same work and every ring step c_i = C/P.  Without it rank r's queries see r+1 of the P
/// chunks; the last rank does the most and sets the step time: its diagonal step costs C/P and
/// each of its P-1 other steps 2C/P (in units where balanced per-rank work is C), so it computes
/// C (2P-1)/P in total.  Non-causal attention is balanced either way.
#include <cstdint>
#include <optional>
#include <string_view>

#include "cost/collective.h"
#include "mesh/mesh.h"

namespace autoshard {

/// How a context-parallel attention moves keys and values.
enum class CpKind : uint8_t { kRing, kAllGather };

/// "ring", "allgather" (the placements.json "context_parallel" kind strings).
std::string_view cp_kind_name(CpKind k);
/// Parses "ring" / "allgather".
std::optional<CpKind> parse_cp_kind(std::string_view s);

struct CpAttentionInput {
  CpKind kind = CpKind::kRing;
  bool backward = false;
  bool causal = true;
  bool load_balance = true;
  /// Balanced per-rank compute C: this rank's queries against the full sequence (us).
  double compute_us = 0;
  /// Bytes of this rank's K and V shards (what one ring step moves forward).
  double kv_bytes = 0;
  /// Backward only: bytes of this rank's dK and dV shards.
  double dkv_bytes = 0;
};

struct CpAttentionTime {
  double compute_us = 0;   ///< the slowest rank's compute (C, or C (2P-1)/P unbalanced)
  double transfer_us = 0;  ///< all communication of the op on the dim (overlapped or not)
  double exposed_us = 0;   ///< communication not hidden behind compute
  double total_us() const { return compute_us + exposed_us; }
};

/// Bytes one rank holds inside a CP attention op over P ranks beyond its own q/k/v shards and
/// outputs: the K/V (and dK/dV) it receives, live only while the op runs.
///
/// - ring, forward: the chunk it attends to now (received, from step 1 on) and the next one in
///   flight (until step P-2): double buffering, min(2, P-1) x kv -- at P = 2 the one chunk it
///   receives is the last.  torch's _AllToAllRotater holds exactly these two (its permute_tensor
///   result is the next buffer; the current K/V are views of the previous one).
/// - ring, backward: the same K/V buffers, plus the rotating dK/dV accumulator it adds to and the
///   one in flight to its neighbour (torch's dkv rotater, from the first step on): + 2 x dkv.
/// - all-gather, forward: the gathered K/V of the whole sequence, P x kv (torch's
///   _AllGatherRotater keeps one aggregated buffer of the P chunks for the whole op).
/// - all-gather, backward (Llama 3, section 3.3.2: K/V gathered, dK/dV reduce-scattered): the
///   gathered K/V and the full-length dK/dV accumulators before their reduce-scatter,
///   P x (kv + dkv).
/// Not counted: a send-side copy of the chunk (torch.cat of K and V before each send) and fp32
/// accumulators (torch's convert_to_f32): both depend on the runtime's options, and the graph's
/// gradient dtype is what its dK/dV carry.  P = 1 holds nothing extra.
int64_t cp_buffer_bytes(const CpAttentionInput& in, int64_t p);

/// One point-to-point hop of `bytes` over mesh dim `dim` (a ring neighbour send/receive):
/// nccl model latency_us + bytes / busbw; dtensor model its hop latency and bandwidth.
double p2p_hop_us(double bytes, const Mesh& mesh, MeshDimIdx dim, CommModel model = CommModel::kNccl);

/// Time of one CP attention op over mesh dim `dim` (P = its size; P = 1 is plain attention).
CpAttentionTime cp_attention_time(const CpAttentionInput& in, const Mesh& mesh, MeshDimIdx dim,
                                  CommModel model = CommModel::kNccl);

}  // namespace autoshard

#include "cost/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace autoshard {

std::string_view cp_kind_name(CpKind k) {
  switch (k) {
    case CpKind::kRing: return "ring";
    case CpKind::kAllGather: return "allgather";
  }
  return "?";
}

std::optional<CpKind> parse_cp_kind(std::string_view s) {
  if (s == "ring") return CpKind::kRing;
  if (s == "allgather") return CpKind::kAllGather;
  return std::nullopt;
}

double p2p_hop_us(double bytes, const Mesh& mesh, MeshDimIdx dim, CommModel model) {
  const MeshDim& d = mesh.dim(dim);
  if (d.size <= 1) return 0.0;
  if (model == CommModel::kDtensor) {
    // DTensor has no point-to-point cost; its per-hop constants (collective.h) are the
    // closest figures of one ring hop, with the same GiB / (GB/s) convention.
    const double bw = d.inter_node ? kDtensorBandwidthGBps * kDtensorInterNodeFactor
                                   : kDtensorBandwidthGBps;
    const double lat = d.inter_node ? kDtensorInterHopLatencyUs : kDtensorHopLatencyUs;
    return lat + bytes / (1024.0 * 1024.0 * 1024.0) / bw * 1e6;
  }
  // One ring hop carries the whole chunk over one link: a ring collective's bus bandwidth is
  // exactly the per-link rate (nccl-tests doc/PERFORMANCE.md).
  return d.latency_us + bytes / (d.busbw_gbps * 1e3);
}

namespace {

/// Compute of ring step i (0-based) on the slowest rank, the ring running in lock step: every
/// transfer waits for its sender's previous step.  Rank r meets chunk (r - i) mod P at step
/// i; under causal attention without load balancing the diagonal chunk costs C/P, an earlier
/// chunk 2C/P and a later one nothing (see the header).
double ring_step_compute(const CpAttentionInput& in, int64_t p, int64_t i) {
  const double c = in.compute_us / static_cast<double>(p);
  if (!in.causal || in.load_balance) return c;
  double worst = 0;
  for (int64_t r = 0; r < p; ++r) {
    const int64_t j = ((r - i) % p + p) % p;
    worst = std::max(worst, j == r ? c : j < r ? 2 * c : 0.0);
  }
  return worst;
}

/// The slowest rank's whole compute: C, or C (2P-1)/P for unbalanced causal attention.
double slowest_compute(const CpAttentionInput& in, int64_t p) {
  if (!in.causal || in.load_balance) return in.compute_us;
  return in.compute_us * static_cast<double>(2 * p - 1) / static_cast<double>(p);
}

CpAttentionTime ring_time(const CpAttentionInput& in, const Mesh& mesh, MeshDimIdx dim,
                          CommModel model, int64_t p) {
  const double step_bytes = in.kv_bytes + (in.backward ? in.dkv_bytes : 0.0);
  const double t = p2p_hop_us(step_bytes, mesh, dim, model);
  CpAttentionTime r;
  double makespan = 0;
  for (int64_t i = 0; i + 1 < p; ++i) makespan += std::max(ring_step_compute(in, p, i), t);
  makespan += ring_step_compute(in, p, p - 1);
  r.transfer_us = static_cast<double>(p - 1) * t;
  double compute = 0;
  for (int64_t i = 0; i < p; ++i) compute += ring_step_compute(in, p, i);
  r.compute_us = compute;
  r.exposed_us = makespan - compute;
  if (in.backward) {
    // The accumulated dK/dV chunk is one hop from its owner after the last step.
    const double home = p2p_hop_us(in.dkv_bytes, mesh, dim, model);
    r.transfer_us += home;
    r.exposed_us += home;
  }
  return r;
}

CpAttentionTime allgather_time(const CpAttentionInput& in, const Mesh& mesh, MeshDimIdx dim,
                               CommModel model, int64_t p) {
  const double n = static_cast<double>(p);
  CpAttentionTime r;
  r.compute_us = slowest_compute(in, p);
  // The gather runs behind the local chunk's attention (step 0: C/P on every rank, balanced
  // or not); the reduce-scatter of dK/dV waits for the whole backward.
  const double gather = all_gather_us(in.kv_bytes * n, mesh, dim, model);
  r.transfer_us = gather;
  r.exposed_us = std::max(0.0, gather - in.compute_us / n);
  if (in.backward) {
    const double scatter = reduce_scatter_us(in.dkv_bytes * n, mesh, dim, model);
    r.transfer_us += scatter;
    r.exposed_us += scatter;
  }
  return r;
}

}  // namespace

int64_t cp_buffer_bytes(const CpAttentionInput& in, int64_t p) {
  if (p <= 1) return 0;
  const double n = static_cast<double>(p);
  const double dkv = in.backward ? in.dkv_bytes : 0.0;
  const double bytes = in.kind == CpKind::kRing
                           ? static_cast<double>(std::min<int64_t>(2, p - 1)) * in.kv_bytes + 2 * dkv
                           : n * (in.kv_bytes + dkv);
  return static_cast<int64_t>(std::llround(bytes));
}

CpAttentionTime cp_attention_time(const CpAttentionInput& in, const Mesh& mesh, MeshDimIdx dim,
                                  CommModel model) {
  const int64_t p = mesh.dim(dim).size;
  if (p <= 1) {
    CpAttentionTime r;
    r.compute_us = in.compute_us;
    return r;
  }
  return in.kind == CpKind::kRing ? ring_time(in, mesh, dim, model, p)
                                  : allgather_time(in, mesh, dim, model, p);
}

}  // namespace autoshard

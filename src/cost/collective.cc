#include "cost/collective.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace autoshard {

std::string_view comm_model_name(CommModel m) {
  switch (m) {
    case CommModel::kNccl: return "nccl";
    case CommModel::kDtensor: return "dtensor";
  }
  return "?";
}

std::optional<CommModel> parse_comm_model(std::string_view s) {
  std::string l(s);
  std::transform(l.begin(), l.end(), l.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (l == "nccl") return CommModel::kNccl;
  if (l == "dtensor") return CommModel::kDtensor;
  return std::nullopt;
}

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

namespace {

/// Hops of the ring: n-1, doubled for all-reduce (reduce-scatter + all-gather phases).
double ring_hops(Collective c, int64_t n) {
  double h = static_cast<double>(n - 1);
  return c == Collective::kAllReduce ? 2 * h : h;
}

/// DTensor's allgather_cost / reduce_scatter_cost / allreduce_cost (_collective_utils.py):
/// latency 6.6 + hops * lat (us); data (GiB * hops / n) / (GB/s) in s, times 1e6.
double dtensor_time_gib_us(Collective c, double gib, const MeshDim& d) {
  double bw = kDtensorBandwidthGBps;
  double lat = kDtensorHopLatencyUs;
  if (d.inter_node) {
    bw *= kDtensorInterNodeFactor;
    lat = kDtensorInterHopLatencyUs;
  }
  const double hops = ring_hops(c, d.size);
  const double latency = kDtensorBaseLatencyUs + hops * lat;
  const double seconds = (gib * hops / static_cast<double>(d.size)) / bw;
  return latency + seconds * 1e6;
}

double dtensor_time_us(Collective c, double bytes, const MeshDim& d) {
  return dtensor_time_gib_us(c, bytes / 1024.0 / 1024.0 / 1024.0, d);
}

/// Ring model (nccl-tests doc/PERFORMANCE.md): t = latency + hops/n * S / busbw.
double nccl_time_us(Collective c, double bytes, const MeshDim& d, double base_us) {
  if (d.size <= 1) return 0.0;
  const double hops = ring_hops(c, d.size);
  const double base = c == Collective::kAllToAll ? 0.0 : base_us;
  const double bytes_per_us = d.busbw_gbps * 1e3;  // GB/s = 1e9 B/s = 1e3 B/us
  return base + hops * d.latency_us + hops / static_cast<double>(d.size) * bytes / bytes_per_us;
}

}  // namespace

double collective_time_us(Collective c, double bytes, const Mesh& mesh, MeshDimIdx dim,
                          CommModel model) {
  const MeshDim& d = mesh.dim(dim);
  if (model == CommModel::kDtensor) return dtensor_time_us(c, bytes, d);
  return nccl_time_us(c, bytes, d, mesh.hardware().base_latency_us);
}

double dtensor_collective_gib_us(Collective c, double gib, const Mesh& mesh, MeshDimIdx dim) {
  return dtensor_time_gib_us(c == Collective::kAllToAll ? Collective::kAllGather : c, gib,
                             mesh.dim(dim));
}

double collective_bus_bytes(Collective c, double bytes, int64_t n) {
  if (n <= 1) return 0.0;
  return ring_hops(c, n) / static_cast<double>(n) * bytes;
}

}  // namespace autoshard

#pragma once
/// Accelerator and interconnect figures used by the cost model.  Presets are dense (no 2:4
/// sparsity) vendor peaks; bus bandwidths are measured nccl-tests figures.  Sources are listed
/// in ../shared/reference/cost-model.md §2-3 and repeated in hardware.cc.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"

namespace autoshard {

struct Hardware {
  std::string name;
  double peak_bf16_tflops = 0;  ///< dense BF16/FP16 tensor-core peak
  double peak_fp32_tflops = 0;
  double hbm_gbps = 0;          ///< HBM bandwidth, GB/s (1e9 bytes/s)
  int64_t memory_bytes = 0;     ///< device memory
  double nvlink_gbps = 0;       ///< vendor NVLink figure (both directions), informational
  double intra_busbw_gbps = 0;  ///< measured intra-node NCCL bus bandwidth (ring AG/RS)
  double inter_busbw_gbps = 0;  ///< measured inter-node bus bandwidth per GPU
  double intra_latency_us = 0.6;  ///< per-hop NVLink latency (NCCL tuning.cc, LL)
  double inter_latency_us = 2.7;  ///< per-hop network latency (NCCL tuning.cc, LL)
  double base_latency_us = 6.6;   ///< NCCL ring LL base latency
  int gpus_per_node = 8;
  double efficiency = 0.7;        ///< fraction of peak FLOPS/HBM reached (roofline eta)
  double launch_floor_us = 7.0;   ///< minimal kernel time

  /// Peak FLOPS (per second) for arithmetic in this dtype.
  double peak_flops(DType t) const;
};

/// Preset names: "a100" (A100-80GB SXM), "h100", "h100-500w" (the 96 GB HBM2e H100 at a 500 W
/// power limit of torchtitan's published runs), "h200", "b200".  Case-insensitive,
/// "a100-80gb" and "h100-sxm" style aliases accepted.
std::optional<Hardware> hardware_preset(std::string_view name);
std::vector<std::string> hardware_preset_names();

/// Reads a user-supplied hardware JSON file (fields as in Hardware, optional "base" preset to
/// start from).  Throws std::runtime_error naming the file and the field on bad input.
Hardware load_hardware_json(const std::string& path);
/// Parses hardware JSON text; `origin` names the source in error messages.
Hardware parse_hardware_json(std::string_view text, std::string_view origin);

}  // namespace autoshard

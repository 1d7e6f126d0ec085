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

/// How the step's kernels are produced, beyond the chip: training options that change what an
/// op costs but not the graph.  Both off by default (eager, in the graph's dtypes).
struct KernelOptions {
  /// torchao's Float8Linear, as torchtitan converts every nn.Linear but the output projection
  /// (torchtitan float8.py at 9dec370: `module_filter_fn=lambda mod, fqn: fqn != "output"`):
  /// the three matmuls of each converted linear (forward, input and weight gradients) run on
  /// the FP8 tensor cores, at Hardware::peak_fp8_tflops, after casting their operands
  /// (cost/compute.h compute_time_us).  Attention (SDPA) stays in bf16.
  bool float8_linear = false;
  /// torch.compile: Inductor fuses chains of memory-bound ops (pointwise, norms, reductions,
  /// copies, Float8 casts), so they move fewer bytes; their time is divided by
  /// Hardware::compile_memory_speedup.  Matmuls and attention keep their library kernels.
  bool compiled = false;
};

/// Speed-up of memory-bound ops under torch.compile, derived from torchtitan's measured gain
/// of compile on Llama 3.1 8B, FSDP on 8 H100s (pytorch/torchtitan
/// benchmarks/llama3_h100_202412_torchtitan.md, Table 1: 5,762 -> 6,667 tok/s/GPU, x1.157):
/// the factor that, applied to the memory-bound ops alone, gives that run's simulated step the
/// same x1.157 (`python3 bench/fidelity.py --derive-compile` recomputes it; docs/cost-model.md
/// "Compile and Float8").
inline constexpr double kCompileMemorySpeedup = 1.574;

struct Hardware {
  std::string name;
  double peak_bf16_tflops = 0;  ///< dense BF16/FP16 tensor-core peak
  double peak_fp32_tflops = 0;
  double peak_fp8_tflops = 0;   ///< dense FP8 tensor-core peak; 0: no FP8 tensor cores
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
  double compile_memory_speedup = kCompileMemorySpeedup;  ///< see kCompileMemorySpeedup
  KernelOptions kernels;          ///< set per run (CLI --float8, --compile), not by presets

  /// Peak FLOPS (per second) for arithmetic in this dtype (f8: the FP8 peak where the chip
  /// has one, else the BF16 peak).
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

/// The hardware a run names: a preset (hardware_preset) or a hardware JSON file (a name with
/// ".json"), with `gpus_per_node` GPUs per node when > 0 and the run's kernel options.  The CLI
/// (--hardware, --gpus-per-node, --float8, --compile) and the Python Mesh share it, so both price
/// the same names alike.  Throws std::invalid_argument naming the option (`prefix` + "hardware"
/// or + "float8": the CLI's "--", the keyword arguments' "") for an unknown name or Float8 on
/// hardware without FP8 tensor cores.
Hardware resolve_hardware(const std::string& name, int gpus_per_node, const KernelOptions& kernels,
                          std::string_view prefix);

}  // namespace autoshard

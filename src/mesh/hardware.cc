#include "mesh/hardware.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ir/file_util.h"

namespace autoshard {

double Hardware::peak_flops(DType t) const {
  // FP32 matmuls run on CUDA cores at the FP32 peak; everything narrower uses tensor cores.
  // Complex arithmetic runs on its real parts (f32 for c64) on CUDA cores: the FP32 peak, an
  // upper bound for c128 (whose f64 parts are slower still).
  const bool fp32 = t == DType::kF32 || is_complex(t);
  if (t == DType::kF8 && peak_fp8_tflops > 0) return peak_fp8_tflops * 1e12;
  return (fp32 ? peak_fp32_tflops : peak_bf16_tflops) * 1e12;
}

namespace {

constexpr int64_t kGB = 1000LL * 1000 * 1000;

/// Figures: ../shared/reference/cost-model.md §3 (vendor datasheets, dense) and §2 (nccl-tests:
/// A100 NVSwitch busbw ~230 GB/s, issue #149; H100 ring AG/RS ~370 GB/s, issue #212; NDR
/// 400 Gb/s IB 46-48 GB/s per NIC, issue #290).  H200 shares H100's NVLink4 fabric, so its ring
/// AG/RS figure is taken as H100's; B200's NVLink5 doubles NVLink4, so twice H100's.  A100
/// clusters typically run HDR 200 Gb/s per GPU: half the NDR figure.
/// Dense FP8 tensor-core peaks (vendor sheets quote them with 2:4 sparsity, twice these):
/// NVIDIA H100 Tensor Core GPU datasheet, FP8 Tensor Core 3,958 TFLOPS (SXM) and 3,341 (NVL)
/// with sparsity, so 1,979 and 1,670.5 dense, twice the BF16 figures; H200 shares H100's
/// tensor cores (NVIDIA H200 datasheet, 3,958 with sparsity); B200 (NVIDIA DGX B200 datasheet:
/// 72 PFLOPS FP8 training for 8 GPUs, with sparsity) 4,500 dense, twice its BF16.  A100 has no
/// FP8 tensor cores: 0.
std::vector<Hardware> presets() {
  std::vector<Hardware> v;
  Hardware a100;
  a100.name = "a100";
  a100.peak_bf16_tflops = 312;
  a100.peak_fp32_tflops = 19.5;
  a100.hbm_gbps = 2039;
  a100.memory_bytes = 80 * kGB;
  a100.nvlink_gbps = 600;
  a100.intra_busbw_gbps = 230;
  a100.inter_busbw_gbps = 23.5;
  v.push_back(a100);

  Hardware h100;
  h100.name = "h100";
  h100.peak_bf16_tflops = 989;
  h100.peak_fp32_tflops = 67;
  h100.peak_fp8_tflops = 1979;
  h100.hbm_gbps = 3350;
  h100.memory_bytes = 80 * kGB;
  h100.nvlink_gbps = 900;
  h100.intra_busbw_gbps = 370;
  h100.inter_busbw_gbps = 47;
  v.push_back(h100);

  // Meta's Grand Teton H100 hosts, where torchtitan's published benchmarks ran
  // (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"; the same text
  // in benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md): SXM H100 with 96 GB HBM2e at
  // 2.4 TB/s, NVLink within the host, 400 Gb/s RDMA per GPU, run at the default 500 W power
  // limit instead of the 700 W TDP.  The power cap lowers the sustained tensor-core clock; the
  // same file's footnote 2 bounds the real peak "between SXM and NVL" without knowing it: H100
  // SXM 989 and H100 NVL 835.5 dense BF16 TFLOPS (NVIDIA H100 datasheet, 1671 with sparsity),
  // FP32 67 and 60.  The preset takes the midpoint of each bound (912, 63.5); the fabric figures
  // are H100's (NVLink4 switch, one 400 Gb/s NIC per GPU).  FP8 likewise: the midpoint of SXM
  // 1979 and NVL 1670.5 dense, 1824.75, twice the BF16 midpoint.  docs/benchmarks.md "Fidelity"
  // gives the simulated step at both bounds.
  Hardware h100_500w = h100;
  h100_500w.name = "h100-500w";
  h100_500w.peak_bf16_tflops = 912;
  h100_500w.peak_fp32_tflops = 63.5;
  h100_500w.peak_fp8_tflops = 1824.75;
  h100_500w.hbm_gbps = 2400;
  h100_500w.memory_bytes = 96 * kGB;
  v.push_back(h100_500w);

  Hardware h200 = h100;
  h200.name = "h200";
  h200.hbm_gbps = 4800;
  h200.memory_bytes = 141 * kGB;
  v.push_back(h200);

  Hardware b200;
  b200.name = "b200";
  b200.peak_bf16_tflops = 2250;
  b200.peak_fp32_tflops = 75;
  b200.peak_fp8_tflops = 4500;
  b200.hbm_gbps = 7700;
  b200.memory_bytes = 180 * kGB;
  b200.nvlink_gbps = 1800;
  b200.intra_busbw_gbps = 740;
  b200.inter_busbw_gbps = 47;
  v.push_back(b200);
  return v;
}

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}

}  // namespace

std::optional<Hardware> hardware_preset(std::string_view name) {
  std::string n = lower(name);
  // Strip decorations in any order ("a100-80gb-sxm", "h100-sxm5", "h100_sxm").
  for (bool changed = true; changed;) {
    changed = false;
    for (std::string_view sv : {"-80gb", "_80gb", "-sxm5", "_sxm5", "-sxm4", "_sxm4", "-sxm",
                                "_sxm", "sxm"}) {
      if (n.size() > sv.size() && n.ends_with(sv)) {
        n.resize(n.size() - sv.size());
        changed = true;
      }
    }
  }
  for (const Hardware& h : presets())
    if (h.name == n) return h;
  return std::nullopt;
}

std::vector<std::string> hardware_preset_names() {
  std::vector<std::string> r;
  for (const Hardware& h : presets()) r.push_back(h.name);
  return r;
}

Hardware parse_hardware_json(std::string_view text, std::string_view origin) {
  nlohmann::json j = parse_json_text(text, origin);
  if (!j.is_object()) throw std::runtime_error(fmt::format("{}: expected a JSON object", origin));
  Hardware hw;
  if (j.contains("base")) {
    if (!j["base"].is_string())
      throw std::runtime_error(fmt::format("{}: /base: expected a preset name", origin));
    auto p = hardware_preset(j["base"].get<std::string>());
    if (!p)
      throw std::runtime_error(fmt::format("{}: /base: unknown preset '{}'", origin,
                                           one_line(j["base"].get<std::string>().substr(0, 80))));
    hw = *p;
  }
  auto num = [&](const char* key, double& field) {
    if (!j.contains(key)) return;
    if (!j[key].is_number() || j[key].get<double>() < 0)
      throw std::runtime_error(
          fmt::format("{}: /{}: expected a non-negative number", origin, key));
    field = j[key].get<double>();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const char* kKnown[] = {"base", "name", "peak_bf16_tflops", "peak_fp32_tflops", "peak_fp8_tflops",
                                   "hbm_gbps", "memory_bytes", "memory_gb", "nvlink_gbps",
                                   "intra_busbw_gbps", "inter_busbw_gbps", "intra_latency_us",
                                   "inter_latency_us", "base_latency_us", "gpus_per_node",
                                   "efficiency", "launch_floor_us", "compile_memory_speedup"};
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return it.key() == k; }) == std::end(kKnown))
      throw std::runtime_error(fmt::format("{}: /{}: unknown field", origin, one_line(it.key().substr(0, 80))));
  }
  if (j.contains("name")) {
    if (!j["name"].is_string())
      throw std::runtime_error(fmt::format("{}: /name: expected a string", origin));
    hw.name = j["name"].get<std::string>();
  } else if (hw.name.empty()) {
    hw.name = "custom";
  }
  num("peak_bf16_tflops", hw.peak_bf16_tflops);
  num("peak_fp32_tflops", hw.peak_fp32_tflops);
  num("peak_fp8_tflops", hw.peak_fp8_tflops);
  num("hbm_gbps", hw.hbm_gbps);
  num("nvlink_gbps", hw.nvlink_gbps);
  num("intra_busbw_gbps", hw.intra_busbw_gbps);
  num("inter_busbw_gbps", hw.inter_busbw_gbps);
  num("intra_latency_us", hw.intra_latency_us);
  num("inter_latency_us", hw.inter_latency_us);
  num("base_latency_us", hw.base_latency_us);
  num("efficiency", hw.efficiency);
  num("launch_floor_us", hw.launch_floor_us);
  num("compile_memory_speedup", hw.compile_memory_speedup);
  if (j.contains("memory_bytes") && j.contains("memory_gb"))
    throw std::runtime_error(
        fmt::format("{}: /memory_gb: give either memory_bytes or memory_gb, not both", origin));
  double mem = static_cast<double>(hw.memory_bytes);
  num("memory_bytes", mem);
  if (j.contains("memory_gb")) {
    double gb = 0;
    num("memory_gb", gb);
    mem = gb * 1e9;
  }
  if (mem >= 9e18)  // beyond int64
    throw std::runtime_error(fmt::format("{}: /memory_bytes: too large", origin));
  hw.memory_bytes = static_cast<int64_t>(mem);
  if (j.contains("gpus_per_node")) {
    const auto& v = j["gpus_per_node"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1'000'000)
      throw std::runtime_error(
          fmt::format("{}: /gpus_per_node: expected a positive integer", origin));
    hw.gpus_per_node = static_cast<int>(v.get<int64_t>());
  }
  for (auto [key, v] : {std::pair{"peak_bf16_tflops", hw.peak_bf16_tflops},
                        {"peak_fp32_tflops", hw.peak_fp32_tflops}, {"hbm_gbps", hw.hbm_gbps},
                        {"intra_busbw_gbps", hw.intra_busbw_gbps},
                        {"inter_busbw_gbps", hw.inter_busbw_gbps}})
    if (v <= 0) throw std::runtime_error(fmt::format("{}: /{}: missing or zero", origin, key));
  if (hw.memory_bytes <= 0)
    throw std::runtime_error(fmt::format("{}: /memory_bytes: missing or zero", origin));
  if (hw.gpus_per_node < 1)
    throw std::runtime_error(fmt::format("{}: /gpus_per_node: must be at least 1", origin));
  if (hw.compile_memory_speedup < 1)
    throw std::runtime_error(
        fmt::format("{}: /compile_memory_speedup: must be at least 1", origin));
  if (hw.efficiency <= 0 || hw.efficiency > 1)
    throw std::runtime_error(fmt::format("{}: /efficiency: must be in (0, 1]", origin));
  return hw;
}

Hardware load_hardware_json(const std::string& path) {
  return parse_hardware_json(read_text_file(path), path);
}

Hardware resolve_hardware(const std::string& name, int gpus_per_node, const KernelOptions& kernels,
                          std::string_view prefix) {
  Hardware hw;
  if (auto p = hardware_preset(name)) {
    hw = *p;
  } else if (name.find(".json") != std::string::npos) {
    hw = load_hardware_json(name);
  } else {
    throw std::invalid_argument(fmt::format("{}hardware: unknown preset '{}' (known: {})", prefix, name,
                                            fmt::join(hardware_preset_names(), ", ")));
  }
  if (gpus_per_node > 0) hw.gpus_per_node = gpus_per_node;
  if (kernels.float8_linear && hw.peak_fp8_tflops <= 0)
    throw std::invalid_argument(
        fmt::format("{}float8: hardware '{}' has no FP8 tensor cores (peak_fp8_tflops is 0)", prefix, hw.name));
  hw.kernels = kernels;
  return hw;
}

}  // namespace autoshard

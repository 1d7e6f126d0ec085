#include "cli/common.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "ir/graph_json.h"
#include "models/models.h"

namespace autoshard::cli {

void add_graph_options(CLI::App* app, GraphSource& src, const std::string& default_model) {
  src.model = default_model;
  app->add_option("--model", src.model, "built-in model: " + fmt::format("{}", fmt::join(model_names(), ", ")))
      ->capture_default_str();
  app->add_option("--graph", src.graph_file, "graph JSON file (docs/graph-format.md), e.g. from autoshard-trace");
  app->add_option("--batch", src.batch, "batch size of the built-in model");
  app->add_option("--seq", src.seq, "sequence length of the built-in model");
  app->add_option("--layers", src.layers, "number of layers of the built-in model");
  app->add_option("--dtype", src.dtype, "dtype of the built-in model (bf16, f32, f16)");
}

Graph load_graph(const GraphSource& src) {
  if (!src.graph_file.empty()) return load_graph_file(src.graph_file);
  ModelOptions mo;
  mo.batch = src.batch;
  mo.seq = src.seq;
  mo.layers = src.layers;
  if (!src.dtype.empty()) {
    auto d = parse_dtype(src.dtype);
    if (!d) throw std::invalid_argument(fmt::format("--dtype: unknown dtype '{}'", src.dtype));
    mo.dtype = *d;
  }
  return build_model(src.model, mo);
}

void add_mesh_options(CLI::App* app, MeshSource& src, const std::string& default_shape,
                      const std::string& default_dims) {
  src.shape = default_shape;
  src.dims = default_dims;
  app->add_option("--mesh", src.shape, "device mesh shape, e.g. 2x8 or 8")->capture_default_str();
  app->add_option("--mesh-dims", src.dims, "mesh dim names, e.g. dp,tp")->capture_default_str();
  app->add_option("--hardware", src.hardware,
                  "hardware preset (a100, h100, h200, b200) or a hardware JSON file")
      ->capture_default_str();
  app->add_option("--backend", src.backend, "communication backend: nccl or gloo")
      ->capture_default_str();
  app->add_option("--gpus-per-node", src.gpus_per_node, "GPUs per node (default: the hardware's)");
}

Mesh make_mesh(const MeshSource& src) {
  Hardware hw;
  if (auto p = hardware_preset(src.hardware)) {
    hw = *p;
  } else if (src.hardware.find(".json") != std::string::npos) {
    hw = load_hardware_json(src.hardware);
  } else {
    throw std::invalid_argument(fmt::format("--hardware: unknown preset '{}' (known: {})",
                                            src.hardware, fmt::join(hardware_preset_names(), ", ")));
  }
  if (src.gpus_per_node > 0) hw.gpus_per_node = src.gpus_per_node;
  CommBackend backend;
  if (src.backend == "nccl") backend = CommBackend::kNccl;
  else if (src.backend == "gloo") backend = CommBackend::kGloo;
  else throw std::invalid_argument(fmt::format("--backend: expected nccl or gloo, got '{}'", src.backend));
  auto shape = Mesh::parse_shape(src.shape);
  std::vector<std::string> names;
  if (!src.dims.empty()) names = Mesh::parse_names(src.dims);
  if (!names.empty() && names.size() != shape.size()) {
    if (src.dims == "dp,tp" && shape.size() == 1) names = {"dp"};  // default names, 1-D mesh
    else if (src.dims == "dp,tp" && shape.size() == 3) names = {"pp", "dp", "tp"};
    else
      throw std::invalid_argument(fmt::format("--mesh-dims: {} names for a {}-D mesh '{}'",
                                              names.size(), shape.size(), src.shape));
  }
  return Mesh(shape, names, hw, backend);
}

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("'{}' is not a size (e.g. 80GiB, 40GB, 1e9)", s));
  }
  std::string unit = s.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else throw std::invalid_argument(fmt::format("'{}': unknown unit '{}'", s, unit));
  if (v < 0 || !std::isfinite(v)) throw std::invalid_argument(fmt::format("'{}': must be >= 0", s));
  return static_cast<int64_t>(v * mult);
}

std::string format_bytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string format_us(double us) {
  if (std::isinf(us)) return "inf";
  if (us >= 1e6) return fmt::format("{:.3f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.3f} ms", us / 1e3);
  return fmt::format("{:.3f} us", us);
}

}  // namespace autoshard::cli

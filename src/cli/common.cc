#include "cli/common.h"

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
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
  if (!src.dtype.empty()) mo.dtype = parse_dtype_option(src.dtype);
  return build_model(src.model, mo);
}

void add_mesh_options(CLI::App* app, MeshSource& src, const std::string& default_shape,
                      const std::string& default_dims) {
  src.shape = default_shape;
  src.dims = default_dims;
  app->add_option("--mesh", src.shape, "device mesh shape, e.g. 2x8 or 8")->capture_default_str();
  app->add_option("--mesh-dims", src.dims, "mesh dim names, e.g. dp,tp")->capture_default_str();
  app->add_option("--hardware", src.hardware,
                  "hardware preset (a100, h100, h100-500w, h200, b200) or a hardware JSON file")
      ->capture_default_str();
  app->add_option("--backend", src.backend, "communication backend: nccl or gloo")
      ->capture_default_str();
  app->add_option("--gpus-per-node", src.gpus_per_node, "GPUs per node (default: the hardware's)");
  add_kernel_options(app, src.kernels);
}

void add_kernel_options(CLI::App* app, KernelOptions& k) {
  app->add_flag("--float8", k.float8_linear,
                "price the linear layers' matmuls (all but the output projection) at the FP8 "
                "tensor-core peak, as torchao Float8Linear runs them");
  app->add_flag("--compile", k.compiled,
                "price memory-bound ops (pointwise, norms, reductions, copies) as torch.compile "
                "fuses them: divided by the hardware's compile_memory_speedup");
}

Mesh make_mesh(const MeshSource& src) {
  const Hardware hw = resolve_hardware(src.hardware, src.gpus_per_node, src.kernels, "--");
  const CommBackend backend = parse_backend(src.backend, "--backend");
  std::vector<int64_t> shape;
  try {
    shape = Mesh::parse_shape(src.shape);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--mesh: {}", e.what()));
  }
  std::vector<std::string> names;
  try {
    if (!src.dims.empty()) names = Mesh::parse_names(src.dims);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--mesh-dims: {}", e.what()));
  }
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
    throw std::invalid_argument(fmt::format("--memory-limit: '{}' is not a size (e.g. 80GiB, 40GB, 1e9)", s));
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
  else
    throw std::invalid_argument(fmt::format(
        "--memory-limit: '{}': unknown unit '{}' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s,
        unit));
  if (v < 0 || !std::isfinite(v))
    throw std::invalid_argument(fmt::format("--memory-limit: '{}': must be >= 0", s));
  return static_cast<int64_t>(v * mult);
}

DType parse_dtype_option(const std::string& s) {
  std::string name = s;
  if (name == "fp32") name = "f32";
  else if (name == "fp16") name = "f16";
  else if (name == "fp8") name = "f8";
  if (auto d = parse_dtype(name)) return *d;
  throw std::invalid_argument(fmt::format(
      "--dtype: unknown dtype '{}' (expected bf16, f32, f16, f8, i64, i32, bool, c64 or c128)", s));
}

std::vector<Placement> parse_placements_option(std::string_view option, const std::string& s) {
  try {
    return parse_placements(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} '{}': {}", option, s, e.what()));
  }
}

namespace {
[[noreturn]] void fail_output(const std::string& dir, const std::string& why) {
  throw std::runtime_error(fmt::format("{}: cannot write output: {}", dir, why));
}
}  // namespace

void check_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir), ec);
  if (ec) fail_output(dir, ec.message());
  // Walk up to the nearest existing ancestor: it must be a writable directory.
  fs::path q = p;
  while (!fs::exists(q, ec)) {
    if (ec) fail_output(dir, ec.message());
    if (!q.has_parent_path() || q.parent_path() == q) fail_output(dir, "no existing parent directory");
    q = q.parent_path();
  }
  if (!fs::is_directory(q, ec))
    fail_output(dir, q == p ? std::string("not a directory")
                            : fmt::format("'{}' is not a directory", q.string()));
  if (::access(q.c_str(), W_OK | X_OK) != 0)
    fail_output(dir, q == p ? std::string(std::strerror(errno))
                            : fmt::format("'{}': {}", q.string(), std::strerror(errno)));
  fs::path target = p / "placements.json";
  if (fs::exists(target, ec) && fs::is_directory(target, ec))
    fail_output(dir, "placements.json is a directory");
}

void create_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail_output(dir, ec.message());
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

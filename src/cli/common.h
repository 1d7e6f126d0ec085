#pragma once
/// Options shared by the subcommands: where the graph comes from and what the mesh is.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "placement/placement.h"

namespace autoshard::cli {

struct GraphSource {
  std::string model;       ///< built-in model name
  std::string graph_file;  ///< or a graph JSON file
  int64_t batch = -1;
  int64_t seq = -1;
  int64_t layers = -1;
  std::string dtype;
};
void add_graph_options(CLI::App* app, GraphSource& src, const std::string& default_model);
Graph load_graph(const GraphSource& src);

struct MeshSource {
  std::string shape = "2x8";
  std::string dims;
  std::string hardware = "h100";
  std::string backend = "nccl";
  int gpus_per_node = -1;
  KernelOptions kernels;  ///< --float8, --compile
};
/// --float8 and --compile (mesh/hardware.h KernelOptions), for commands that price compute.
void add_kernel_options(CLI::App* app, KernelOptions& k);
void add_mesh_options(CLI::App* app, MeshSource& src, const std::string& default_shape,
                      const std::string& default_dims);
Mesh make_mesh(const MeshSource& src);

/// "80GiB", "80GB", "1.5e9", "512MiB" -> bytes.  Throws std::invalid_argument.
int64_t parse_bytes(const std::string& s);
/// A --dtype value: parse_dtype's names plus the common "fp32"/"fp16"/"fp8" spellings.
/// Throws std::invalid_argument "--dtype: unknown dtype 'x' (expected ...)".
DType parse_dtype_option(const std::string& s);
/// Placements given on the command line; errors start with `option` and the value.
std::vector<Placement> parse_placements_option(std::string_view option, const std::string& s);

/// Checks, before any work is done, that `dir` is (or can be created as) a writable directory,
/// without creating anything.  Throws std::runtime_error "<dir>: cannot write output: <why>".
void check_output_dir(const std::string& dir);
/// Creates `dir` (and parents) if needed; errors name the directory.
void create_output_dir(const std::string& dir);
/// "74.5 GiB" style.
std::string format_bytes(int64_t bytes);
/// "1.23 ms" / "456.7 us" / "2.1 s".
std::string format_us(double us);

void register_graph(CLI::App& app);
void register_cost(CLI::App& app);
void register_strategies(CLI::App& app);  // hidden: cmd_strategies.cc
void register_plan(CLI::App& app);
void register_iopddl(CLI::App& app);
void register_search(CLI::App& app);  // cmd_search.cc

}  // namespace autoshard::cli

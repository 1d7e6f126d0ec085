/// `autoshard cost`: the redistribution time of one tensor between two specs.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cost/redistribute.h"

namespace autoshard::cli {

namespace {

struct CostArgs {
  MeshSource mesh;
  std::string shape;
  std::string dtype = "bf16";
  std::string from;
  std::string to;
  std::string comm_model = "nccl";
  bool json = false;
};

void run_cost(const CostArgs& a) {
  Mesh mesh = make_mesh(a.mesh);
  TensorMeta meta;
  try {
    meta.shape = Mesh::parse_shape(a.shape);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(
        fmt::format("--shape '{}': expected positive sizes like 8192,4096", a.shape));
  }
  meta.dtype = parse_dtype_option(a.dtype);
  auto model = parse_comm_model(a.comm_model);
  if (!model) throw std::invalid_argument(fmt::format("--comm-model: expected nccl or dtensor, got '{}'", a.comm_model));
  ShardingSpec from{parse_placements_option("--from", a.from), meta};
  ShardingSpec to{parse_placements_option("--to", a.to), meta};
  for (const auto& [opt, s] : {std::pair{"--from", &from}, std::pair{"--to", &to}})
    if (s->ndim_mesh() != mesh.ndim())
      throw std::invalid_argument(fmt::format("{} '{}': {} placements for a {}-D mesh", opt,
                                              s->to_string(), s->ndim_mesh(), mesh.ndim()));
  for (const auto& [opt, s] : {std::pair{"--from", &from}, std::pair{"--to", &to}})
    if (!s->valid(mesh))
      throw std::invalid_argument(fmt::format("{} '{}': cannot shard shape [{}] on mesh {}", opt,
                                              s->to_string(), a.shape, mesh.describe()));
  double us = redistribute_cost_us(from, to, mesh, *model);
  if (a.json) {
    nlohmann::ordered_json j;
    j["mesh"] = mesh.shape();
    j["shape"] = meta.shape;
    j["dtype"] = dtype_name(meta.dtype);
    j["from"] = from.to_string();
    j["to"] = to.to_string();
    j["comm_model"] = comm_model_name(*model);
    j["bytes"] = meta.bytes();
    if (std::isinf(us)) j["time_us"] = nullptr;
    else j["time_us"] = us;
    j["possible"] = !std::isinf(us);
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (std::isinf(us))
    fmt::print("{} -> {}: impossible (infinite cost)\n", from.to_string(), to.to_string());
  else
    fmt::print("{} -> {}: {:.3f} us\n", from.to_string(), to.to_string(), us);
}

}  // namespace

void register_cost(CLI::App& app) {
  auto a = std::make_shared<CostArgs>();
  CLI::App* sub = app.add_subcommand("cost", "redistribution time of one tensor between two sharding specs");
  add_mesh_options(sub, a->mesh, "8", "");
  sub->add_option("--shape", a->shape, "global tensor shape, e.g. 8192,4096")->required();
  sub->add_option("--dtype", a->dtype, "dtype")->capture_default_str();
  sub->add_option("--from", a->from, "current placements, e.g. 'S(0)' or 'S(0)R'")->required();
  sub->add_option("--to", a->to, "target placements, e.g. R")->required();
  sub->add_option("--comm-model", a->comm_model, "nccl (measured bandwidths) or dtensor (DTensor's model)")
      ->capture_default_str();
  sub->add_flag("--json", a->json, "print JSON");
  sub->callback([a] { run_cost(*a); });
}

}  // namespace autoshard::cli

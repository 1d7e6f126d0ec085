/// `autoshard cost`: the redistribution time of one tensor between two specs.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
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
  std::string cases;  ///< batch mode: a JSON file of cases (see run_cases)
  bool steps = false;  ///< batch mode: also list the nccl-profile schedule of collectives
};

/// Batch mode (`--cases FILE.json`), for cross-checks that would otherwise launch one process
/// per case: FILE is a JSON array of {"mesh": [2, 4], "gpus_per_node": 8 (optional),
/// "shape": [8, 16], "dtype": "f32", "from": "S(0)R", "to": "RR"}; prints one JSON array of
/// {"time_us": number or null (impossible)} in the same order; with `--steps`, each result also
/// has "steps": the collectives of the profile's schedule (plan_redistribute for `nccl`,
/// plan_redistribute_dtensor for `dtensor`), each
/// {"collective", "mesh_dim", "bytes"} (bytes per device, collective_time_us's convention).  The mesh hardware, backend and
/// comm model come from the command line; errors name the file and the case's JSON pointer.
void run_cases(const CostArgs& a) {
  std::ifstream in(a.cases);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open cases file", a.cases));
  nlohmann::json cases;
  try {
    cases = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(fmt::format("{}: invalid JSON at byte {}", a.cases, e.byte));
  }
  if (!cases.is_array()) throw std::runtime_error(fmt::format("{}: expected a JSON array of cases", a.cases));
  auto model = parse_comm_model(a.comm_model);
  if (!model) throw std::invalid_argument(fmt::format("--comm-model: expected nccl or dtensor, got '{}'", a.comm_model));
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    std::string where = fmt::format("{}: /{}", a.cases, i);
    try {
      MeshSource ms = a.mesh;
      std::vector<int64_t> shape_m = c.at("mesh").get<std::vector<int64_t>>();
      ms.shape = fmt::format("{}", fmt::join(shape_m, "x"));
      ms.dims.clear();
      if (c.contains("gpus_per_node")) ms.gpus_per_node = c.at("gpus_per_node").get<int>();
      Mesh mesh = make_mesh(ms);
      TensorMeta meta;
      meta.shape = c.at("shape").get<std::vector<int64_t>>();
      meta.dtype = parse_dtype_option(c.at("dtype").get<std::string>());
      ShardingSpec from{parse_placements(c.at("from").get<std::string>()), meta};
      ShardingSpec to{parse_placements(c.at("to").get<std::string>()), meta};
      if (from.ndim_mesh() != mesh.ndim() || to.ndim_mesh() != mesh.ndim())
        throw std::invalid_argument(fmt::format("placements {} -> {} for a {}-D mesh", from.to_string(),
                                                to.to_string(), mesh.ndim()));
      double us = redistribute_cost_us(from, to, mesh, *model);
      nlohmann::json r;
      if (std::isinf(us)) r["time_us"] = nullptr;
      else r["time_us"] = us;
      if (a.steps) {
        const RedistributePlan plan = *model == CommModel::kDtensor
                                          ? plan_redistribute_dtensor(from, to, mesh)
                                          : plan_redistribute(from, to, mesh);
        r["steps"] = nlohmann::json::array();
        for (int32_t k = 0; k < plan.num_steps && !plan.impossible; ++k) {
          const CommStep& st = plan.steps[static_cast<size_t>(k)];
          r["steps"].push_back({{"collective", collective_name(st.kind)}, {"mesh_dim", st.dim},
                                {"bytes", st.bytes}});
        }
      }
      out.push_back(r);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", where, e.what()));
    }
  }
  std::cout << out.dump() << "\n";
}

void run_cost(const CostArgs& a) {
  if (!a.cases.empty()) return run_cases(a);
  for (const auto& [opt, v] : {std::pair{"--shape", &a.shape}, std::pair{"--from", &a.from},
                               std::pair{"--to", &a.to}})
    if (v->empty()) throw std::invalid_argument(fmt::format("{} is required (or --cases FILE)", opt));
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
    if (!decode_shard_order(s->placements, mesh))
      throw std::invalid_argument(fmt::format("{} '{}': the split factors fit no shard order on "
                                              "mesh {}",
                                              opt, s->to_string(), mesh.describe()));
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
  sub->add_option("--shape", a->shape, "global tensor shape, e.g. 8192,4096");
  sub->add_option("--dtype", a->dtype, "dtype")->capture_default_str();
  sub->add_option("--from", a->from, "current placements, e.g. 'S(0)', 'S(0)R' or '_S(0,8)S(0)' (strided: shard order)");
  sub->add_option("--to", a->to, "target placements, e.g. R");
  sub->add_option("--comm-model", a->comm_model, "nccl (measured bandwidths) or dtensor (DTensor's model)")
      ->capture_default_str();
  sub->add_flag("--json", a->json, "print JSON");
  sub->add_option("--cases", a->cases, "batch mode: JSON array of cases, prints a JSON array of times");
  sub->add_flag("--steps", a->steps, "batch mode: also list each case's collectives (the comm model's schedule)");
  sub->callback([a] { run_cost(*a); });
}

}  // namespace autoshard::cli

#include "io/plan_json.h"

#include <cmath>

#include "io/placements_json.h"
#include "planner/parallelism.h"

namespace autoshard {

nlohmann::ordered_json number_or_null(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;
}

nlohmann::ordered_json plan_summary_json(const Plan& plan, const Graph& g, const Mesh& mesh) {
  nlohmann::ordered_json j;
  j["graph"] = g.name;
  j["mesh"] = {{"shape", mesh.shape()}, {"dim_names", mesh.names()},
               {"hardware", mesh.hardware().name}};
  j["status"] = solve_status_name(plan.status);
  j["has_solution"] = plan.has_solution;
  j["objective_us"] = number_or_null(plan.objective_us);
  j["objective"] = plan.overlap_aware ? "overlap" : "additive";
  j["additive_us"] = number_or_null(plan.additive_us);
  j["overlapped_us"] = number_or_null(plan.overlapped_us);
  j["objective_solves"] = plan.objective_solves;
  j["lower_bound_us"] = number_or_null(plan.lower_bound_us);
  j["gap"] = number_or_null(plan.gap);
  j["compute_us"] = number_or_null(plan.compute_us);
  j["comm_us"] = number_or_null(plan.comm_us);
  j["peak_memory_bytes"] = plan.peak_memory_bytes;
  j["memory_limit_bytes"] = plan.memory_limit_bytes;
  if (plan.min_peak_memory_bytes >= 0) j["min_peak_memory_bytes"] = plan.min_peak_memory_bytes;
  if (plan.min_peak_lower_bound_bytes >= 0)
    j["min_peak_lower_bound_bytes"] = plan.min_peak_lower_bound_bytes;
  j["checked"] = plan.checked;
  j["problem"] = {{"graph_nodes", plan.graph_nodes},
                  {"nodes", plan.problem_nodes},
                  {"edges", plan.problem_edges},
                  {"alpa_variables", plan.alpa_variables},
                  {"layer_classes", plan.layer_clusters},
                  {"clustered_nodes", plan.clustered_nodes},
                  {"reduced_nodes", plan.reduced_nodes},
                  {"reduced_edges", plan.reduced_edges},
                  {"mip_variables", plan.mip_variables}};
  nlohmann::ordered_json phases = nlohmann::ordered_json::object();
  for (const auto& [name, s] : plan.phase_seconds) phases[name] = s;
  j["phase_seconds"] = phases;
  j["warnings"] = plan.warnings;
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  const ParallelismLabeler labels(g, mesh, plan);
  if (plan.has_solution)
    for (NodeIdx i = 0; i < g.size(); ++i) {
      if (g.node(i).kind != NodeKind::kParameter) continue;
      const auto& np = plan.nodes[static_cast<size_t>(i)];
      if (!np) continue;
      params.push_back({{"name", g.node(i).name},
                        {"shape", g.node(i).out().shape},
                        {"placement", output_spec_string(np->chosen)},
                        {"parallelism", labels.describe(i)}});
    }
  j["parameters"] = params;
  nlohmann::ordered_json cp = nlohmann::ordered_json::array();
  for (const ContextParallelUse& u : context_parallel_use(plan))
    cp.push_back({{"mesh_dim", mesh.dim(u.dim).name},
                  {"kind", std::string(cp_kind_name(u.kind))},
                  {"load_balance", u.load_balance},
                  {"attention_ops", u.nodes}});
  j["context_parallel"] = cp;
  if (!plan.layer_recompute.empty()) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const auto& [layer, mode] : plan.layer_recompute)
      layers.push_back({{"layer", layer}, {"recompute", mode}});
    j["recompute_us"] = plan.recompute_us;
    j["layers"] = layers;
    j["recomputed_nodes"] = plan.recomputed_nodes;
  }
  return j;
}

}  // namespace autoshard

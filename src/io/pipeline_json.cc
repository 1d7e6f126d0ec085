#include "io/pipeline_json.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "io/placements_json.h"
#include "io/state.h"
#include "pipeline/backward_split.h"
#include "planner/twin_views.h"

namespace autoshard {

namespace {

nlohmann::ordered_json stage_layers(const PipelinePlan& pl, const PipelineStage& st) {
  nlohmann::ordered_json names = nlohmann::ordered_json::array();
  for (int32_t l = st.lo; l < st.hi; ++l) names.push_back(pl.layers[static_cast<size_t>(l)]);
  return names;
}

}  // namespace

namespace {

/// A stage-graph node named in the full graph: kNoNode stays; -1 for one outside it.
NodeIdx full_node(const PipelineStage& st, NodeIdx j) {
  return j == kNoNode ? kNoNode : st.nodes.at(static_cast<size_t>(j));
}

/// Appends stage `st`'s schedule `s` (on its solve's graph) to `out` (on the full graph).
void append_stage(const PipelineStage& st, const PrefetchSchedule& s, std::set<std::string>& seen,
                  PrefetchSchedule& out) {
  const int32_t buckets = out.num_buckets;
  for (PrefetchEntry e : s.entries) {
    e.consumer = full_node(st, e.consumer);
    e.issue_before = full_node(st, e.issue_before);
    e.wait_before = full_node(st, e.wait_before);
    if (e.consumer < 0 || (e.issue_before < 0 && e.issue_before != kNoNode)) continue;
    if (!seen.insert(fmt::format("p{}:{}", e.consumer, e.slot)).second) continue;
    e.bucket += buckets;
    out.entries.push_back(e);
  }
  for (IssueEntry e : s.issues) {
    e.consumer = full_node(st, e.consumer);
    e.issue_after = full_node(st, e.issue_after);
    e.wait_before = full_node(st, e.wait_before);
    if (e.consumer < 0 || e.issue_after < 0) continue;
    if (seen.insert(fmt::format("i{}:{}", e.consumer, e.slot)).second) out.issues.push_back(e);
  }
  for (ReductionEntry r : s.reductions) {
    r.param = full_node(st, r.param);
    r.producer = full_node(st, r.producer);
    r.wait_before = full_node(st, r.wait_before);
    if (r.param >= 0 && seen.insert(fmt::format("r{}", r.param)).second) out.reductions.push_back(r);
  }
  out.num_buckets = buckets + s.num_buckets;
}

}  // namespace

PrefetchSchedule pipeline_schedule(const PipelinePlan& pl, const Graph&, const ScheduleOptions& o) {
  PrefetchSchedule out;
  out.options = o;
  std::set<std::string> seen;
  for (const PipelineStage& st : pl.stages) {
    if (!st.solve || !st.solve->plan.has_solution) continue;
    append_stage(st, prefetch_schedule(st.solve->sg.graph, st.solve->plan, o), seen, out);
  }
  return out;
}

namespace {

/// Per full-graph node, its backward part in its stage (pipeline/backward_split.h); kForward for
/// nodes outside every stage's backward.
std::vector<StepPart> node_parts(const PipelinePlan& pl, const Graph& g) {
  std::vector<StepPart> out(static_cast<size_t>(g.size()), StepPart::kForward);
  for (const PipelineStage& st : pl.stages) {
    if (!st.solve) continue;
    const std::vector<StepPart> parts = step_parts(st.solve->sg);
    for (size_t j = 0; j < parts.size() && j < st.nodes.size(); ++j)
      if (st.nodes[j] >= 0) out[static_cast<size_t>(st.nodes[j])] = parts[j];
  }
  return out;
}

}  // namespace

std::string write_pipeline_placements_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh,
                                           const ScheduleOptions& schedule) {
  nlohmann::ordered_json j = placements_header(g, mesh);
  nlohmann::ordered_json p;
  p["mesh_dim"] = mesh.dim(pl.pp_dim).name;
  p["schedule"] = std::string(schedule_name(pl.schedule));
  p["microbatches"] = pl.M;
  p["stages_per_rank"] = pl.v;
  if (pl.params_gathered_once) p["params_gathered_once"] = true;  // absent: gathered at each use
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PipelineStage& st : pl.stages)
    stages.push_back({{"index", st.index}, {"pp_rank", st.pp_rank}, {"layers", stage_layers(pl, st)},
                      {"first", st.first}, {"last", st.last}});
  p["stages"] = stages;
  j["pipeline"] = p;
  nlohmann::ordered_json placements = nlohmann::ordered_json::object();
  const std::vector<StepPart> parts = node_parts(pl, g);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& s = pl.node_strategy[static_cast<size_t>(i)];
    if (!s) continue;
    nlohmann::ordered_json e;
    e["output"] = output_spec_string(*s);
    nlohmann::ordered_json ins = nlohmann::ordered_json::array();
    for (const ShardingSpec& x : s->inputs) ins.push_back(x.to_string());
    e["inputs"] = ins;
    e["stage"] = pl.node_stage[static_cast<size_t>(i)];
    if (const StepPart part = parts[static_cast<size_t>(i)]; part == StepPart::kInputGrad)
      e["part"] = "input_grad";
    else if (part == StepPart::kWeightGrad)
      e["part"] = "weight_grad";
    if (s->cp.active()) e["context_parallel"] = context_parallel_json(s->cp, mesh);
    placements[g.node(i).name] = e;
  }
  j["placements"] = placements;
  std::vector<const Strategy*> chosen;
  for (const auto& s : pl.node_strategy) chosen.push_back(s ? &*s : nullptr);
  if (auto layout = sequence_layout_json(g, chosen, mesh)) j["sequence_layout"] = std::move(*layout);
  PrefetchSchedule sched = pipeline_schedule(pl, g, schedule);
  nlohmann::ordered_json once = nlohmann::ordered_json::array();
  for (const ReductionEntry& r : sched.reductions) once.push_back(fmt::format("grad:{}:-1", g.node(r.param).name));
  sched.reductions.clear();  // not in each backward: once per step
  j["schedule"] = schedule_json(sched, g);
  j["schedule"]["once_per_step"] = std::move(once);
  // Twin views (planner/twin_views.h) the stage solves tied: one redistribution for both.
  nlohmann::ordered_json twins = nlohmann::ordered_json::object();
  const std::vector<NodeIdx> first = graph_twins(g);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const NodeIdx a = first[static_cast<size_t>(i)];
    if (a == kNoNode) continue;
    const auto &si = pl.node_strategy[static_cast<size_t>(i)], &sa = pl.node_strategy[static_cast<size_t>(a)];
    if (si && sa && si->name() == sa->name() &&
        pl.node_stage[static_cast<size_t>(i)] == pl.node_stage[static_cast<size_t>(a)])
      twins[g.node(i).name] = g.node(a).name;
  }
  if (!twins.empty()) j["schedule"]["twins"] = std::move(twins);
  return j.dump(1) + "\n";
}

namespace {

/// Layers per recomputation mode of a stage's plan ({"full": 3}; empty: none recomputed).
nlohmann::ordered_json recompute_counts(const Plan& p) {
  std::map<std::string, int> n;
  for (const auto& [layer, mode] : p.layer_recompute)
    if (mode != "none") ++n[mode];
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [mode, k] : n) j[mode] = k;
  return j;
}

}  // namespace

nlohmann::ordered_json pipeline_summary_json(const PipelinePlan& pl, const Graph& g, const Mesh& mesh) {
  nlohmann::ordered_json j;
  j["graph"] = g.name;
  j["mesh_shape"] = mesh.shape();
  j["mesh_dim_names"] = mesh.names();
  j["schedule"] = std::string(schedule_name(pl.schedule));
  j["microbatches"] = pl.M;
  j["stages_per_rank"] = pl.v;
  j["step_us"] = pl.step_us;
  j["bubble_us"] = pl.bubble_us;
  j["lower_bound_us"] = pl.lower_bound_us;
  j["gap"] = pl.gap;
  j["intra_op_solves"] = pl.intra_op_solves;
  j["clock_stopped_solves"] = pl.clock_stopped_solves;
  j["memory_limit_bytes"] = pl.memory_limit_bytes;
  j["rank_peak_memory_bytes"] = pl.rank_peak_bytes;
  j["params_gathered_once"] = pl.params_gathered_once;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PipelineStage& st : pl.stages) {
    const StageSolve& s = *st.solve;
    stages.push_back({{"index", st.index},
                      {"pp_rank", st.pp_rank},
                      {"layers", stage_layers(pl, st)},
                      {"first", st.first},
                      {"last", st.last},
                      {"devices", pl.stage_mesh.num_devices()},
                      {"microbatch_us", s.microbatch_us},
                      {"lower_bound_us", s.lower_bound_us},
                      {"p2p_us", s.p2p_us},
                      {"once_per_step_us", s.once_us},
                      {"inflight_microbatches", st.inflight},
                      {"deferred_microbatches", st.deferred},
                      {"part_us", {{"forward", s.parts.forward_us}, {"input_grad", s.parts.input_grad_us},
                                   {"weight_grad", s.parts.weight_grad_us}}},
                      {"kept_for_w_bytes", s.parts.kept_for_w_bytes},
                      {"activation_bytes", s.activation_bytes},
                      {"gathered_param_bytes", s.gathered_param_bytes},
                      {"microbatch_peak_bytes", s.microbatch_peak_bytes},
                      {"boundary_bytes", s.boundary_bytes},
                      {"deferred_grad_bytes", s.deferred_grad_bytes},
                      {"recompute_us", s.plan.recompute_us},
                      {"recompute_layers", recompute_counts(s.plan)},
                      {"peak_memory_bytes", pl.rank_peak_bytes[static_cast<size_t>(st.pp_rank)]},
                      {"status", std::string(solve_status_name(s.plan.status))}});
  }
  j["stages"] = stages;
  nlohmann::ordered_json cands = nlohmann::ordered_json::array();
  for (const auto& c : pl.candidates)
    cands.push_back({{"schedule", std::string(schedule_name(c.schedule))}, {"stages_per_rank", c.v},
                     {"step_us", c.step_us}, {"lower_bound_us", c.lower_bound_us}});
  j["candidates"] = cands;
  if (!pl.warnings.empty()) j["warnings"] = pl.warnings;
  return j;
}

}  // namespace autoshard

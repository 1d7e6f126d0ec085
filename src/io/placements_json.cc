#include "io/placements_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <stdexcept>

#include "io/state.h"
#include "ir/file_util.h"
#include "planner/prefetch_schedule.h"
#include "planner/recompute.h"
#include "planner/sequence_layout.h"
#include "planner/sharding_optimizer.h"
#include "planner/solution_file.h"

namespace autoshard {

std::string output_spec_string(const Strategy& s) {
  if (s.outputs.size() == 1) return s.outputs[0].to_string();
  std::string r = "(";
  for (size_t k = 0; k < s.outputs.size(); ++k) r += (k ? ", " : "") + s.outputs[k].to_string();
  return r + ")";
}

std::string graph_fingerprint(const Graph& g) {
  // Only the graph component is used: mesh, options and constraints do not enter it.
  static const Mesh kUnitMesh({1}, {"x"}, *hardware_preset("h100"));
  return fingerprint_parts(g, kUnitMesh, PlannerOptions{}, {}).graph;
}

nlohmann::ordered_json context_parallel_json(const ContextParallel& cp, const Mesh& mesh) {
  nlohmann::ordered_json j;
  j["mesh_dim"] = mesh.names().at(static_cast<size_t>(cp.mesh_dim));
  j["kind"] = std::string(cp_kind_name(cp.kind));
  j["load_balance"] = cp.load_balance;
  return j;
}

nlohmann::ordered_json placements_header(const Graph& g, const Mesh& mesh) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["mesh_shape"] = mesh.shape();
  j["mesh_dim_names"] = mesh.names();
  j["autoshard_version"] = std::string(autoshard_version());
  j["graph_fingerprint"] = graph_fingerprint(g);
  return j;
}

/// {"version": 5, "prefetch_layers": k, "bucketing": "layer", "order": ["embedding", ...],
/// "prefetch": [{"edge": "mm_3:1", "issue_before": "add_5", "bucket": 0}, ...], "issue":
/// [{"edge": "mm_4:0", "issue_after": "mul_2"}, ...], "reduce": [{"edge": "grad:w:-1",
/// "bucket": 0}, ...]}: the ops in the order a rank runs them (run_order, the simulator's),
/// edges in the runtime's stamp form (consumer:slot; grad:<param>:-1), null issue_before = at
/// the start; entries of one bucket run merged.
namespace {

/// A node's name; null for kNoNode (an entry's "wait_before": the step's end).
nlohmann::ordered_json node_name_or_null(const Graph& g, NodeIdx i) {
  if (i == kNoNode) return nullptr;
  return g.node(i).name;
}

}  // namespace

nlohmann::ordered_json schedule_json(const PrefetchSchedule& s, const Graph& g) {
  nlohmann::ordered_json j;
  j["version"] = 6;
  j["prefetch_layers"] = s.options.prefetch_layers;
  j["bucketing"] = std::string(bucketing_name(s.options.bucketing));
  nlohmann::ordered_json order = nlohmann::ordered_json::array();
  for (NodeIdx i : run_order(g))
    if (g.node(i).kind == NodeKind::kOp) order.push_back(g.node(i).name);
  j["order"] = std::move(order);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const PrefetchEntry& e : s.entries) {
    nlohmann::ordered_json x;
    x["edge"] = fmt::format("{}:{}", g.node(e.consumer).name, e.slot);
    if (e.issue_before == kNoNode)
      x["issue_before"] = nullptr;
    else
      x["issue_before"] = g.node(e.issue_before).name;
    x["bucket"] = e.bucket;
    x["wait_before"] = node_name_or_null(g, e.wait_before);
    list.push_back(std::move(x));
  }
  j["prefetch"] = std::move(list);
  nlohmann::ordered_json issue = nlohmann::ordered_json::array();
  for (const IssueEntry& e : s.issues)
    issue.push_back({{"edge", fmt::format("{}:{}", g.node(e.consumer).name, e.slot)},
                     {"issue_after", g.node(e.issue_after).name},
                     {"wait_before", node_name_or_null(g, e.wait_before)}});
  j["issue"] = std::move(issue);
  nlohmann::ordered_json reduce = nlohmann::ordered_json::array();
  for (const ReductionEntry& r : s.reductions)
    reduce.push_back({{"edge", fmt::format("grad:{}:-1", g.node(r.param).name)},
                      {"bucket", r.bucket},
                      {"wait_before", node_name_or_null(g, r.wait_before)}});
  j["reduce"] = std::move(reduce);
  return j;
}

namespace {

/// [{"edge": "mm_4:0", "via": ["S(0)S(1)"]}, {"edge": "grad:w:-1", "via": [...]}]: the
/// placements between a redistribution's planned collectives.
nlohmann::ordered_json paths_json(const std::vector<PathEntry>& paths, const Graph& g) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PathEntry& p : paths) {
    nlohmann::ordered_json via = nlohmann::ordered_json::array();
    for (const std::vector<Placement>& state : p.via) via.push_back(placements_to_string(state));
    const std::string& name = g.node(p.consumer).name;
    out.push_back({{"edge", p.slot < 0 ? fmt::format("grad:{}:-1", name) : fmt::format("{}:{}", name, p.slot)},
                   {"via", std::move(via)}});
  }
  return out;
}

}  // namespace

std::optional<nlohmann::ordered_json> sequence_layout_json(const Graph& g,
                                                          const std::vector<const Strategy*>& chosen,
                                                          const Mesh& mesh) {
  if (std::none_of(chosen.begin(), chosen.end(),
                   [](const Strategy* s) { return s && s->cp.active() && s->cp.load_balance; }))
    return std::nullopt;
  const SequenceLayout layout = sequence_layout(g, chosen, mesh);
  nlohmann::ordered_json permute = nlohmann::ordered_json::object();
  for (const SequencePermute& p : layout.permute) {
    nlohmann::ordered_json dims = nlohmann::ordered_json::array();
    for (const auto& [d, world] : p.dims) dims.push_back({d, world});
    permute[g.node(p.node).name] = std::move(dims);
  }
  return nlohmann::ordered_json{{"head_tail", layout.head_tail}, {"permute", std::move(permute)}};
}

std::string write_placements_json(const Plan& plan, const Graph& g, const Mesh& mesh,
                                  const ScheduleOptions& schedule) {
  nlohmann::ordered_json j = placements_header(g, mesh);
  nlohmann::ordered_json pl = nlohmann::ordered_json::object();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    nlohmann::ordered_json e;
    e["output"] = output_spec_string(np->chosen);
    nlohmann::ordered_json ins = nlohmann::ordered_json::array();
    for (const ShardingSpec& s : np->chosen.inputs) ins.push_back(s.to_string());
    e["inputs"] = ins;
    if (np->chosen.cp.active()) e["context_parallel"] = context_parallel_json(np->chosen.cp, mesh);
    pl[g.node(i).name] = e;
  }
  j["placements"] = pl;
  std::vector<const Strategy*> chosen(static_cast<size_t>(g.size()), nullptr);
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (const auto& np = plan.nodes[static_cast<size_t>(i)]) chosen[static_cast<size_t>(i)] = &np->chosen;
  if (auto layout = sequence_layout_json(g, chosen, mesh)) j["sequence_layout"] = std::move(*layout);
  if (!plan.recomputed_nodes.empty()) j["recompute"] = plan.recomputed_nodes;
  if (plan.has_solution) {
    j["schedule"] = schedule_json(prefetch_schedule(g, plan, schedule), g);
    if (schedule.planned_paths) j["schedule"]["via"] = paths_json(planned_paths(g, plan, mesh), g);
    nlohmann::ordered_json twins = nlohmann::ordered_json::object();
    for (const auto& np : plan.nodes)
      if (np && np->twin != kNoNode) twins[g.node(np->node).name] = g.node(np->twin).name;
    if (!twins.empty()) j["schedule"]["twins"] = std::move(twins);
  }
  return j.dump(1) + "\n";
}

namespace {

std::vector<std::string> split_tuple(std::string_view s) {
  std::vector<std::string> parts;
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') {
    s = s.substr(1, s.size() - 2);
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (i == s.size() || (s[i] == ',' && depth == 0)) {
        std::string_view part = s.substr(start, i - start);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
        parts.emplace_back(part);
        start = i + 1;
      } else if (s[i] == '(') {
        ++depth;
      } else if (s[i] == ')') {
        --depth;
      }
    }
    return parts;
  }
  parts.emplace_back(s);
  return parts;
}

}  // namespace

namespace {

/// A problem of one saved node: "<JSON pointer>: <why>" (collected, not thrown to the user).
struct NodeError {
  std::string message;
};

struct ParsedPlacements {
  std::vector<std::optional<Strategy>> wanted;
  std::vector<std::string> node_errors;
  std::string fingerprint;
  std::string writer_version;
  std::vector<std::string> recompute;  ///< "recompute": graph nodes the backward re-executes
};

/// A node's "context_parallel" object: mesh dim by name, kind, load_balance (default false).
ContextParallel parse_context_parallel(const nlohmann::json& x, const std::string& where,
                                       const Mesh& mesh) {
  const std::string at = where + "/context_parallel";
  if (!x.is_object()) throw NodeError{fmt::format("{}: expected an object", at)};
  ContextParallel cp;
  const auto& names = mesh.names();
  if (!x.contains("mesh_dim") || !x["mesh_dim"].is_string())
    throw NodeError{fmt::format("{}/mesh_dim: expected a mesh dim name", at)};
  const std::string dim = x["mesh_dim"].get<std::string>();
  auto it = std::find(names.begin(), names.end(), dim);
  if (it == names.end())
    throw NodeError{fmt::format("{}/mesh_dim: no mesh dim named '{}' (dims: {})", at, excerpt(dim),
                                fmt::join(names, ", "))};
  cp.mesh_dim = static_cast<int32_t>(it - names.begin());
  std::optional<CpKind> kind;
  if (x.contains("kind") && x["kind"].is_string()) kind = parse_cp_kind(x["kind"].get<std::string>());
  if (!kind) throw NodeError{fmt::format("{}/kind: expected \"ring\" or \"allgather\"", at)};
  cp.kind = *kind;
  if (x.contains("load_balance")) {
    if (!x["load_balance"].is_boolean())
      throw NodeError{fmt::format("{}/load_balance: expected true or false", at)};
    cp.load_balance = x["load_balance"].get<bool>();
  }
  return cp;
}

ParsedPlacements parse_placements_doc(std::string_view text, std::string_view origin,
                                      const Graph& g, const Mesh& mesh) {
  nlohmann::json j = parse_json_text(text, origin);
  // One line whatever the file holds (a mesh dim name with a newline, for one).
  auto fail = [&](std::string_view where, std::string_view why) -> std::runtime_error {
    return std::runtime_error(one_line(fmt::format("{}: {}: {}", origin, where, why)));
  };
  if (!j.is_object()) throw fail("/", "expected an object");
  if (!j.contains("version") || j["version"] != 1) throw fail("/version", "expected 1");
  if (!j.contains("mesh_shape") || !j["mesh_shape"].is_array())
    throw fail("/mesh_shape", "missing");
  std::vector<int64_t> shape;
  for (const auto& x : j["mesh_shape"]) {
    if (!x.is_number_integer()) throw fail("/mesh_shape", "expected integers");
    shape.push_back(x.get<int64_t>());
  }
  if (shape != mesh.shape())
    throw fail("/mesh_shape", fmt::format("saved for mesh {} but planning on {}",
                                          fmt::join(shape, "x"), mesh.describe()));
  if (j.contains("mesh_dim_names") && j["mesh_dim_names"].is_array()) {
    std::vector<std::string> names;
    for (const auto& x : j["mesh_dim_names"]) names.push_back(x.is_string() ? x.get<std::string>() : "");
    if (names != mesh.names())
      throw fail("/mesh_dim_names", fmt::format("saved for dims ({}) but planning on ({})",
                                                fmt::join(names, ", "), fmt::join(mesh.names(), ", ")));
  }
  if (!j.contains("placements") || !j["placements"].is_object())
    throw fail("/placements", "missing or not an object");
  ParsedPlacements r;
  if (j.contains("graph_fingerprint") && j["graph_fingerprint"].is_string())
    r.fingerprint = j["graph_fingerprint"].get<std::string>();
  if (j.contains("autoshard_version") && j["autoshard_version"].is_string())
    r.writer_version = j["autoshard_version"].get<std::string>();
  if (j.contains("recompute")) {
    if (!j["recompute"].is_array()) throw fail("/recompute", "expected an array of node names");
    for (size_t k = 0; k < j["recompute"].size(); ++k) {
      const auto& x = j["recompute"][k];
      const std::string where = fmt::format("/recompute/{}", k);
      if (!x.is_string()) throw fail(where, "expected a node name");
      if (!g.find(x.get<std::string>()))
        r.node_errors.push_back(fmt::format("{}: no node named '{}' in the graph", where, excerpt(x.get<std::string>())));
      else
        r.recompute.push_back(x.get<std::string>());
    }
  }
  r.wanted.resize(static_cast<size_t>(g.size()));
  auto node_fail = [](std::string_view where, std::string_view why) {
    return NodeError{fmt::format("{}: {}", where, why)};
  };
  for (auto it = j["placements"].begin(); it != j["placements"].end(); ++it) {
    // The key comes from the file: on one line in messages (found by the placements fuzzer).
    std::string where = "/placements/" + excerpt(it.key());
    try {
      auto idx = g.find(it.key());
      if (!idx) throw node_fail(where, "no such node in the graph");
      const Node& n = g.node(*idx);
      const auto& e = it.value();
      if (!e.is_object())
        throw node_fail(where, fmt::format("expected an object, got {}", e.type_name()));
      if (!e.contains("output")) throw node_fail(where + "/output", "missing");
      if (!e["output"].is_string())
        throw node_fail(where + "/output",
                        fmt::format("expected a placement string, got {}", e["output"].type_name()));
      Strategy s;
      // Parses one DTensor string; errors carry the exact JSON pointer of the string.
      auto parse_at = [&](const nlohmann::json& v, const std::string& at) {
        if (!v.is_string())
          throw node_fail(at, fmt::format("expected a placement string, got {}", v.dump()));
        try {
          return parse_placements(v.get<std::string>());
        } catch (const std::invalid_argument& ex) {
          throw node_fail(at, one_line(ex.what()));
        }
      };
      auto parts = split_tuple(e["output"].get<std::string>());
      if (parts.size() != n.outputs.size())
        throw node_fail(where + "/output", fmt::format("{} specs for {} outputs", parts.size(),
                                                       n.outputs.size()));
      for (size_t k = 0; k < parts.size(); ++k) {
        ShardingSpec sp;
        sp.placements = parts[k] == "None" ? std::vector<Placement>(static_cast<size_t>(mesh.ndim()))
                                           : parse_at(parts[k], where + "/output");
        sp.meta = n.outputs[k];
        s.outputs.push_back(std::move(sp));
      }
      if (e.contains("inputs")) {
        if (!e["inputs"].is_array() || e["inputs"].size() != n.inputs.size())
          throw node_fail(where + "/inputs",
                          fmt::format("expected {} input specs (node '{}' has {} inputs), got {}",
                                      n.inputs.size(), n.name, n.inputs.size(),
                                      e["inputs"].is_array() ? std::to_string(e["inputs"].size())
                                                             : std::string("no array")));
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const std::string at = fmt::format("{}/inputs/{}", where, k);
          ShardingSpec sp;
          sp.placements = parse_at(e["inputs"][k], at);
          sp.meta = g.meta(n.inputs[k]);
          if (sp.ndim_mesh() != mesh.ndim())
            throw node_fail(at, fmt::format("{} placements for a {}-D mesh", sp.ndim_mesh(), mesh.ndim()));
          s.inputs.push_back(std::move(sp));
        }
      }
      if (e.contains("context_parallel")) s.cp = parse_context_parallel(e["context_parallel"], where, mesh);
      for (const ShardingSpec& sp : s.outputs)
        if (sp.ndim_mesh() != mesh.ndim())
          throw node_fail(where + "/output", fmt::format("{} placements for a {}-D mesh",
                                                         sp.ndim_mesh(), mesh.ndim()));
      r.wanted[static_cast<size_t>(*idx)] = std::move(s);
    } catch (const NodeError& ne) {
      r.node_errors.push_back(ne.message);
    }
  }
  return r;
}

std::string spec_list(const std::vector<ShardingSpec>& specs) {
  std::string r;
  for (size_t k = 0; k < specs.size(); ++k) r += (k ? ", " : "") + specs[k].to_string();
  return r;
}

}  // namespace

std::string format_mismatches(std::string_view origin, const std::vector<std::string>& m,
                              size_t shown) {
  if (m.size() == 1) return fmt::format("{}: {}", origin, m[0]);
  std::string r = fmt::format("{}: ", origin);
  for (size_t k = 0; k < m.size() && k < shown; ++k) r += (k ? "; " : "") + m[k];
  if (m.size() > shown) r += fmt::format("; and {} more", m.size() - shown);
  return one_line(r + fmt::format(" ({} mismatched nodes)", m.size()));
}

std::vector<std::optional<Strategy>> read_placements_json(std::string_view text,
                                                          std::string_view origin,
                                                          const Graph& g, const Mesh& mesh) {
  ParsedPlacements r = parse_placements_doc(text, origin, g, mesh);
  if (!r.node_errors.empty()) throw std::runtime_error(format_mismatches(origin, r.node_errors));
  return std::move(r.wanted);
}

PlacementsMatch match_placements(ShardingOptimizer& opt, std::string_view text,
                                 std::string_view origin, bool require_all) {
  const Graph& g = opt.graph();
  ParsedPlacements parsed = parse_placements_doc(text, origin, g, opt.mesh());
  PlacementsMatch m;
  m.writer_version = parsed.writer_version;
  m.mismatches = std::move(parsed.node_errors);
  if (!parsed.fingerprint.empty() && parsed.fingerprint != graph_fingerprint(g))
    m.warnings.push_back(fmt::format(
        "{}: saved for another graph (fingerprint {}, this graph {}); nodes are matched by name",
        origin, parsed.fingerprint, graph_fingerprint(g)));
  // The default policy evaluates recomputing placements on the problem with recomputation.
  if (!parsed.recompute.empty()) opt.set_recompute_escalated(true);
  m.choice = opt.match_strategies(parsed.wanted);
  const BuiltProblem& bp = opt.problem();
  if (!parsed.recompute.empty()) {
    if (bp.recompute_regions.empty())
      m.warnings.push_back(fmt::format("{}: the placements recompute {} nodes; under --recompute {} they are "
                                       "evaluated kept", origin, parsed.recompute.size(),
                                       recompute_policy_name(opt.options().recompute)));
    else
      try {
        set_recomputed_nodes(g, bp, parsed.recompute, m.choice);
      } catch (const std::runtime_error& e) {
        m.mismatches.push_back(fmt::format("/recompute: {}", e.what()));
      }
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& w = parsed.wanted[static_cast<size_t>(i)];
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0 || m.choice[static_cast<size_t>(v)] >= 0) continue;
    const std::string where = "/placements/" + g.node(i).name;
    if (w) {
      const size_t n = bp.strategies[static_cast<size_t>(v)].size();
      m.mismatches.push_back(fmt::format(
          "{}: output {}, inputs [{}] matches none of the node's {} strateg{}", where,
          output_spec_string(*w), spec_list(w->inputs), n, n == 1 ? "y" : "ies"));
    } else if (require_all) {
      m.mismatches.push_back(fmt::format("{}: missing (the node is in the graph)", where));
    }
  }
  return m;
}

Plan placements_plan(ShardingOptimizer& opt, std::string_view text, std::string_view origin) {
  PlacementsMatch m = match_placements(opt, text, origin, /*require_all=*/true);
  if (!m.mismatches.empty()) throw std::runtime_error(format_mismatches(origin, m.mismatches));
  for (size_t v = 0; v < m.choice.size(); ++v)
    if (m.choice[v] < 0)  // an auxiliary problem node nothing decides (cannot happen today)
      throw std::runtime_error(fmt::format("{}: problem node {} has no strategy", origin, v));
  Plan plan = opt.evaluate(m.choice);
  // Evaluation alone proves nothing about optimality: the trivial bound (costs are >= 0).
  plan.status = SolveStatus::kFeasible;
  plan.lower_bound_us = 0;
  plan.gap = plan.objective_us > 0 ? 1.0 : 0.0;
  plan.warnings.insert(plan.warnings.end(), m.warnings.begin(), m.warnings.end());
  plan.warnings.push_back(fmt::format("placements loaded from {}: evaluated, not solved", origin));
  if (plan.memory_limit_bytes > 0 && plan.peak_memory_bytes > plan.memory_limit_bytes)
    plan.warnings.push_back(fmt::format("the loaded plan's peak memory {} exceeds the limit {}",
                                        plan.peak_memory_bytes, plan.memory_limit_bytes));
  opt.set_solution(plan, m.choice);
  return plan;
}

Plan load_placements(ShardingOptimizer& opt, const std::string& path) {
  return placements_plan(opt, read_text_file(path), path);
}

void save_placements(const ShardingOptimizer& opt, const std::string& path) {
  if (!opt.solution() || !opt.solution()->has_solution)
    throw std::runtime_error(fmt::format("{}: cannot save placements: no solution", path));
  ScheduleOptions schedule;
  schedule.planned_paths = opt.options().comm_model == CommModel::kNccl;
  write_file_atomic(path, write_placements_json(*opt.solution(), opt.graph(), opt.mesh(), schedule));
}

}  // namespace autoshard

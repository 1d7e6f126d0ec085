/// `autoshard strategies` (hidden): the sharding strategies autoshard enumerates for the op
/// nodes of a graph on a mesh, as JSON.  It exists for cross-checks against other planners'
/// strategy lists (tests/python/test_dtensor_crosscheck.py compares with DTensor's).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "planner/recipes.h"
#include "cli/common.h"
#include "strategy/strategy.h"

namespace autoshard::cli {

namespace {

struct StrategiesArgs {
  GraphSource src;
  MeshSource mesh;
  std::vector<std::string> nodes;
};

/// {"node": {"op": ..., "strategies": [{"outputs": [...], "inputs": [...]}]}} for every op node
/// (or the ones named), in graph order.  A context-parallel attention strategy adds
/// "context_parallel": {mesh_dim, kind, load_balance}.
void run_strategies(const StrategiesArgs& a) {
  Graph g = load_graph(a.src);
  Mesh mesh = make_mesh(a.mesh);
  std::vector<NodeIdx> which;
  if (a.nodes.empty()) {
    for (NodeIdx i = 0; i < static_cast<NodeIdx>(g.nodes.size()); ++i)
      if (g.node(i).kind == NodeKind::kOp) which.push_back(i);
  } else {
    for (const std::string& n : a.nodes) {
      auto idx = g.find(n);
      if (!idx) throw std::invalid_argument(fmt::format("--node: no node '{}' in the graph", n));
      which.push_back(*idx);
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  StrategyOptions so;  // the planner's (planner/problem_builder.cc prepare_nodes)
  so.nested_view_dims = nested_view_dims(mesh);
  for (NodeIdx i : which) {
    const Node& n = g.node(i);
    NodeStrategies ns = enumerate_strategies(g, i, mesh, so);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Strategy& s : ns.strategies) {
      nlohmann::ordered_json e;
      e["outputs"] = nlohmann::ordered_json::array();
      for (const ShardingSpec& o : s.outputs) e["outputs"].push_back(o.to_string());
      e["inputs"] = nlohmann::ordered_json::array();
      for (const ShardingSpec& in : s.inputs) e["inputs"].push_back(in.to_string());
      if (s.cp.active())  // ring and all-gather attention share their specs
        e["context_parallel"] = {{"mesh_dim", mesh.dim(s.cp.mesh_dim).name},
                                 {"kind", std::string(cp_kind_name(s.cp.kind))},
                                 {"load_balance", s.cp.load_balance}};
      list.push_back(e);
    }
    out[n.name] = {{"op", n.op}, {"fallback", ns.fallback}, {"strategies", list}};
  }
  std::cout << out.dump() << "\n";
}

}  // namespace

void register_strategies(CLI::App& app) {
  auto a = std::make_shared<StrategiesArgs>();
  CLI::App* sub = app.add_subcommand("strategies", "list the sharding strategies of a graph's ops (JSON)");
  sub->group("");  // hidden: a cross-checking aid
  add_graph_options(sub, a->src, "mlp");
  add_mesh_options(sub, a->mesh, "2", "");
  sub->add_option("--node", a->nodes, "only these nodes (repeatable)");
  sub->callback([a] { run_strategies(*a); });
}

}  // namespace autoshard::cli

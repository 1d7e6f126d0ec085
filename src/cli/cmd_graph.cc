/// `autoshard graph`: summary of a model's training graph.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cost/compute.h"
#include "strategy/strategy.h"

namespace autoshard::cli {

namespace {

struct GraphArgs {
  GraphSource src;
  bool json = false;
};

void run_graph(const GraphArgs& a) {
  Graph g = load_graph(a.src);
  std::map<std::string, int64_t> per_phase, per_kind;
  std::map<std::string, int64_t> ops;
  std::map<std::string, int64_t> no_rule;  // ops the planner can only replicate
  double flops = 0;
  for (const Node& n : g.nodes) {
    ++per_kind[std::string(node_kind_name(n.kind))];
    if (n.kind != NodeKind::kOp) continue;
    ++per_phase[std::string(phase_name(n.phase))];
    ++ops[n.op];
    if (!has_rule(n.op)) ++no_rule[n.op];
    std::vector<TensorMeta> in;
    for (const TensorRef& r : n.inputs) in.push_back(g.meta(r));
    flops += op_flops(n, in, n.outputs);
  }
  const int64_t params = g.parameter_count();
  if (a.json) {
    nlohmann::ordered_json j;
    j["name"] = g.name;
    j["nodes"] = g.size();
    j["nodes_per_kind"] = per_kind;
    j["ops_per_phase"] = per_phase;
    j["op_histogram"] = ops;
    j["parameters"] = params;
    j["flops_per_step"] = flops;
    j["ops_without_rule"] = no_rule;
    std::cout << j.dump(2) << "\n";
    return;
  }
  fmt::print("graph {}: {} nodes\n", g.name, g.size());
  for (const auto& [k, c] : per_kind) fmt::print("  {:<10} {:>7}\n", k, c);
  fmt::print("ops per phase:\n");
  for (const auto& [k, c] : per_phase) fmt::print("  {:<10} {:>7}\n", k, c);
  fmt::print("parameters: {} ({:.3f} B)\n", params, static_cast<double>(params) / 1e9);
  fmt::print("FLOPs per step: {:.4e}\n", flops);
  std::vector<std::pair<int64_t, std::string>> hist;
  for (const auto& [op, c] : ops) hist.push_back({-c, op});
  std::sort(hist.begin(), hist.end());
  fmt::print("op histogram ({} distinct ops):\n", hist.size());
  for (const auto& [c, op] : hist) fmt::print("  {:<48} {:>7}\n", op, -c);
  if (no_rule.empty()) {
    fmt::print("ops without a sharding rule: none\n");
  } else {
    fmt::print("ops without a sharding rule ({}; planned replicated):\n", no_rule.size());
    for (const auto& [op, c] : no_rule) fmt::print("  {:<48} {:>7}\n", op, c);
  }
}

}  // namespace

void register_graph(CLI::App& app) {
  auto a = std::make_shared<GraphArgs>();
  CLI::App* sub = app.add_subcommand("graph", "summarize a model's training graph");
  add_graph_options(sub, a->src, "llama3-8b");
  sub->add_flag("--json", a->json, "print the summary as JSON");
  sub->callback([a] { run_graph(*a); });
}

}  // namespace autoshard::cli

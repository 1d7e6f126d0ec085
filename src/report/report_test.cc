// report.html, the Chrome trace and the Graphviz wrapper on real plans of built-in models.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"
#include "report/graph_svg.h"
#include "report/report.h"
#include "report/report_data.h"
#include "report/trace.h"

namespace autoshard {
namespace {

struct Planned {
  ShardingOptimizer opt;
  Plan plan;
};

Planned plan_model(const std::string& model, int64_t layers,
                   RecomputePolicy recompute = RecomputePolicy::kNone) {
  ModelOptions mo;
  mo.layers = layers;
  if (model != "mlp") {
    mo.batch = 2;
    mo.seq = 128;
  }
  PlannerOptions po;
  po.time_limit_s = 20;
  po.recompute = recompute;
  ShardingOptimizer opt(build_model(model, mo), Mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100")), po);
  Plan plan = opt.get_solution();
  return {std::move(opt), std::move(plan)};
}

/// The JSON blob of a report page.
nlohmann::json blob(const std::string& html) {
  const std::string open = "<script id=\"report-data\" type=\"application/json\">";
  size_t a = html.find(open);
  EXPECT_NE(a, std::string::npos);
  a += open.size();
  size_t b = html.find("</script>", a);
  return nlohmann::json::parse(html.substr(a, b - a));
}

TEST(GraphSvg, LaysOutDotText) {
  std::string svg = render_dot_svg("digraph { a [id=\"n1\"]; b; a -> b [label=\"x\"]; }");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("id=\"n1\""), std::string::npos);
  EXPECT_EQ(svg.find("<!--"), std::string::npos);
  EXPECT_EQ(svg.find("<?xml"), std::string::npos);
  EXPECT_EQ(render_dot_svg("digraph { a -> b; }"), render_dot_svg("digraph { a -> b; }"));
  EXPECT_THROW(render_dot_svg("digraph { a -> "), std::runtime_error);
  EXPECT_EQ(dot_quote("a\"b\nc"), "\"a\\\"b\\nc\"");
}

TEST(Report, ModulePattern) {
  EXPECT_EQ(module_pattern("layers.3.attention.wq"), "layers.*.attention.wq");
  EXPECT_EQ(module_pattern("output"), "output");
  EXPECT_EQ(module_pattern(""), "");
}

TEST(Report, SelfContainedDeterministicAndComplete) {
  Planned p = plan_model("llama3-1b", 2);
  ASSERT_TRUE(p.plan.has_solution);
  const std::string html = render_report_html(p.opt, p.plan);
  EXPECT_EQ(html, render_report_html(p.opt, p.plan));  // same plan, same bytes
  // No external resources: no src/href to anything but a data: URL.
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<link rel=\"stylesheet\""), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  nlohmann::json d = blob(html);
  const Graph& g = p.opt.graph();
  int64_t params = 0, planned = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    params += g.node(i).kind == NodeKind::kParameter;
    planned += p.plan.nodes[static_cast<size_t>(i)].has_value();
  }
  EXPECT_EQ(d["parameters"].size(), static_cast<size_t>(params));
  EXPECT_EQ(d["header"]["parameter_tensors"], params);
  EXPECT_EQ(d["nodes"].size(), static_cast<size_t>(planned));
  StepSimulation sim = simulate_step(p.opt, p.plan);
  EXPECT_NEAR(d["simulation"]["step_us"].get<double>(), sim.step_us, 1e-6 * sim.step_us);
  // Two layers with identical strategies collapse into one drawn group of two.
  bool collapsed = false;
  for (const auto& grp : d["graph"]["groups"])
    if (grp["count"].get<int>() >= 2 && grp.contains("svg")) collapsed = true;
  EXPECT_TRUE(collapsed);
  // Every drawn node has its strategy table with exactly one chosen row.
  ASSERT_FALSE(d["strategies"].empty());
  for (const auto& [idx, t] : d["strategies"].items()) {
    int chosen = 0;
    for (const auto& r : t["rows"]) chosen += r[7].get<bool>();
    EXPECT_EQ(chosen, 1) << idx;
    bool drawn = false;
    for (const auto& grp : d["graph"]["groups"])
      if (grp.contains("svg") &&
          grp["svg"].get<std::string>().find("id=\"n" + idx + "\"") != std::string::npos)
        drawn = true;
    EXPECT_TRUE(drawn) << idx;
  }
  EXPECT_FALSE(d["breakdown"]["op"].empty());
  EXPECT_EQ(d["breakdown"]["phase"].size(), 3u);  // forward, backward, optimizer
  EXPECT_EQ(d["timeline"]["streams"].size(), 3u);  // compute + 2 mesh dims
  EXPECT_FALSE(d["memory"]["points"].empty());
}

// The graph's eager islands are listed with the planned nodes inside each (a module path and
// its submodules, not a sibling that shares the prefix).
TEST(Report, ListsEagerIslands) {
  ModelOptions mo;
  mo.layers = 2;
  mo.batch = 2;
  mo.seq = 128;
  Graph g = build_model("llama3-1b", mo);
  std::string island;
  for (const Node& n : g.nodes)
    if (n.module_path.ends_with(".feed_forward")) {
      island = n.module_path;
      break;
    }
  ASSERT_FALSE(island.empty());
  int64_t inside = 0;
  for (const Node& n : g.nodes)
    inside += n.kind == NodeKind::kOp &&
              (n.module_path == island || n.module_path.starts_with(island + "."));
  g.islands = {{island, {"model.py:7"}}, {"", {}}};  // "": the whole model
  PlannerOptions po;
  po.time_limit_s = 20;
  ShardingOptimizer opt(std::move(g), Mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100")), po);
  Plan plan = opt.get_solution();
  ASSERT_TRUE(plan.has_solution);
  nlohmann::json d = blob(render_report_html(opt, plan));
  ASSERT_EQ(d["islands"].size(), 2u);
  EXPECT_EQ(d["islands"][1]["nodes"].get<size_t>(), d["nodes"].size());
  EXPECT_EQ(d["islands"][0]["module"], island);
  EXPECT_EQ(d["islands"][0]["sources"], nlohmann::json::array({"model.py:7"}));
  EXPECT_GE(d["islands"][0]["nodes"].get<int64_t>(), inside);
  EXPECT_GT(inside, 0);
  EXPECT_GT(d["islands"][0]["compute_us"].get<double>(), 0);
  // no island, no entries
  Planned p = plan_model("llama3-1b", 1);
  EXPECT_TRUE(blob(render_report_html(p.opt, p.plan))["islands"].empty());
}

// Recomputed ops appear twice on the compute track, the second time as "recompute"; the
// report's node table keeps their forward start.
TEST(Trace, RecomputedOpsAreLabelled) {
  Planned p = plan_model("llama3-8b", 1, RecomputePolicy::kFull);
  ASSERT_TRUE(p.plan.has_solution);
  ASSERT_FALSE(p.plan.recomputed_nodes.empty());
  const nlohmann::json t = nlohmann::json::parse(chrome_trace_json(p.opt, p.plan));
  const std::set<std::string> listed(p.plan.recomputed_nodes.begin(),
                                     p.plan.recomputed_nodes.end());
  std::map<std::string, int> seen;  // node -> compute events (ops with no time have none)
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 0) ++seen[e["args"]["node"].get<std::string>()];
  size_t recomputed = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != 0 || e["cat"] != "recompute") continue;
    const std::string node = e["args"]["node"].get<std::string>();
    EXPECT_TRUE(listed.count(node)) << node;
    EXPECT_EQ(seen[node], 2) << node;  // its forward run and its recomputation
    ++recomputed;
  }
  EXPECT_GT(recomputed, 0u);
}

TEST(Trace, OneTrackPerStreamWithEveryEvent) {
  Planned p = plan_model("mlp", 2);
  ASSERT_TRUE(p.plan.has_solution);
  StepSimulation sim = simulate_step(p.opt, p.plan);
  const std::string text = chrome_trace_json(p.opt, p.plan, sim);
  EXPECT_EQ(text, chrome_trace_json(p.opt, p.plan));
  nlohmann::json t = nlohmann::json::parse(text);
  ASSERT_TRUE(t["traceEvents"].is_array());
  size_t expected = 0;
  for (const auto& s : sim.streams) expected += s.size();
  size_t complete = 0, names = 0;
  double last_end = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") ++names;
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_TRUE(e["args"].contains("node"));
    const int tid = e["tid"].get<int>();
    if (tid > 0) {
      EXPECT_TRUE(e["args"].contains("bytes"));
      EXPECT_TRUE(e["args"].contains("from"));
      EXPECT_TRUE(e["args"].contains("to"));
    } else {
      EXPECT_TRUE(e["args"].contains("output"));
    }
    last_end = std::max(last_end, e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_EQ(complete, expected);
  EXPECT_EQ(names, sim.streams.size());
  EXPECT_NEAR(last_end, sim.step_us, 1e-2);
}

}  // namespace
}  // namespace autoshard

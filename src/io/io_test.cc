// Tests for src/io: placements JSON (AutoParallel's save_placements schema) and the plan summary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "io/placements_json.h"
#include "ir/graph_json.h"
#include "mesh/hardware.h"
#include "io/plan_json.h"
#include "models/models.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;

/// A one-layer GPT-2 on a 2x2 mesh: small, has multi-output ops (native_layer_norm) and
/// solves in well under a second.
struct Fixture {
  Mesh mesh{{2, 2}, {"dp", "tp"}, *hardware_preset("h100")};
  ShardingOptimizer so;
  Plan plan;
  Fixture() : so(small_graph(), mesh, options()), plan(so.get_solution()) {}
  static Graph small_graph() {
    ModelOptions mo;
    mo.layers = 1;
    mo.batch = 2;
    mo.seq = 64;
    return build_model("gpt2", mo);
  }
  static PlannerOptions options() {
    PlannerOptions o;
    o.objective = Objective::kAdditive;  // these tests pin the additive formulation
    o.memory_limit_bytes = 0;
    return o;
  }
  const Graph& g() const { return so.graph(); }
  std::string text() const { return write_placements_json(plan, g(), mesh); }
  nlohmann::json json() const { return nlohmann::json::parse(text()); }
  /// The message of read_placements_json on `j`, or "" when it succeeds.
  std::string error_of(const nlohmann::json& j) const {
    try {
      read_placements_json(j.dump(), "saved.json", g(), mesh);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
  /// Name of the first planned node with more than one output.
  std::string multi_output_node() const {
    for (NodeIdx i = 0; i < g().size(); ++i)
      if (plan.nodes[static_cast<size_t>(i)] && g().node(i).outputs.size() > 1)
        return g().node(i).name;
    return "";
  }
  /// Name of the first planned node with at least one input.
  std::string op_with_inputs() const {
    for (NodeIdx i = 0; i < g().size(); ++i)
      if (plan.nodes[static_cast<size_t>(i)] && g().node(i).kind == NodeKind::kOp &&
          !g().node(i).inputs.empty())
        return g().node(i).name;
    return "";
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

TEST(PlacementsJson, SchemaAndDeterminism) {
  Fixture& f = fx();
  ASSERT_TRUE(f.plan.has_solution);
  nlohmann::json j = f.json();
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["mesh_shape"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(j["mesh_dim_names"], nlohmann::json::array({"dp", "tp"}));
  ASSERT_TRUE(j["placements"].is_object());
  int planned = 0;
  for (NodeIdx i = 0; i < f.g().size(); ++i) {
    if (!f.plan.nodes[static_cast<size_t>(i)]) continue;
    ++planned;
    const Node& n = f.g().node(i);
    ASSERT_TRUE(j["placements"].contains(n.name)) << n.name;
    const auto& e = j["placements"][n.name];
    ASSERT_TRUE(e["output"].is_string());
    ASSERT_TRUE(e["inputs"].is_array());
    EXPECT_EQ(e["inputs"].size(), n.inputs.size()) << n.name;
  }
  EXPECT_EQ(static_cast<int>(j["placements"].size()), planned);
  EXPECT_EQ(f.text(), f.text());
  EXPECT_EQ(f.text().back(), '\n');
}

TEST(PlacementsJson, RoundTripGivesTheSameObjective) {
  Fixture& f = fx();
  auto wanted = read_placements_json(f.text(), "saved.json", f.g(), f.mesh);
  ASSERT_EQ(wanted.size(), static_cast<size_t>(f.g().size()));
  auto choice = f.so.match_strategies(wanted);
  for (size_t v = 0; v < choice.size(); ++v) ASSERT_GE(choice[v], 0) << "problem node " << v;
  Plan again = f.so.evaluate(choice);
  EXPECT_DOUBLE_EQ(again.objective_us, f.plan.objective_us);
  EXPECT_DOUBLE_EQ(again.compute_us, f.plan.compute_us);
  EXPECT_DOUBLE_EQ(again.comm_us, f.plan.comm_us);
  EXPECT_EQ(again.peak_memory_bytes, f.plan.peak_memory_bytes);
  // Every node gets back exactly the strategy that was saved.
  for (NodeIdx i = 0; i < f.g().size(); ++i) {
    const auto& a = f.plan.nodes[static_cast<size_t>(i)];
    const auto& b = again.nodes[static_cast<size_t>(i)];
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a) {
      EXPECT_EQ(a->chosen.name(), b->chosen.name()) << f.g().node(i).name;
    }
  }
  // And writing the re-evaluated plan gives the same bytes.
  EXPECT_EQ(write_placements_json(again, f.g(), f.mesh), f.text());
}

// A view repeating an earlier view of the same tensor reads that view's redistributed input:
// the schedule says which ("twins", planner/twin_views.h), for the runtime to reuse it.
TEST(PlacementsJson, ScheduleNamesTwinViews) {
  const Graph g = read_graph_json(R"({"format": "autoshard-graph", "version": 1, "nodes": [
    {"name": "x", "kind": "input", "outputs": [{"shape": [8, 4], "dtype": "f32"}]},
    {"name": "v1", "kind": "op", "op": "view", "inputs": ["x"], "attrs": {"size": [4, 8]},
     "outputs": [{"shape": [4, 8], "dtype": "f32"}]},
    {"name": "v2", "kind": "op", "op": "view", "inputs": ["x"], "attrs": {"size": [4, 8]},
     "outputs": [{"shape": [4, 8], "dtype": "f32"}]},
    {"name": "a", "kind": "op", "op": "add", "inputs": ["v1", "v2"],
     "outputs": [{"shape": [4, 8], "dtype": "f32"}]},
    {"name": "output", "kind": "output", "inputs": ["a"]}]})",
                                  "<test>");
  const Mesh mesh({2}, {"dp"}, *hardware_preset("h100"));
  ShardingOptimizer so(g, mesh, PlannerOptions{});
  const Plan plan = so.get_solution();
  ASSERT_TRUE(plan.has_solution);
  const auto j = nlohmann::json::parse(write_placements_json(plan, g, mesh));
  EXPECT_EQ(j["schedule"]["twins"], nlohmann::json({{"v2", "v1"}}));
  EXPECT_EQ(j["placements"]["v1"], j["placements"]["v2"]);
}

// Every schedule entry names where a rank waits for it (version 6): a use before its consumer
// (planner/prefetch_schedule.h wait_point, where the simulator's op waits), a gradient
// reduction at the step's end (null).
TEST(PlacementsJson, ScheduleEntriesNameTheirWaitPoints) {
  Fixture& f = fx();
  const nlohmann::json s = f.json()["schedule"];
  EXPECT_EQ(s["version"], 6);
  size_t uses = 0;
  for (const char* key : {"prefetch", "issue"})
    for (const auto& e : s[key]) {
      const std::string edge = e["edge"];
      EXPECT_EQ(e["wait_before"], edge.substr(0, edge.rfind(':'))) << edge;
      ++uses;
    }
  EXPECT_GT(uses, 0u);
  for (const auto& e : s["reduce"]) EXPECT_TRUE(e["wait_before"].is_null()) << e["edge"];
}

TEST(PlacementsJson, TupleOutputs) {
  Fixture& f = fx();
  std::string name = f.multi_output_node();
  ASSERT_FALSE(name.empty()) << "the test model has no multi-output node";
  nlohmann::json j = f.json();
  const std::string out = j["placements"][name]["output"];
  EXPECT_EQ(out.front(), '(') << out;
  EXPECT_EQ(out.back(), ')') << out;
  EXPECT_THAT(out, HasSubstr(", "));
  // The writer's form reads back to the same specs.
  auto wanted = read_placements_json(j.dump(), "saved.json", f.g(), f.mesh);
  const Node& n = f.g().node(*f.g().find(name));
  const auto& w = wanted[static_cast<size_t>(*f.g().find(name))];
  ASSERT_TRUE(w);
  ASSERT_EQ(w->outputs.size(), n.outputs.size());
  EXPECT_EQ(output_spec_string(*w), out);
}

TEST(PlacementsJson, OutputSpecString) {
  Strategy s;
  s.outputs.push_back({parse_placements("S(0)S(1)"), {}});
  EXPECT_EQ(output_spec_string(s), "S(0)S(1)");
  s.outputs.push_back({parse_placements("RR"), {}});
  EXPECT_EQ(output_spec_string(s), "(S(0)S(1), RR)");
}

TEST(PlacementsJson, TupleWithNoneAndOldPartialSpelling) {
  Fixture& f = fx();
  std::string name = f.multi_output_node();
  ASSERT_FALSE(name.empty());
  const Node& n = f.g().node(*f.g().find(name));
  nlohmann::json j = f.json();
  // AutoParallel prints missing outputs as None; parse them as replicated.
  std::string out = "(RR";
  for (size_t k = 1; k < n.outputs.size(); ++k) out += ", None";
  out += ")";
  j["placements"][name]["output"] = out;
  auto wanted = read_placements_json(j.dump(), "saved.json", f.g(), f.mesh);
  const auto& w = wanted[static_cast<size_t>(*f.g().find(name))];
  ASSERT_TRUE(w);
  for (const ShardingSpec& s : w->outputs) EXPECT_EQ(s.to_string(), "RR");
}

TEST(PlacementsJsonErrors, MeshMismatch) {
  Fixture& f = fx();
  nlohmann::json j = f.json();
  j["mesh_shape"] = {4, 1};
  std::string m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /mesh_shape"));
  EXPECT_THAT(m, HasSubstr("4x1"));
  j = f.json();
  j["mesh_dim_names"] = {"x", "y"};
  EXPECT_THAT(f.error_of(j), HasSubstr("saved.json: /mesh_dim_names"));
}

TEST(PlacementsJsonErrors, UnknownNode) {
  Fixture& f = fx();
  nlohmann::json j = f.json();
  j["placements"]["no_such_node"] = {{"output", "RR"}, {"inputs", nlohmann::json::array()}};
  std::string m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /placements/no_such_node"));
  EXPECT_THAT(m, HasSubstr("no such node"));
}

TEST(PlacementsJsonErrors, WrongNumberOfInputSpecs) {
  Fixture& f = fx();
  std::string name = f.op_with_inputs();
  ASSERT_FALSE(name.empty());
  nlohmann::json j = f.json();
  j["placements"][name]["inputs"].push_back("RR");
  std::string m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /placements/" + name + "/inputs"));
  EXPECT_THAT(m, HasSubstr("input specs"));
}

TEST(PlacementsJsonErrors, WrongNumberOfOutputSpecs) {
  Fixture& f = fx();
  std::string name = f.multi_output_node();
  nlohmann::json j = f.json();
  j["placements"][name]["output"] = "RR";
  EXPECT_THAT(f.error_of(j), HasSubstr("saved.json: /placements/" + name + "/output"));
}

TEST(PlacementsJsonErrors, BadPlacementString) {
  Fixture& f = fx();
  std::string name = f.op_with_inputs();
  nlohmann::json j = f.json();
  j["placements"][name]["output"] = "S(x)R";
  std::string m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /placements/" + name + "/output"));
  j = f.json();
  j["placements"][name]["inputs"][0] = "Q";
  m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /placements/" + name + "/inputs/0"));
  j = f.json();
  j["placements"][name]["inputs"][0] = 7;
  m = f.error_of(j);
  EXPECT_THAT(m, HasSubstr("saved.json: /placements/" + name + "/inputs/0"));
  // Placements for a mesh of another rank.
  j = f.json();
  j["placements"][name]["output"] = "R";
  EXPECT_THAT(f.error_of(j), HasSubstr("saved.json: /placements/" + name + "/output"));
}

TEST(PlacementsJsonErrors, MalformedFiles) {
  Fixture& f = fx();
  std::string t = f.text();
  try {
    read_placements_json(t.substr(0, t.size() / 2), "saved.json", f.g(), f.mesh);
    FAIL() << "truncated file accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("saved.json: malformed JSON at line"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  nlohmann::json j = f.json();
  j["version"] = 2;
  EXPECT_THAT(f.error_of(j), HasSubstr("saved.json: /version"));
  j = f.json();
  j.erase("placements");
  EXPECT_THAT(f.error_of(j), HasSubstr("saved.json: /placements"));
  EXPECT_THAT(f.error_of(nlohmann::json::array()), HasSubstr("saved.json: /"));
}

TEST(PlanSummaryJson, Fields) {
  Fixture& f = fx();
  nlohmann::ordered_json j = plan_summary_json(f.plan, f.g(), f.mesh);
  for (const char* k : {"graph", "mesh", "status", "has_solution", "objective_us", "lower_bound_us",
                        "gap", "compute_us", "comm_us", "peak_memory_bytes", "memory_limit_bytes",
                        "checked", "problem", "phase_seconds", "warnings", "parameters"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["status"], "optimal");
  EXPECT_EQ(j["has_solution"], true);
  EXPECT_DOUBLE_EQ(j["objective_us"].get<double>(), f.plan.objective_us);
  EXPECT_NEAR(j["compute_us"].get<double>() + j["comm_us"].get<double>(),
              j["objective_us"].get<double>(), 1e-6 * f.plan.objective_us);
  EXPECT_LE(j["lower_bound_us"].get<double>(), j["objective_us"].get<double>() * (1 + 1e-9));
  EXPECT_EQ(j["peak_memory_bytes"].get<int64_t>(), f.plan.peak_memory_bytes);
  EXPECT_GT(j["peak_memory_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["mesh"]["shape"], nlohmann::ordered_json::array({2, 2}));
  EXPECT_EQ(j["mesh"]["hardware"], f.mesh.hardware().name);
  for (const char* k : {"graph_nodes", "nodes", "edges", "alpa_variables", "layer_classes",
                        "clustered_nodes", "reduced_nodes", "reduced_edges", "mip_variables"})
    EXPECT_TRUE(j["problem"].contains(k)) << k;
  EXPECT_EQ(j["problem"]["graph_nodes"], f.g().size());
  EXPECT_TRUE(j["phase_seconds"].is_object());
  EXPECT_FALSE(j["phase_seconds"].empty());
  // One entry per parameter, each with a placement for this 2-D mesh.
  int params = 0;
  for (NodeIdx i = 0; i < f.g().size(); ++i) params += f.g().node(i).kind == NodeKind::kParameter;
  ASSERT_EQ(static_cast<int>(j["parameters"].size()), params);
  for (const auto& p : j["parameters"]) {
    EXPECT_TRUE(p.contains("name"));
    EXPECT_TRUE(p["shape"].is_array());
    EXPECT_EQ(parse_placements(p["placement"].get<std::string>()).size(), 2u) << p.dump();
    EXPECT_TRUE(p["parallelism"].is_string());
  }
  EXPECT_FALSE(j.contains("min_peak_memory_bytes"));
}

TEST(PlanSummaryJson, NoSolutionHasNullsAndMinPeak) {
  Plan p;
  p.status = SolveStatus::kInfeasible;
  p.has_solution = false;
  p.objective_us = kInfCost;
  p.lower_bound_us = kInfCost;
  p.gap = kInfCost;
  p.memory_limit_bytes = 1000;
  p.min_peak_memory_bytes = 5000;
  Fixture& f = fx();
  nlohmann::ordered_json j = plan_summary_json(p, f.g(), f.mesh);
  EXPECT_TRUE(j["objective_us"].is_null());
  EXPECT_TRUE(j["gap"].is_null());
  EXPECT_EQ(j["has_solution"], false);
  EXPECT_EQ(j["min_peak_memory_bytes"], 5000);
  EXPECT_TRUE(j["parameters"].empty());
  // The text stays valid JSON (no inf/nan literals).
  EXPECT_TRUE(nlohmann::json::accept(j.dump()));
}

}  // namespace
}  // namespace autoshard

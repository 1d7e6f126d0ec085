// build_problem shares strategies, costs and spec lists between nodes of equal signature
// (repeated layers).  These tests recompute every node and every edge matrix on its own, from
// the strategy rules and cost functions directly, and require the same problem.
#include "planner/problem_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <string>
#include <vector>

#include "cost/compute.h"
#include "cost/memory.h"
#include "cost/redistribute.h"
#include "ir/graph_json.h"
#include "models/models.h"
#include "planner/cp_cost.h"
#include "planner/inflight_memory.h"
#include "planner/recipes.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

Graph tiny_llama(int64_t layers) {
  ModelOptions mo;
  mo.layers = layers;
  mo.batch = 4;
  mo.seq = 32;
  mo.hidden = 64;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.ffn = 128;
  mo.vocab = 96;
  return build_model("llama3-8b", mo);
}

/// Whether node i is a chain of views over a parameter or buffer.
bool is_parameter_view(const Graph& g, NodeIdx i) {
  while (g.node(i).kind == NodeKind::kOp && is_alias_op(g.node(i).op) && !g.node(i).inputs.empty())
    i = g.node(i).inputs[0].node;
  return g.node(i).kind == NodeKind::kParameter || g.node(i).kind == NodeKind::kBuffer;
}

/// Checks every problem node of `bp` against its own strategy enumeration and costing, and
/// every tensor-use edge against redistribution costs computed for it alone.
void expect_matches_per_node_build(const Graph& g, const Mesh& mesh, const PlannerOptions& o,
                                   const BuiltProblem& bp, const std::string& pinned) {
  StrategyOptions so;
  so.require_divisible = o.require_divisible;
  int checked_nodes = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx p = bp.pnode[static_cast<size_t>(i)];
    if (p < 0) continue;
    const Node& x = g.node(i);
    const auto& got = bp.strategies[static_cast<size_t>(p)];
    const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(p)];
    EXPECT_EQ(pn.name, x.name);
    if (x.name == pinned) continue;  // fewer strategies by design
    NodeStrategies ns = enumerate_strategies(g, i, mesh, so);
    drop_dominated_cp_kinds(x, ns.strategies, mesh, o.comm_model);
    ASSERT_EQ(got.size(), ns.strategies.size()) << x.name;
    for (size_t k = 0; k < got.size(); ++k) {
      const Strategy& s = ns.strategies[k];
      ASSERT_EQ(got[k].name(), s.name()) << x.name;
      // Compute, plus a context-parallel attention's exposed K/V transfers (planner/cp_cost.h).
      const Cost c = x.kind == NodeKind::kOp ? node_cost(x, s, mesh, o.comm_model).total_us() : 0;
      EXPECT_EQ(pn.costs[k], c) << x.name << " " << s.name();
      int64_t bytes = 0;
      if (x.kind == NodeKind::kParameter && !bp.has_optimizer)
        bytes = parameter_state_bytes(s.outputs.at(0), mesh, o.optimizer);
      else if (x.kind == NodeKind::kOp && is_alias_op(x.op) &&
               (o.recompute == RecomputePolicy::kNone || o.recompute == RecomputePolicy::kIfNeeded ||
                is_parameter_view(g, i)))
        bytes = 0;
      else
        for (const ShardingSpec& out : s.outputs) bytes += out.local_bytes(mesh);
      EXPECT_EQ(pn.usages[k], bytes) << x.name << " " << s.name();
    }
    ++checked_nodes;
  }
  EXPECT_GT(checked_nodes, 100);
  int checked_edges = 0;
  for (size_t e = 0; e < bp.edges.size(); ++e) {
    const BuiltProblem::EdgeOrigin& from = bp.edge_origin[e];
    if (from.slot < 0) continue;  // gradient agreement / parameter-memory shadow edges
    const Node& consumer = g.node(from.consumer);
    if (consumer.phase == Phase::kOptimizer) continue;  // strict layouts, checked elsewhere
    const BuiltProblem::Edge& ed = bp.edges[e];
    const auto& su = bp.strategies[static_cast<size_t>(ed.u)];
    const auto& sv = bp.strategies[static_cast<size_t>(ed.v)];
    ASSERT_EQ(ed.costs->size(), su.size() * sv.size());
    for (size_t a = 0; a < su.size(); ++a)
      for (size_t b = 0; b < sv.size(); ++b) {
        const Cost want =
            redistribute_cost_us(su[a].outputs.at(static_cast<size_t>(from.producer.output)),
                                 sv[b].inputs.at(static_cast<size_t>(from.slot)), mesh, o.comm_model);
        ASSERT_EQ((*ed.costs)[a * sv.size() + b], want) << consumer.name << " slot " << from.slot;
      }
    ++checked_edges;
  }
  EXPECT_GT(checked_edges, 100);
}

TEST(ProblemBuilder, ParameterViewsAliasUnderRecomputationToo) {
  // The recomputation model counts a view of an activation apart from its base (a recomputed
  // base would otherwise stay alive through its views' backward uses), but a view of a
  // parameter -- a weight's transpose -- aliases it in every model: counted apart, it was kept
  // for the backward and multiplied by the microbatches in flight (llama3-405b's first
  // 4-layer stage: 80 GB too many at the forward/backward boundary).
  const Graph g = tiny_llama(2);
  const Mesh mesh({2, 2}, {"dp", "tp"}, h100());
  PlannerOptions keep, redo;
  keep.recompute = RecomputePolicy::kNone;
  redo.recompute = RecomputePolicy::kAuto;
  const BuiltProblem a = build_problem(g, mesh, keep, {}), b = build_problem(g, mesh, redo, {});
  int param_views = 0, activation_views = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx va = a.pnode[static_cast<size_t>(i)], vb = b.pnode[static_cast<size_t>(i)];
    if (va < 0 || vb < 0) continue;
    const Node& x = g.node(i);
    const auto& ua = a.problem.nodes[static_cast<size_t>(va)].usages;
    const auto& ub = b.problem.nodes[static_cast<size_t>(vb)].usages;
    const bool view = x.kind == NodeKind::kOp && is_alias_op(x.op);
    if (view && is_parameter_view(g, i)) {
      ++param_views;
      EXPECT_EQ(ub, std::vector<int64_t>(ub.size(), 0)) << x.name;
    } else if (view) {
      activation_views += std::any_of(ub.begin(), ub.end(), [](int64_t u) { return u > 0; });
    } else if (x.kind != NodeKind::kOp || x.phase != Phase::kForward) {
      EXPECT_EQ(ua, ub) << x.name;  // nothing else changes
    }
  }
  EXPECT_GT(param_views, 10);      // every weight's transpose, per layer
  EXPECT_GT(activation_views, 10);  // still counted apart
}

TEST(ProblemBuilder, SharedTemplatesEqualAPerNodeBuild) {
  const Graph g = tiny_llama(3);
  const Mesh mesh({2, 2}, {"dp", "tp"}, h100());
  PlannerOptions o;
  const BuiltProblem bp = build_problem(g, mesh, o, {});
  expect_matches_per_node_build(g, mesh, o, bp, "");
}

TEST(ProblemBuilder, APinnedNodeOfARepeatedLayerIsBuiltOnItsOwn) {
  const Graph g = tiny_llama(3);
  const Mesh mesh({2, 2}, {"dp", "tp"}, h100());
  PlannerOptions o;
  const BuiltProblem free = build_problem(g, mesh, o, {});
  // The middle layer's wq weight: its twins in layers 0 and 2 keep every strategy.
  const std::string name = "layers.1.attention.wq.weight";
  ASSERT_TRUE(g.find(name).has_value());
  Constraint pin;
  pin.name = "pin";
  pin.node = name;
  pin.output = parse_placements("S(0)S(1)");
  const BuiltProblem bp = build_problem(g, mesh, o, {pin});
  const PNodeIdx p = bp.pnode[static_cast<size_t>(*g.find(name))];
  ASSERT_EQ(bp.strategies[static_cast<size_t>(p)].size(), 1u);
  EXPECT_EQ(bp.strategies[static_cast<size_t>(p)][0].outputs[0].placements, pin.output);
  const PNodeIdx twin = bp.pnode[static_cast<size_t>(*g.find("layers.2.attention.wq.weight"))];
  EXPECT_EQ(bp.strategies[static_cast<size_t>(twin)].size(),
            free.strategies[static_cast<size_t>(twin)].size());
  EXPECT_GT(free.strategies[static_cast<size_t>(twin)].size(), 1u);
  expect_matches_per_node_build(g, mesh, o, bp, name);
}

// x -> relu -> view -> t -> mm(x, t) -> sum: the view and the transpose alias relu's output,
// so they hold no bytes and relu's output stays live until the mm that reads the transpose.
TEST(ProblemBuilder, ViewsHoldNoBytesAndKeepTheirBaseAlive) {
  const Graph g = read_graph_json(R"({"format": "autoshard-graph", "version": 1, "nodes": [
    {"name": "x", "kind": "input", "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "r", "kind": "op", "op": "relu", "inputs": ["x"],
     "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "v", "kind": "op", "op": "view", "inputs": ["r"], "attrs": {"size": [8, 8]},
     "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "e", "kind": "op", "op": "exp", "inputs": ["x"],
     "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "w", "kind": "op", "op": "t", "inputs": ["v"],
     "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "m", "kind": "op", "op": "mm", "inputs": ["e", "w"],
     "outputs": [{"shape": [8, 8], "dtype": "f32"}]},
    {"name": "s", "kind": "op", "op": "sum", "inputs": ["m"],
     "outputs": [{"shape": [], "dtype": "f32"}]},
    {"name": "output", "kind": "output", "inputs": ["s"]}]})",
                                  "<test>");
  const auto iv = live_intervals(g);
  const auto at = [&](const char* name) { return iv[static_cast<size_t>(*g.find(name))]; };
  using Interval = std::pair<int64_t, int64_t>;
  EXPECT_EQ(at("r"), Interval(1, 6));  // through m (index 5)
  EXPECT_EQ(at("v"), Interval(2, 5));  // through w (index 4)
  EXPECT_EQ(at("e"), Interval(3, 6));
  const Mesh mesh({1}, {"dp"}, h100());
  const BuiltProblem bp = build_problem(g, mesh, PlannerOptions{}, {});
  for (const char* view : {"v", "w"}) {
    const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(bp.pnode[*g.find(view)])];
    for (int64_t u : pn.usages) EXPECT_EQ(u, 0) << view;
  }
  const ProblemNode& relu = bp.problem.nodes[static_cast<size_t>(bp.pnode[*g.find("r")])];
  for (int64_t u : relu.usages) EXPECT_EQ(u, 8 * 8 * 4);
}

// Twin views (planner/twin_views.h): x -> relu (both cut on columns) -> two equal views, each
// the input of a column-parallel mm, which needs the whole rows.  One all-gather of relu's
// output serves both views: the plan with twins costs what the same graph with one view feeding
// both mms costs (one gather, not two), in the objective and the simulated step.
Graph two_projections(bool twin) {
  const std::string v2 = R"({"name": "v2", "kind": "op", "op": "view", "inputs": ["r"],
     "attrs": {"size": [64, 32]}, "outputs": [{"shape": [64, 32], "dtype": "f32"}]},)";
  return read_graph_json(R"({"format": "autoshard-graph", "version": 1, "nodes": [
    {"name": "x", "kind": "input", "outputs": [{"shape": [64, 32], "dtype": "f32"}]},
    {"name": "w1", "kind": "parameter", "outputs": [{"shape": [32, 32], "dtype": "f32"}]},
    {"name": "w2", "kind": "parameter", "outputs": [{"shape": [32, 32], "dtype": "f32"}]},
    {"name": "r", "kind": "op", "op": "relu", "inputs": ["x"],
     "outputs": [{"shape": [64, 32], "dtype": "f32"}]},
    {"name": "v1", "kind": "op", "op": "view", "inputs": ["r"], "attrs": {"size": [64, 32]},
     "outputs": [{"shape": [64, 32], "dtype": "f32"}]},)" +
                             (twin ? v2 : "") + R"(
    {"name": "m1", "kind": "op", "op": "mm", "inputs": ["v1", "w1"],
     "outputs": [{"shape": [64, 32], "dtype": "f32"}]},
    {"name": "m2", "kind": "op", "op": "mm", "inputs": [")" + (twin ? "v2" : "v1") + R"(", "w2"],
     "outputs": [{"shape": [64, 32], "dtype": "f32"}]},
    {"name": "a", "kind": "op", "op": "add", "inputs": ["m1", "m2"],
     "outputs": [{"shape": [64, 32], "dtype": "f32"}]},
    {"name": "output", "kind": "output", "inputs": ["a"]}]})",
                         "<test>");
}

TEST(ProblemBuilder, TwinViewsShareOneRedistribution) {
  const Mesh mesh({4}, {"tp"}, h100());
  std::vector<Plan> plans;
  for (bool twin : {false, true}) {
    ShardingOptimizer opt(two_projections(twin), mesh, PlannerOptions{});
    for (const char* n : {"x", "r", "w1", "w2", "m1", "m2"}) {
      Constraint c;
      c.name = std::string("pin ") + n;
      c.node = n;
      c.output = parse_placements("S(1)");
      opt.add_constraint(c);
    }
    plans.push_back(opt.get_solution());
    ASSERT_TRUE(plans.back().has_solution);
    const StepSimulation sim = simulate_step(opt, plans.back());
    if (twin) {
      EXPECT_EQ(plans[1].nodes[static_cast<size_t>(*opt.graph().find("v2"))]->twin,
                *opt.graph().find("v1"));
      EXPECT_NEAR(sim.comm_us, plans[0].comm_us, 1e-9);
    } else {
      EXPECT_NEAR(sim.comm_us, plans[0].comm_us, 1e-9);
    }
  }
  EXPECT_GT(plans[0].comm_us, 0);  // the rows are gathered once
  EXPECT_NEAR(plans[1].objective_us, plans[0].objective_us, 1e-9);
  EXPECT_NEAR(plans[1].comm_us, plans[0].comm_us, 1e-9);
}

// 4-D meshes are planned while the problem stays within the bounds (the built-in MLP: about
// 1.2 million of Alpa's variables, 2 s in Release, so only in the Release pass).
TEST(ProblemBuilderLarge, SmallModelsPlanOnA4DMesh) {
  const Graph g = build_model("mlp", {});
  const Mesh mesh({2, 2, 2, 2}, {"pp", "dp", "cp", "tp"}, h100());
  PlannerOptions o;
  o.time_limit_s = 10;
  ShardingOptimizer opt(g, mesh, o);
  const Plan p = opt.get_solution();
  EXPECT_TRUE(p.has_solution);
  EXPECT_TRUE(p.checked);
}

// The 4-D mesh of issue 12: llama3-70b on 4x8x8x4 would keep tens of millions of strategies;
// it is refused with the reason (a few seconds in Release, hence *Large).
TEST(ProblemBuilderLarge, Llama70bOnA4DMeshIsRefusedWithTheReason) {
  const Graph g = build_model("llama3-70b", {});
  const Mesh mesh({4, 8, 8, 4}, {"pp", "dp", "cp", "tp"}, h100());
  try {
    build_problem(g, mesh, PlannerOptions{}, {});
    FAIL() << "built";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("problem too large: more than 6000000 sharding strategies"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("4-D mesh"), std::string::npos) << e.what();
  }
}

TEST(ProblemBuilder, ParametersGatheredOnceScaleTheirFsdpGathersAndHoldTheCopies) {
  // A pipeline stage of M = 4 microbatches whose runtime gathers its parameters at the first
  // (FSDP2 under torchtitan's PP): a redistribution out of a parameter that keeps its tp
  // placement (a gather over dp) costs 1 / M; one over tp, or out of a view, runs at each use.
  const Graph g = tiny_llama(2);
  const Mesh mesh({2, 2}, {"dp", "tp"}, h100());
  PlannerOptions per_use, once;
  per_use.optimizer_cost_scale = once.optimizer_cost_scale = 0.25;
  once.params_gathered_once = true;
  const BuiltProblem a = build_problem(g, mesh, per_use, {}), b = build_problem(g, mesh, once, {});
  ASSERT_EQ(a.edges.size(), b.edges.size());
  int scaled = 0, kept = 0;
  for (size_t k = 0; k < a.edges.size(); ++k) {
    const auto& o = a.edge_origin[k];
    const bool from_param = g.node(o.producer.node).kind == NodeKind::kParameter;
    const bool already_once = o.slot == -1 || g.node(o.consumer).phase == Phase::kOptimizer;
    const auto& ca = *a.edges[k].costs;
    const auto& cb = *b.edges[k].costs;
    const StrategyList& su = a.strategies[static_cast<size_t>(a.edges[k].u)];
    const StrategyList& sv = a.strategies[static_cast<size_t>(a.edges[k].v)];
    ASSERT_EQ(ca.size(), cb.size());
    for (size_t q = 0; q < ca.size(); ++q) {
      if (!std::isfinite(ca[q])) {
        EXPECT_FALSE(std::isfinite(cb[q]));
        continue;
      }
      bool over_dp_only = false;
      if (from_param && !already_once) {
        const ShardingSpec& have = su[q / sv.size()].outputs.at(static_cast<size_t>(o.producer.output));
        const ShardingSpec& read = sv[q % sv.size()].inputs.at(static_cast<size_t>(o.slot));
        over_dp_only = have.placements[1] == read.placements[1];
        if (!over_dp_only && ca[q] > 0) ++kept;
      }
      const double want = over_dp_only ? ca[q] * 0.25 : ca[q];
      EXPECT_NEAR(cb[q], want, 1e-9 * std::max(1.0, std::abs(ca[q]))) << g.node(o.consumer).name;
      if (over_dp_only && ca[q] > 0) ++scaled;
    }
  }
  EXPECT_GT(scaled, 0);  // some gather was priced once, so the test sees the scaling
  EXPECT_GT(kept, 0);    // and some redistribution over tp per use
  // Memory: each parameter a forward or backward op reads holds its copy gathered over dp
  // (still split over tp) on top of its shards while the parameter lives.
  const auto params = gathered_parameters(g);
  ASSERT_FALSE(params.empty());
  for (NodeIdx i : params) {
    const PNodeIdx v = a.pnode[static_cast<size_t>(i)];
    const StrategyList& sl = a.strategies[static_cast<size_t>(v)];
    for (size_t q = 0; q < sl.size(); ++q) {
      ShardingSpec whole = sl[q].outputs[0];
      const bool over_dp = whole.placements[0].is_shard();
      whole.placements[0] = Placement::replicate();
      EXPECT_EQ(b.problem.nodes[static_cast<size_t>(v)].usages[q],
                a.problem.nodes[static_cast<size_t>(v)].usages[q] + (over_dp ? whole.local_bytes(mesh) : 0));
    }
  }
  const std::vector<Constraint> pins = recipe_pins(Recipe::kFsdpTp, g, mesh).constraints;  // weights split over dp
  ShardingOptimizer so(g, mesh, once);
  for (const Constraint& c : pins) so.add_constraint(c);
  const Plan plan = so.get_solution();
  const std::vector<StrategyIdx>& x = so.solution_choice();
  const BuiltProblem pa = build_problem(g, mesh, per_use, pins), pb = build_problem(g, mesh, once, pins);
  const int64_t copies = gathered_parameter_bytes(g, plan, mesh);
  EXPECT_GT(copies, 0);
  // Every parameter is live at the forward/backward boundary: there the usage grows by
  // exactly the copies; the peak (in the optimizer, where updated weights are freed) by at most.
  EXPECT_EQ(inflight_memory(g, pb, 1, x).boundary_bytes, inflight_memory(g, pa, 1, x).boundary_bytes + copies);
  EXPECT_LE(peak_usage(pb.problem, x), peak_usage(pa.problem, x) + copies);
  EXPECT_GT(peak_usage(pb.problem, x), peak_usage(pa.problem, x));
}

}  // namespace
}  // namespace autoshard

// Planning real traced PyTorch graphs (tests/fixtures, made by python/autoshard-trace): every op
// has a sharding rule, every fixture plans to a checked optimum, and the traced LLaMA plans
// exactly like the equivalent built-in model.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ir/graph_json.h"
#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/sharding_optimizer.h"
#include "strategy/strategy.h"

namespace autoshard {
namespace {

const std::vector<std::string> kFixtures = {"llama2l", "resnet18_b2", "vit_tiny"};

Graph fixture(const std::string& name) {
  return load_graph_file(std::string(AUTOSHARD_SOURCE_DIR) + "/tests/fixtures/" + name +
                         ".graph.json");
}

Mesh mesh_8() { return Mesh({8}, {"dp"}, *hardware_preset("h100")); }
Mesh mesh_2x4() { return Mesh({2, 4}, {"dp", "tp"}, *hardware_preset("h100")); }

/// Ops of `g` that have no rule (enumerate_strategies fell back to all-replicated).
std::vector<std::string> fallbacks(const Graph& g, const Mesh& mesh) {
  std::vector<std::string> r;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    NodeStrategies ns = enumerate_strategies(g, i, mesh);
    EXPECT_FALSE(ns.strategies.empty()) << g.node(i).name;
    if (ns.fallback) r.push_back(g.node(i).name + " (" + g.node(i).op + ")");
  }
  return r;
}

/// The small LLaMA the llama2l fixture was traced from (python/autoshard_torch/examples/llama.py
/// llama_tiny, batch 2, seq 64, bf16), as a built-in graph without optimizer step.
ModelOptions fixture_llama_options() {
  ModelOptions o{2, 64, 2, DType::kBF16};
  o.hidden = 256;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 512;
  o.vocab = 1024;
  o.attention = AttentionImpl::kMath;
  o.optimizer = false;
  return o;
}

Plan plan_on(const Graph& g, const Mesh& mesh) {
  PlannerOptions opt;
  opt.time_limit_s = 60;
  ShardingOptimizer planner(g, mesh, opt);
  return planner.get_solution();
}
Plan plan_on_2x4(const Graph& g) { return plan_on(g, mesh_2x4()); }

/// Parameter name -> placements of its chosen output ("S(0)R").
std::map<std::string, std::string> weight_placements(const Graph& g, const Plan& plan) {
  std::map<std::string, std::string> r;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (g.node(i).kind != NodeKind::kParameter) continue;
    const auto& np = plan.nodes.at(static_cast<size_t>(i));
    if (np) r[g.node(i).name] = np->chosen.outputs.at(0).to_string();
  }
  return r;
}

TEST(TracedGraphs, EveryFixtureOpHasARule) {
  for (const std::string& name : kFixtures) {
    SCOPED_TRACE(name);
    Graph g = fixture(name);
    for (const Mesh& mesh : {mesh_8(), mesh_2x4()}) {
      std::vector<std::string> missing = fallbacks(g, mesh);
      EXPECT_TRUE(missing.empty()) << missing.size() << " nodes without a rule, first: "
                                   << missing.front();
    }
  }
}

TEST(TracedGraphs, EveryBuiltinModelOpHasARule) {
  for (const std::string& name : model_names()) {
    for (AttentionImpl a : {AttentionImpl::kSdpa, AttentionImpl::kMath}) {
      if (a == AttentionImpl::kMath && name.rfind("llama", 0) != 0) continue;
      SCOPED_TRACE(name + (a == AttentionImpl::kMath ? " (math attention)" : ""));
      ModelOptions o{2, 64, 2, DType::kBF16};
      if (name.rfind("llama", 0) == 0) o.attention = a;
      Graph g = build_model(name, o);
      for (const Mesh& mesh : {mesh_8(), mesh_2x4()}) {
        std::vector<std::string> missing = fallbacks(g, mesh);
        EXPECT_TRUE(missing.empty()) << missing.size() << " nodes without a rule, first: "
                                     << missing.front();
      }
    }
  }
  for (const std::string& op : model_op_names()) EXPECT_TRUE(has_rule(op)) << op;
}

TEST(TracedGraphsLarge, FixturesPlanToACheckedOptimum) {
  for (const std::string& name : kFixtures) {
    SCOPED_TRACE(name);
    Graph g = fixture(name);
    Plan plan = plan_on_2x4(g);
    ASSERT_TRUE(plan.has_solution);
    EXPECT_EQ(plan.status, SolveStatus::kOptimal);
    EXPECT_TRUE(plan.checked);
    EXPECT_GT(plan.objective_us, 0);
    for (const std::string& w : plan.warnings)
      EXPECT_EQ(w.find("no sharding rule"), std::string::npos) << w;
  }
}

// The built-in LLaMA with math attention and no optimizer is the traced program: the same ops
// with the same operands, shapes and dtypes, node for node (PyTorch 1.13 records contiguous
// reshapes as _reshape_alias where the built-in says view), and the same parameters.
TEST(TracedGraphs, BuiltinLlamaIsTheTracedGraph) {
  Graph traced = fixture("llama2l");
  Graph built = build_model("llama3-8b", fixture_llama_options());
  EXPECT_EQ(traced.size(), built.size());
  EXPECT_EQ(traced.parameter_count(), built.parameter_count());
  auto ops = [](const Graph& g) {
    std::vector<NodeIdx> r;
    for (NodeIdx i = 0; i < g.size(); ++i)
      if (g.node(i).kind == NodeKind::kOp) r.push_back(i);
    return r;
  };
  std::vector<NodeIdx> a = ops(traced), b = ops(built);
  ASSERT_EQ(a.size(), b.size());
  // Operands are compared by position among the ops, or by name for parameters.
  auto key = [](const Graph& g, const std::vector<NodeIdx>& order) {
    std::map<NodeIdx, size_t> pos;
    for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
    std::vector<std::string> r;
    for (NodeIdx i : order) {
      const Node& n = g.node(i);
      std::string s = n.op == "_reshape_alias" ? "view" : n.op;
      for (const TensorRef& in : n.inputs) {
        const Node& src = g.node(in.node);
        s += " " + (src.kind == NodeKind::kOp ? "#" + std::to_string(pos[in.node])
                    : src.kind == NodeKind::kParameter ? src.name
                                                        : std::string(node_kind_name(src.kind)));
        s += ":" + std::to_string(in.output);
      }
      for (const TensorMeta& m : n.outputs) {
        s += " -> " + std::string(dtype_name(m.dtype));
        for (int64_t d : m.shape) s += "," + std::to_string(d);
      }
      r.push_back(s);
    }
    return r;
  };
  std::vector<std::string> ka = key(traced, a), kb = key(built, b);
  for (size_t k = 0; k < ka.size(); ++k)
    ASSERT_EQ(ka[k], kb[k]) << "op " << k << ": traced " << traced.node(a[k]).name
                            << ", built-in " << built.node(b[k]).name;
  for (const GradPair& p : traced.grad_pairs) {
    auto q = built.find(traced.node(p.param).name);
    ASSERT_TRUE(q.has_value()) << traced.node(p.param).name;
  }
}

void compare_llama_plans(const Mesh& mesh) {
  const std::string where = "llama2l on " + mesh.describe();
  SCOPED_TRACE(where);
  Graph traced = fixture("llama2l");
  Graph built = build_model("llama3-8b", fixture_llama_options());
  Plan pt = plan_on(traced, mesh);
  Plan pb = plan_on(built, mesh);
  ASSERT_TRUE(pt.has_solution);
  ASSERT_TRUE(pb.has_solution);
  EXPECT_EQ(pt.status, SolveStatus::kOptimal);
  EXPECT_EQ(pb.status, SolveStatus::kOptimal);
  EXPECT_TRUE(pt.checked);
  EXPECT_TRUE(pb.checked);
  std::map<std::string, std::string> wt = weight_placements(traced, pt);
  std::map<std::string, std::string> wb = weight_placements(built, pb);
  EXPECT_EQ(wt.size(), 21u);
  EXPECT_EQ(wt, wb);
  EXPECT_NEAR(pt.objective_us, pb.objective_us, 0.01 * pt.objective_us);
  EXPECT_NEAR(static_cast<double>(pt.peak_memory_bytes), static_cast<double>(pb.peak_memory_bytes),
              0.01 * static_cast<double>(pt.peak_memory_bytes));
  std::cout << where << ": traced " << pt.objective_us << " us, peak " << pt.peak_memory_bytes << " B; built-in "
            << pb.objective_us << " us, peak " << pb.peak_memory_bytes << " B\n";
  for (const auto& [name, p] : wt) std::cout << "  " << name << " " << p << "\n";
}

TEST(TracedGraphsLarge, TracedLlamaPlansLikeTheBuiltin) { compare_llama_plans(mesh_2x4()); }

// On 8 devices the batch of 2 cannot be split 8 ways: the plans must agree on something other
// than plain data parallelism.
TEST(TracedGraphs, TracedLlamaPlansLikeTheBuiltinWithoutDataParallelism) {
  compare_llama_plans(mesh_8());
}

}  // namespace
}  // namespace autoshard

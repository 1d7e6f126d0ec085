// Tests of the what-if loop (planner/whatif.h): pin -> resolve -> diff -> remove gives the
// original optimum back; explain's cost difference is the pinned optimum minus the optimum;
// node costs list every strategy with the chosen one and the resharding matrices.
#include "planner/whatif.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/problem_builder.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;

/// A 2-layer MLP training step on a 2x2 mesh, memory unlimited: solves to a proven optimum in
/// well under a second.
ShardingOptimizer make_opt() {
  ModelOptions mo;
  mo.layers = 2;
  Mesh mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100"));
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.memory_limit_bytes = 0;
  return ShardingOptimizer(build_model("mlp", mo), mesh, o);
}

/// An op node with two inputs and an output placement the optimum does not use for it, so
/// that pinning it there is a real what-if.
struct Probe {
  std::string node;
  std::vector<Placement> other;
};

Probe find_probe(ShardingOptimizer& opt, const Plan& plan) {
  const Graph& g = opt.graph();
  const BuiltProblem& bp = opt.problem();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np || n.kind != NodeKind::kOp || n.inputs.size() != 2 || np->chosen.outputs.size() != 1) continue;
    const auto& chosen = np->chosen.outputs[0].placements;
    for (const Strategy& s : bp.strategies[static_cast<size_t>(bp.pnode[static_cast<size_t>(i)])])
      if (s.outputs[0].placements != chosen) return {n.name, s.outputs[0].placements};
  }
  return {};
}

TEST(WhatIf, PinResolveDiffRemoveGivesTheOptimumBack) {
  ShardingOptimizer opt = make_opt();
  Plan base = opt.get_solution();
  ASSERT_TRUE(base.has_solution);
  ASSERT_EQ(base.status, SolveStatus::kOptimal);
  Probe pr = find_probe(opt, base);
  ASSERT_FALSE(pr.node.empty()) << "no two-input op with a second placement";

  std::vector<std::string> names = opt.add_node_constraint(pr.node, pr.other);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(opt.constraints().back().name, names[0]);
  Plan pinned = opt.resolve();
  ASSERT_TRUE(pinned.has_solution);
  const auto& pn = pinned.nodes[static_cast<size_t>(*opt.graph().find(pr.node))];
  ASSERT_TRUE(pn);
  EXPECT_EQ(pn->chosen.outputs[0].placements, pr.other);
  EXPECT_GE(pinned.objective_us, base.objective_us * (1 - 1e-12));
  EXPECT_EQ(opt.solution()->objective_us, pinned.objective_us);

  SolutionDiff d = diff_solutions(opt, base, pinned);
  EXPECT_DOUBLE_EQ(d.delta_us, pinned.objective_us - base.objective_us);
  EXPECT_NEAR(d.compute_delta_us + d.comm_delta_us, d.delta_us, 1e-9 * std::abs(base.objective_us));
  EXPECT_GE(d.placements_changed, 1);
  // The per-layer deltas add up to the total (every cost sits on exactly one node).
  double by_layer = 0;
  bool pinned_listed = false;
  for (const LayerChanges& lc : d.layers) {
    by_layer += lc.delta_us;
    for (const NodeChange& c : lc.nodes) pinned_listed = pinned_listed || (c.node == pr.node && c.placement_changed);
  }
  EXPECT_NEAR(by_layer, d.delta_us, 1e-9 * std::abs(base.objective_us) + 1e-9);
  EXPECT_TRUE(pinned_listed);
  std::string text = format_diff(d);
  EXPECT_THAT(text, HasSubstr("objective:"));
  EXPECT_THAT(text, HasSubstr(pr.node));

  opt.remove_constraints(names);
  EXPECT_TRUE(opt.constraints().empty());
  Plan again = opt.resolve();
  ASSERT_TRUE(again.has_solution);
  EXPECT_EQ(again.status, SolveStatus::kOptimal);
  EXPECT_NEAR(again.objective_us, base.objective_us, 1e-9 * base.objective_us);
  SolutionDiff none = diff_solutions(opt, base, again);
  EXPECT_NEAR(none.delta_us, 0, 1e-9 * base.objective_us);
}

TEST(WhatIf, RemoveUnknownConstraintThrowsAndRemovesNothing) {
  ShardingOptimizer opt = make_opt();
  auto names = opt.add_node_constraint(opt.graph().node(0).name, parse_placements("RR"));
  try {
    opt.remove_constraints({names[0], "no-such-constraint"});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("no-such-constraint"));
  }
  EXPECT_EQ(opt.constraints().size(), 1u);
}

TEST(WhatIf, ExplainGivesThePinnedOptimumMinusTheOptimum) {
  ShardingOptimizer opt = make_opt();
  Plan base = opt.get_solution();
  Probe pr = find_probe(opt, base);
  ASSERT_FALSE(pr.node.empty());
  Explanation e = explain_placement(opt, pr.node, pr.other);
  ASSERT_TRUE(e.feasible) << e.infeasible_reason;
  EXPECT_FALSE(e.already_chosen);
  EXPECT_EQ(e.optimum_us, base.objective_us);
  EXPECT_GE(e.delta_us, 0);
  EXPECT_DOUBLE_EQ(e.delta_us, e.pinned_us - e.optimum_us);
  // Independently: pin, solve from scratch, compare.
  {
    ShardingOptimizer fresh = make_opt();
    fresh.pin(pr.node, pr.other);
    Plan p = fresh.get_solution();
    ASSERT_TRUE(p.has_solution);
    EXPECT_NEAR(e.pinned_us, p.objective_us, 1e-9 * p.objective_us);
  }
  // The optimizer is left as it was.
  EXPECT_TRUE(opt.constraints().empty());
  EXPECT_EQ(opt.solution()->objective_us, base.objective_us);
  EXPECT_THAT(format_explanation(e), HasSubstr("why not " + placements_to_string(pr.other) + " for " + pr.node));
  // Asking for the chosen placement costs nothing.
  const auto& chosen = base.nodes[static_cast<size_t>(*opt.graph().find(pr.node))]->chosen.outputs[0].placements;
  Explanation same = explain_placement(opt, pr.node, chosen);
  EXPECT_TRUE(same.already_chosen);
  EXPECT_NEAR(same.delta_us, 0, 1e-9 * base.objective_us);
}

TEST(WhatIf, ExplainOfAnImpossiblePlacementSaysWhy) {
  ShardingOptimizer opt = make_opt();
  opt.get_solution();
  Probe pr = find_probe(opt, *opt.solution());
  ASSERT_FALSE(pr.node.empty());
  // Shard(5) of a 2-D tensor exists in no strategy.
  Explanation e = explain_placement(opt, pr.node, parse_placements("S(5)R"));
  EXPECT_FALSE(e.feasible);
  EXPECT_FALSE(e.infeasible_reason.empty());
  EXPECT_TRUE(opt.constraints().empty());
}

TEST(WhatIf, NodeCostsListStrategiesAndMatrices) {
  ShardingOptimizer opt = make_opt();
  Plan base = opt.get_solution();
  Probe pr = find_probe(opt, base);
  NodeCosts c = node_costs(opt, pr.node);
  const NodeIdx i = *opt.graph().find(pr.node);
  const auto& np = *base.nodes[static_cast<size_t>(i)];
  ASSERT_GE(c.chosen, 0);
  EXPECT_EQ(c.chosen, np.strategy);
  int marked = 0;
  for (const StrategyCost& s : c.strategies) marked += s.chosen;
  EXPECT_EQ(marked, 1);
  const StrategyCost& ch = c.strategies[static_cast<size_t>(c.chosen)];
  EXPECT_EQ(ch.name, np.chosen.name());
  EXPECT_DOUBLE_EQ(ch.compute_us, np.compute_us);
  EXPECT_NEAR(ch.comm_us, np.comm_us, 1e-12 * (1 + np.comm_us));
  EXPECT_GT(ch.memory_bytes, 0);
  // mm has two inputs; each matrix is |producer| x |this node| with the chosen cell matching.
  ASSERT_EQ(c.inputs.size(), 2u);
  for (const InputMatrix& m : c.inputs) {
    EXPECT_EQ(m.costs.size(), m.producer_strategies.size() * m.consumer_strategies.size());
    EXPECT_EQ(m.consumer_strategies.size(), c.strategies.size());
    ASSERT_GE(m.producer_chosen, 0);
  }
  std::string text = print_costs_for_node(opt, pr.node);
  EXPECT_THAT(text, HasSubstr("node " + pr.node));
  EXPECT_THAT(text, HasSubstr("resharding cost"));
  EXPECT_THAT(text, HasSubstr(np.chosen.name()));
  EXPECT_THROW(node_costs(opt, "no_such_node"), std::runtime_error);
}

TEST(WhatIf, LayerOfModulePaths) {
  Node n;
  n.module_path = "layers.3.attention.wq";
  EXPECT_EQ(layer_of(n), "layers.3");
  n.module_path = "tok_embeddings";
  EXPECT_EQ(layer_of(n), "tok_embeddings");
  n.module_path = "model.norm";
  EXPECT_EQ(layer_of(n), "model");
  n.module_path = "";
  EXPECT_EQ(layer_of(n), "(no module)");
}

}  // namespace
}  // namespace autoshard

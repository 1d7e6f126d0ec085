// The overlap-aware objective (overlap.h, overlap_solve.h): on a chain where its model is exact
// it equals the simulated step; its Lagrangian costs are what the formula says; the dual loop's
// plan and bound bracket the true optimum, found by enumerating every assignment.
#include "planner/overlap.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cost/redistribute.h"
#include "mesh/hardware.h"
#include "models/builder.h"
#include "models/models.h"
#include "planner/overlap_solve.h"
#include "planner/sharding_optimizer.h"
#include "planner/simulate.h"

namespace autoshard {
namespace {

constexpr int64_t kWidth = 4096;
const DType kBf16 = DType::kBF16;

Mesh two_devices() { return Mesh({2}, {"dp"}, *hardware_preset("h100")); }

/// x [rows, kWidth] -> mm with w_l in "layers.l", for l < layers (forward only).
Graph chain(int64_t rows, int layers) {
  GraphBuilder b("chain");
  TensorRef h = b.input("x", {{rows, kWidth}, kBf16});
  std::vector<TensorRef> w;
  for (int l = 0; l < layers; ++l)
    w.push_back(b.parameter("w" + std::to_string(l), "layers." + std::to_string(l), {{kWidth, kWidth}, kBf16}));
  for (int l = 0; l < layers; ++l) {
    b.set_module("layers." + std::to_string(l));
    h = b.mm(h, w[static_cast<size_t>(l)]);
  }
  Graph g = b.finish();
  Node out;
  out.name = "output";
  out.kind = NodeKind::kOutput;
  out.inputs.push_back(h);
  g.add(std::move(out));
  return g;
}

/// FSDP on the chain: every weight stored S(0) and gathered for its matmul; activations
/// replicated (no other communication).
std::vector<StrategyIdx> fsdp_choice(ShardingOptimizer& opt) {
  const Graph& g = opt.graph();
  std::vector<std::optional<Strategy>> wanted(static_cast<size_t>(g.size()));
  auto spec = [](const char* p) { return ShardingSpec{parse_placements(p), {}}; };
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    Strategy s;
    if (n.kind == NodeKind::kOutput) continue;
    if (n.kind == NodeKind::kParameter) {
      s.outputs = {spec("S(0)")};
    } else if (n.kind == NodeKind::kInput) {
      s.outputs = {spec("R")};
    } else {
      s.outputs = {spec("R")};
      s.inputs = {spec("R"), spec("R")};
    }
    wanted[static_cast<size_t>(i)] = s;
  }
  return opt.match_strategies(wanted);
}

/// The chain's step by hand: the first gather exposed, each later one hidden behind the
/// previous layer's matmul up to its length, the last matmul after them.
double chain_step_by_hand(const Plan& plan, const Graph& g, const Mesh& mesh, int layers) {
  const TensorMeta w{{kWidth, kWidth}, kBf16};
  const double gather = redistribute_cost_us({parse_placements("S(0)"), w}, {parse_placements("R"), w}, mesh);
  std::vector<double> mm;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kOp) mm.push_back(plan.nodes[static_cast<size_t>(i)]->compute_us);
  double t = gather;
  for (int l = 0; l + 1 < layers; ++l) t += std::max(mm[static_cast<size_t>(l)], gather);
  return t + mm.back();
}

class OverlapChain : public ::testing::TestWithParam<int64_t> {};

TEST_P(OverlapChain, ObjectiveEqualsTheSimulatedStep) {
  const int layers = 3;
  ShardingOptimizer opt(chain(GetParam(), layers), two_devices());
  const Plan plan = opt.evaluate(fsdp_choice(opt));
  ASSERT_TRUE(plan.overlap_aware);
  ASSERT_GT(plan.comm_us, 0);
  const double by_hand = chain_step_by_hand(plan, opt.graph(), opt.mesh(), layers);
  EXPECT_NEAR(plan.objective_us, by_hand, 1e-9 * by_hand);
  // The objective charges every gather its latency: it is the simulated step without buckets
  // (the first two gathers, both issued at layer 0, share one; the bucketed step is shorter).
  const double unbucketed = simulate_step(opt, plan, {1, Bucketing::kNone}).step_us;
  EXPECT_NEAR(unbucketed, plan.objective_us, 1e-9 * by_hand);
  EXPECT_LE(simulate_step(opt, plan).step_us, unbucketed * (1 + 1e-12));
  EXPECT_LT(plan.objective_us, plan.additive_us);
  EXPECT_NEAR(plan.additive_us - plan.overlapped_us, plan.objective_us, 1e-9 * by_hand);
}

// 4096 rows: each matmul (~200 us) hides the next gather (~40 us); 256 rows: it cannot.
INSTANTIATE_TEST_SUITE_P(ComputeBoundAndCommBound, OverlapChain, ::testing::Values(4096, 256));

TEST(OverlapModel, GroupsAreWindowsWithTheNextLayersGathers) {
  ShardingOptimizer opt(chain(256, 3), two_devices());
  const BuiltProblem& bp = opt.problem();
  const OverlapModel m = build_overlap_model(opt.graph(), bp);
  // Windows layers.0 and layers.1 (layers.2 hides nothing: no later layer); one key.
  ASSERT_EQ(m.groups.size(), 2u);
  ASSERT_EQ(m.keys, std::vector<std::string>{"forward layers.* (1 ops, 1 moves)"});
  for (const OverlapGroup& gr : m.groups) {
    EXPECT_EQ(gr.window.size(), 1u);
    ASSERT_EQ(gr.hidden.size(), 1u);
    EXPECT_EQ(opt.graph().node(bp.edge_origin[static_cast<size_t>(gr.hidden[0])].producer.node).kind,
              NodeKind::kParameter);
  }
}

TEST(OverlapModel, SegmentsOfAnotherShapeGetTheirOwnMultiplier) {
  // layers.1 has two matmuls: the window before it hides two gathers, its own window is two
  // ops wide; layers.0 and layers.2 are alike and share a key.
  GraphBuilder b("uneven");
  TensorRef h = b.input("x", {{256, kWidth}, kBf16});
  const std::vector<int> mms{1, 2, 1, 1};
  std::vector<std::vector<TensorRef>> w(mms.size());
  for (size_t l = 0; l < mms.size(); ++l)
    for (int j = 0; j < mms[l]; ++j)
      w[l].push_back(b.parameter("w" + std::to_string(l) + "_" + std::to_string(j), "layers." + std::to_string(l),
                                 {{kWidth, kWidth}, kBf16}));
  for (size_t l = 0; l < mms.size(); ++l) {
    b.set_module("layers." + std::to_string(l));
    for (const TensorRef& x : w[l]) h = b.mm(h, x);
  }
  ShardingOptimizer opt(b.finish(), two_devices());
  const OverlapModel m = build_overlap_model(opt.graph(), opt.problem());
  ASSERT_EQ(m.groups.size(), 3u);
  EXPECT_EQ(m.keys, (std::vector<std::string>{"forward layers.* (1 ops, 2 moves)", "forward layers.* (2 ops, 1 moves)",
                                              "forward layers.* (1 ops, 1 moves)"}));
  EXPECT_EQ(m.groups[0].key, 0);
  EXPECT_EQ(m.groups[1].key, 1);
  EXPECT_EQ(m.groups[2].key, 2);
}

TEST(OverlapModel, ScaledCostsAreTheLagrangian) {
  ShardingOptimizer opt(chain(1024, 3), two_devices());
  const BuiltProblem& bp = opt.problem();
  const OverlapModel m = build_overlap_model(opt.graph(), bp);
  BuiltProblem scaled = bp;
  const double mu = 0.3;
  scale_overlap_costs(m, bp, {mu}, scaled);
  const std::vector<StrategyIdx> x = fsdp_choice(opt);
  const OverlapTerms t = overlap_terms(m, bp, x);
  const double want = evaluate_cost(bp, x) - mu * t.hidden_us[0] - (1 - mu) * t.window_us[0];
  EXPECT_NEAR(evaluate_cost(scaled, x), want, 1e-9 * want);
  EXPECT_GT(t.hidden_us[0], 0);
  EXPECT_GT(t.window_us[0], 0);
}

/// Smallest T over every assignment of the (small) problem.
double brute_force_min(ShardingOptimizer& opt) {
  const BuiltProblem& bp = opt.problem();
  const OverlapModel m = build_overlap_model(opt.graph(), bp);
  std::vector<StrategyIdx> x(static_cast<size_t>(bp.problem.num_nodes()), 0);
  double best = kInfCost;
  std::function<void(size_t)> walk = [&](size_t v) {
    if (v == x.size()) {
      const double a = evaluate_cost(bp, x);
      if (a < kInfCost) best = std::min(best, a - overlap_terms(m, bp, x).overlapped_total_us);
      return;
    }
    for (StrategyIdx q = 0; q < bp.problem.nodes[v].num_strategies(); ++q) {
      x[v] = q;
      walk(v + 1);
    }
  };
  walk(0);
  return best;
}

TEST(OverlapSolve, PlanAndBoundBracketTheEnumeratedOptimum) {
  for (int64_t rows : {256, 4096}) {
    PlannerOptions po;
    po.memory_limit_bytes = 0;
    ShardingOptimizer opt(chain(rows, 2), two_devices(), po);
    const double optimum = brute_force_min(opt);
    const Plan plan = opt.get_solution();
    ASSERT_TRUE(plan.has_solution);
    EXPECT_TRUE(plan.checked);
    EXPECT_GT(plan.objective_solves, 0);
    EXPECT_LE(plan.lower_bound_us, optimum * (1 + 1e-9)) << rows;
    EXPECT_GE(plan.objective_us, optimum * (1 - 1e-9)) << rows;
    if (plan.status == SolveStatus::kOptimal) {
      EXPECT_NEAR(plan.objective_us, optimum, 1e-6 * optimum);
    }
    // Never worse than the additive optimum's step time.
    PlannerOptions additive = po;
    additive.objective = Objective::kAdditive;
    ShardingOptimizer add(chain(rows, 2), two_devices(), additive);
    const Plan pa = add.get_solution();
    EXPECT_LE(plan.objective_us, opt.evaluate(add.solution_choice()).objective_us * (1 + 1e-9)) << rows;
    EXPECT_EQ(pa.overlapped_us, 0);
  }
}

TEST(OverlapSolve, AProvenFirstSolveIsReusedAsIs) {
  // The recompute probe's memory-free solve, handed over as the first solve, gives the very
  // plan, bound and number of solves that solving it again gives (and is not solved again).
  ShardingOptimizer opt(chain(1024, 3), two_devices());
  const BuiltProblem& bp = opt.problem();
  const OverlapModel m = build_overlap_model(opt.graph(), bp);
  PlannerOptions po;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  TiedSolveInput probe{opt.graph(), bp, po, false, nullptr, {}, deadline};
  probe.relaxed_only = true;
  const TiedSolve first = solve_tied(probe);
  ASSERT_EQ(first.r.status, SolveStatus::kOptimal);
  ASSERT_TRUE(first.fits);
  TiedSolveInput plain{opt.graph(), bp, po, false, nullptr, {}, deadline};
  TiedSolveInput reused = plain;
  reused.first_solve = &first;
  const OverlapSolve a = solve_overlap(plain, m), b = solve_overlap(reused, m);
  EXPECT_EQ(a.choice, b.choice);
  EXPECT_EQ(a.objective_us, b.objective_us);
  EXPECT_EQ(a.lower_bound_us, b.lower_bound_us);
  EXPECT_EQ(a.solves, b.solves);
  // A probe whose plan does not fit is not reused: the first solve is made again.
  TiedSolve over = first;
  over.fits = false;
  over.r.choice.clear();
  reused.first_solve = &over;
  const OverlapSolve c = solve_overlap(reused, m);
  EXPECT_EQ(a.choice, c.choice);
}

}  // namespace
}  // namespace autoshard

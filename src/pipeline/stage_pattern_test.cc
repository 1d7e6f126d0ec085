// Stage plans as patterns of identical layers, and the stage sizes the pipeline search
// evaluates from them instead of solving (StageSolver::free, prefetch, refine).
#include "pipeline/stage_pattern.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/models.h"
#include "pipeline/pipeline_solve.h"
#include "planner/sharding_optimizer.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

/// llama3-8b with 8 layers, a microbatch of 2 sequences of 256.
Graph llama8() { return build_model("llama3-8b", ModelOptions{2, 256, 8, {}}); }

PlannerOptions additive_stage() {
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // exact stage optima
  return o;
}

int32_t count(const std::vector<std::optional<RoleKey>>& roles, StageRole r) {
  int32_t n = 0;
  for (const auto& k : roles) n += k && k->first == r;
  return n;
}

TEST(StagePattern, RolesOfAMiddleStage) {
  const Graph g = llama8();
  const LayerMap m = map_layers(g);
  const auto r2 = stage_roles(extract_stage(g, m, 1, 3), m, 1, 3);
  const auto r5 = stage_roles(extract_stage(g, m, 1, 6), m, 1, 6);
  const int32_t per_layer = count(r2, StageRole::kFirstLayer);
  ASSERT_GT(per_layer, 10);
  EXPECT_EQ(count(r2, StageRole::kLastLayer), per_layer);
  EXPECT_EQ(count(r2, StageRole::kMiddleLayer), 0);
  // Five layers: one first, three middle, one last; the same received tensors and shared copies.
  EXPECT_EQ(count(r5, StageRole::kFirstLayer), per_layer);
  EXPECT_EQ(count(r5, StageRole::kMiddleLayer), 3 * per_layer);
  EXPECT_EQ(count(r5, StageRole::kLastLayer), per_layer);
  EXPECT_EQ(count(r5, StageRole::kReceived), count(r2, StageRole::kReceived));
  EXPECT_GT(count(r5, StageRole::kReceived), 0);
  EXPECT_EQ(count(r5, StageRole::kShared), count(r2, StageRole::kShared));
  EXPECT_EQ(count(r5, StageRole::kBefore) + count(r5, StageRole::kAfter), 0);
  // A first stage holds what runs before the layers.
  const auto f = stage_roles(extract_stage(g, m, 0, 3), m, 0, 3);
  EXPECT_GT(count(f, StageRole::kBefore), 0);
  EXPECT_EQ(count(f, StageRole::kAfter), 0);
}

/// The 8-layer LLaMA's stages on 2 (pp) x 4 (dp), 4 microbatches.
struct Stages {
  Graph g = llama8();
  LayerMap m = map_layers(g);
  Mesh mesh{{2, 4}, {"pp", "dp"}, h100()};
  PlannerOptions o = additive_stage();
  PipelineOptions popt = [] {
    PipelineOptions p;
    p.microbatches = 4;
    return p;
  }();
  StageSolver solver{g, mesh, o, popt, m, 0};
};

TEST(StagePattern, PatternsAgreeOnlyWhereTheDecisionsDo) {
  Stages t;
  const Graph& g = t.g;
  const LayerMap& m = t.m;
  StageSolver& solver = t.solver;
  auto a = solver.free(kStageMid, 3);
  auto b = solver.free(kStageMid, 6);
  ASSERT_FALSE(a->interpolated);
  ASSERT_FALSE(b->interpolated);
  const auto pa = stage_pattern(a->sg, a->plan, m, 1, 4);
  const auto pb = stage_pattern(b->sg, b->plan, m, 1, 7);
  ASSERT_TRUE(pa && pb);
  EXPECT_FALSE(stage_pattern(a->sg, a->plan, m, 1, 2));  // one layer: no first/last split
  // A pattern agrees with itself; changing one decision breaks the agreement.
  ASSERT_TRUE(merge_patterns(*pa, *pa));
  StagePattern other = *pa;
  auto it = other.chosen.begin();
  it->second.outputs.clear();
  EXPECT_FALSE(merge_patterns(*pa, other));
  // Its strategies map onto the nodes of a stage of any size from 3 layers on.
  const StageGraph sg4 = extract_stage(g, m, 1, 5);
  const auto wanted = pattern_strategies(*pa, sg4, m, 1, 5);
  ASSERT_TRUE(wanted);
  int32_t set = 0;
  for (const auto& w : *wanted) set += w.has_value();
  EXPECT_GT(set, 4 * 10);
  // A first stage's pattern (with the embedding) does not map onto a middle stage.
  auto f = solver.free(kStageFirst, 3);
  const auto pf = stage_pattern(f->sg, f->plan, m, 0, 3);
  ASSERT_TRUE(pf);
  EXPECT_FALSE(pattern_strategies(*pf, sg4, m, 1, 5));
}

TEST(StagePattern, SizesBetweenOnePatternAreEvaluatedAtTheirOptimum) {
  Stages t;
  StageSolver& solver = t.solver;
  solver.prefetch({{kStageMid, 2}, {kStageMid, 6}});
  ASSERT_EQ(solver.builder().solves(), 2);
  auto lo = solver.free(kStageMid, 2), hi = solver.free(kStageMid, 6);
  ASSERT_EQ(lo->plan.status, SolveStatus::kOptimal);
  ASSERT_EQ(hi->plan.status, SolveStatus::kOptimal);
  auto mid = solver.free(kStageMid, 4);
  ASSERT_TRUE(mid->interpolated);  // exact optima of one pattern: the chord is tight
  EXPECT_EQ(solver.builder().solves(), 2);
  // The evaluated plan is the optimum a solve finds, and its bound proves it.
  StageSolver fresh(t.g, t.mesh, t.o, t.popt, t.m, 0);
  auto solved = fresh.free(kStageMid, 4);
  ASSERT_FALSE(solved->interpolated);
  EXPECT_NEAR(mid->microbatch_us, solved->microbatch_us, 1e-6 * solved->microbatch_us);
  EXPECT_NEAR(mid->lower_bound_us, mid->microbatch_us, 1e-6 * mid->microbatch_us);
  EXPECT_EQ(mid->plan.status, SolveStatus::kOptimal);
  EXPECT_EQ(mid->activation_bytes, solved->activation_bytes);
  EXPECT_EQ(mid->microbatch_peak_bytes, solved->microbatch_peak_bytes);
  // The cost is affine in the layers: the middle of 2 and 6 is their mean.
  EXPECT_NEAR(mid->microbatch_us, (lo->microbatch_us + hi->microbatch_us) / 2, 1e-6 * mid->microbatch_us);
  // Outside the solved sizes nothing is evaluated.
  auto above = solver.free(kStageMid, 7);
  EXPECT_FALSE(above->interpolated);
  EXPECT_EQ(solver.builder().solves(), 3);
  // refine() solves an evaluated size and keeps the better plan and bound.
  solver.refine({{kStageMid, 4, StageMemory{}}});
  EXPECT_EQ(solver.builder().solves(), 4);
  auto refined = solver.free(kStageMid, 4);
  EXPECT_FALSE(refined->interpolated);
  EXPECT_NEAR(refined->microbatch_us, solved->microbatch_us, 1e-6 * solved->microbatch_us);
}

TEST(StagePattern, PrefetchOnThreadsGivesTheSequentialSolves) {
  const Graph g = llama8();
  const LayerMap m = map_layers(g);
  const Mesh mesh({2, 4}, {"pp", "dp"}, h100());
  PlannerOptions o;  // the default overlap objective
  PipelineOptions one, two;
  one.microbatches = two.microbatches = 4;
  one.stage_threads = 1;
  two.stage_threads = 2;
  StageSolver a(g, mesh, o, one, m, 0), b(g, mesh, o, two, m, 0);
  const std::vector<std::pair<StageKind, int32_t>> keys = {
      {kStageFirst, 1}, {kStageFirst, 3}, {kStageMid, 2}, {kStageMid, 5}, {kStageLast, 2}, {kStageLast, 4}};
  a.prefetch(keys);
  b.prefetch(keys);
  ASSERT_EQ(a.catalog().count(StagePlanUse::kMemoryFree), keys.size());
  ASSERT_EQ(b.catalog().count(StagePlanUse::kMemoryFree), keys.size());
  for (const auto& [key, s] : a.catalog().of(StagePlanUse::kMemoryFree)) {
    const auto t = b.catalog().find(key);
    ASSERT_TRUE(t);
    EXPECT_EQ(s->microbatch_us, t->microbatch_us) << static_cast<int>(key.kind) << " " << key.k;
    EXPECT_EQ(s->lower_bound_us, t->lower_bound_us);
    EXPECT_EQ(s->plan.nodes.size(), t->plan.nodes.size());
  }
}

/// The fitted-stage tests' case: llama8 on pp 2 x dp 4, M = 4, additive objective, and its
/// options with every region fully recomputed.
class StageFitted : public ::testing::Test {
 protected:
  Graph g = llama8();
  LayerMap m = map_layers(g);
  Mesh mesh{{2, 4}, {"pp", "dp"}, h100()};
  PlannerOptions o = additive_stage();
  PipelineOptions popt = [] {
    PipelineOptions p;
    p.microbatches = 4;
    return p;
  }();
  PlannerOptions full = [this] {
    PlannerOptions f = o;
    f.recompute = RecomputePolicy::kFull;
    return f;
  }();
};

TEST_F(StageFitted, SizesBetweenTwoFullRecomputePlansAreEvaluated) {
  // Budgets of what the best plan that recomputes every layer needs: the memory-free plan
  // (which recomputes nothing) does not fit, and fit() keeps a plan at hand that recomputes
  // every layer (recomputation then is no decision, so the plans are patterns).  Without the
  // memory-aware solve (which could find one recomputing less), as a time limit would stop it
  // at a machine-dependent point.
  popt.solve_fitted = false;
  popt.extend_fitted = false;  // sizes outside a bracket are fit() (the next test extends them)
  StageSolver recomputed(g, mesh, full, popt, m, 0);
  const double f = 4;
  auto mem = [&](int32_t k) {
    return StageMemory{f, static_cast<int64_t>(StageBuilder::need_bytes(*recomputed.free(kStageMid, k), f))};
  };
  StageSolver solver(g, mesh, o, popt, m, 0);
  auto lo = solver.fitted(kStageMid, 2, mem(2)), hi = solver.fitted(kStageMid, 6, mem(6));
  ASSERT_TRUE(std::isfinite(lo->microbatch_us) && std::isfinite(hi->microbatch_us));
  ASSERT_EQ(lo->optimizer->options().recompute, RecomputePolicy::kFull);
  ASSERT_EQ(hi->optimizer->options().recompute, RecomputePolicy::kFull);
  const int32_t before = solver.builder().solves();
  auto mid = solver.fitted(kStageMid, 4, mem(4));
  EXPECT_TRUE(mid->interpolated);
  EXPECT_EQ(solver.builder().solves(), before);
  EXPECT_TRUE(StageBuilder::fits(*mid, mem(4)));
  // Its bound is the memory-free bound.
  EXPECT_EQ(mid->lower_bound_us, std::min(solver.free(kStageMid, 4)->lower_bound_us, mid->microbatch_us));
  // One plan pattern at both ends: its cost at 4 layers is the mean of theirs at 2 and 6.
  EXPECT_NEAR(mid->microbatch_us, (lo->microbatch_us + hi->microbatch_us) / 2, 1e-6 * mid->microbatch_us);
}

// A fitted size with no bracket is the sharding pattern of a solved fitted size of its kind,
// with only as much recomputation as its own budget needs (extend_fitted, pipeline/stage_source.h).
TEST_F(StageFitted, SizesExtendASolvedPatternWithTheLeastRecomputation) {
  popt.solve_fitted = false;  // the plans at hand only: no time-limited solve
  StageSolver recomputed(g, mesh, full, popt, m, 0), free_solver(g, mesh, o, popt, m, 0);
  const double f = 4;
  // Halfway between what the memory-free plan needs and what it needs fully recomputed.
  auto mem = [&](int32_t k) {
    const double lo = StageBuilder::need_bytes(*recomputed.free(kStageMid, k), f);
    const double hi = StageBuilder::need_bytes(*free_solver.free(kStageMid, k), f);
    return StageMemory{f, static_cast<int64_t>((lo + hi) / 2)};
  };
  StageSolver solver(g, mesh, o, popt, m, 0);
  auto two = solver.fitted(kStageMid, 2, mem(2));
  ASSERT_TRUE(std::isfinite(two->microbatch_us));
  ASSERT_FALSE(two->interpolated);
  (void)solver.free(kStageMid, 5);  // its memory-free solve
  const int32_t before = solver.builder().solves();
  auto five = solver.fitted(kStageMid, 5, mem(5));
  EXPECT_TRUE(five->extended);
  EXPECT_EQ(solver.builder().solves(), before);
  EXPECT_TRUE(StageBuilder::fits(*five, mem(5)));
  EXPECT_EQ(five->lower_bound_us, std::min(solver.free(kStageMid, 5)->lower_bound_us, five->microbatch_us));
  // Some layers keep what they would recompute fully: cheaper than the memory-free plan
  // recomputed everywhere, dearer than the memory-free plan that does not fit.
  EXPECT_LT(five->microbatch_us, recomputed.free(kStageMid, 5)->microbatch_us);
  EXPECT_GT(five->microbatch_us, free_solver.free(kStageMid, 5)->microbatch_us);
  // Off: the size is planned by fit() (its plans at hand), not evaluated as a pattern.
  popt.extend_fitted = false;
  StageSolver plain(g, mesh, o, popt, m, 0);
  (void)plain.fitted(kStageMid, 2, mem(2));
  EXPECT_FALSE(plain.fitted(kStageMid, 5, mem(5))->extended);
  // refine() keeps an extended plan: no solve.
  const int32_t solved = solver.builder().solves();
  solver.refine({{kStageMid, 5, mem(5)}});
  EXPECT_EQ(solver.builder().solves(), solved);
  EXPECT_EQ(solver.fitted(kStageMid, 5, mem(5)).get(), five.get());
}

// The forward floor a later stage waits for at least (pipeline.cc busiest_rank_bound): affine
// in the layers and below the plan's own forward.
TEST_F(StageFitted, ForwardFloorsAreAffineInTheLayersAndBelowTheForward) {
  StageSolver solver(g, mesh, o, popt, m, 0);
  for (StageKind kind : {kStageFirst, kStageMid, kStageLast}) {
    auto two = solver.free(kind, 2), five = solver.free(kind, 5);
    EXPECT_GT(two->layer_forward_floor_us, 0);
    EXPECT_NEAR(five->forward_floor_us - two->forward_floor_us, 3 * two->layer_forward_floor_us,
                1e-9 * five->forward_floor_us);
    EXPECT_EQ(five->layer_forward_floor_us, two->layer_forward_floor_us);
    for (const auto& st : {two, five}) {
      EXPECT_GT(st->forward_floor_us, 0);
      EXPECT_LE(st->forward_floor_us, st->parts.forward_us);
    }
  }
}

}  // namespace
}  // namespace autoshard

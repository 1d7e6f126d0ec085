// A step the pipelined plan must beat (PipelineOptions::cutoff_us, a mesh search's best so far):
// a cutoff the plan beats changes nothing; one no plan can beat stops the search with a proven
// bound at or above it, which the full search's plan confirms.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "pipeline/pipeline.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

PipelineOptions cut_options(bool choose_gather) {
  PipelineOptions po;
  po.microbatches = 4;
  po.solve_fitted = false;  // the CLI's default: no memory-limited solves, which run to the clock
  po.choose_params_gathered_once = choose_gather;
  return po;
}

PipelinePlan plan_cut(const Graph& g, const Mesh& mesh, int64_t limit, const PipelineOptions& po) {
  PlannerOptions o;
  o.objective = Objective::kAdditive;
  o.memory_limit_bytes = limit;
  return plan_pipeline(g, mesh, o, po);
}

/// The cutoff's bound, or nullopt when the search planned instead.
std::optional<double> cut_bound(const Graph& g, const Mesh& mesh, int64_t limit, PipelineOptions po, double cutoff) {
  po.cutoff_us = cutoff;
  try {
    (void)plan_cut(g, mesh, limit, po);
  } catch (const PipelineCutoff& c) {
    return c.lower_bound_us();
  }
  return std::nullopt;
}

void check_cutoffs(const Graph& g, const Mesh& mesh, int64_t limit, const PipelineOptions& po) {
  const PipelinePlan full = plan_cut(g, mesh, limit, po);
  // A cutoff the plan beats: the same plan.
  PipelineOptions loose = po;
  loose.cutoff_us = full.step_us * 1.5;
  const PipelinePlan again = plan_cut(g, mesh, limit, loose);
  EXPECT_DOUBLE_EQ(again.step_us, full.step_us);
  EXPECT_EQ(again.schedule, full.schedule);
  EXPECT_EQ(again.v, full.v);
  // A cutoff at half the plan's bound: every layout's bound reaches it, and the bound thrown
  // is proven (at most the plan's step) and at least the cutoff.
  const double cutoff = full.lower_bound_us / 2;
  const std::optional<double> bound = cut_bound(g, mesh, limit, po, cutoff);
  ASSERT_TRUE(bound.has_value());
  EXPECT_GE(*bound, cutoff);
  EXPECT_LE(*bound, full.step_us * (1 + 1e-9));
}

TEST(PipelineCutoff, MemoryFree) {
  const Graph g = testing::small_llama(4);
  const Mesh mesh({2, 2}, {"pp", "dp"}, h100());
  check_cutoffs(g, mesh, 0, cut_options(false));
}

TEST(PipelineCutoffLarge, MemoryBindsAndTheGatherIsChosen) {
  const Graph g = testing::small_llama(4);
  const Mesh mesh({2, 2}, {"pp", "dp"}, h100());
  const PipelinePlan free = plan_cut(g, mesh, 0, cut_options(false));
  const int64_t peak = *std::max_element(free.rank_peak_bytes.begin(), free.rank_peak_bytes.end());
  check_cutoffs(g, mesh, peak * 3 / 4, cut_options(true));
}

}  // namespace
}  // namespace autoshard

// The planner's choice of gathering the stages' parameters once per step or per use
// (pipeline_gather.cc): per use is planned beside the once search from the moment that search
// prices memory, and the result is the better of the two variants planned alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"
#include "planner/test_util.h"

namespace autoshard {
namespace {

using testing::h100;

PipelineOptions one_f_one_b() {
  PipelineOptions po;
  po.microbatches = 4;
  po.schedule = PipelineSchedule::k1F1B;
  po.solve_fitted = false;  // the CLI's default: no memory-limited solves, which run to the clock
  return po;
}

/// The plan of `po` and its -v lines.
PipelinePlan planned(const Graph& g, const Mesh& mesh, int64_t limit, const PipelineOptions& po,
                     std::vector<std::string>* log = nullptr) {
  PlannerOptions o;
  o.objective = Objective::kAdditive;
  o.memory_limit_bytes = limit;
  if (log) o.progress = [log](std::string_view line) { log->emplace_back(line); };
  return plan_pipeline(g, mesh, o, po);
}

TEST(PipelineGather, PerUseRunsBesideTheOnceSearchWhenMemoryBindsAndTheBetterIsKept) {
  const Graph g = testing::small_llama(2);
  const Mesh mesh({2, 2}, {"pp", "dp"}, h100());
  PipelineOptions once = one_f_one_b();
  once.params_gathered_once = true;
  const PipelinePlan free = planned(g, mesh, 0, once);
  const int64_t peak = *std::max_element(free.rank_peak_bytes.begin(), free.rank_peak_bytes.end());
  // Three quarters of the memory-free plan's peak: memory binds.
  const int64_t limit = peak * 3 / 4;

  std::atomic<int> priced{0};
  once.on_memory_priced = [&priced] { ++priced; };
  std::vector<std::string> once_log, per_use_log, chosen_log;
  const PipelinePlan a = planned(g, mesh, limit, once, &once_log);
  EXPECT_EQ(priced.load(), 1);  // called once, however often memory is priced after
  PipelineOptions per_use = one_f_one_b();
  per_use.rank_memory_bound = false;  // as the planner's choice plans it
  const PipelinePlan b = planned(g, mesh, limit, per_use, &per_use_log);

  PipelineOptions choose = one_f_one_b();
  choose.choose_params_gathered_once = true;
  const PipelinePlan c = planned(g, mesh, limit, choose, &chosen_log);
  const bool a_fits = a.rank_peak_bytes[0] <= limit && a.rank_peak_bytes[1] <= limit;
  const bool b_fits = b.rank_peak_bytes[0] <= limit && b.rank_peak_bytes[1] <= limit;
  ASSERT_TRUE(a_fits || b_fits);
  const bool once_kept = a_fits != b_fits ? a_fits : a.step_us < b.step_us;
  EXPECT_EQ(c.params_gathered_once, once_kept);
  EXPECT_DOUBLE_EQ(c.step_us, once_kept ? a.step_us : b.step_us);
  EXPECT_DOUBLE_EQ(c.lower_bound_us, std::min({a.lower_bound_us, b.lower_bound_us, c.step_us}));
  // Both searches ran, the per-use one on its own thread, and their lines read as one after
  // the other: the once search's first.
  ASSERT_FALSE(once_log.empty());
  ASSERT_FALSE(per_use_log.empty());
  ASSERT_EQ(chosen_log.size(), once_log.size() + per_use_log.size());
  const auto head = [](const std::string& line) { return line.substr(0, line.find(" in ")); };
  for (size_t i = 0; i < once_log.size(); ++i) EXPECT_EQ(head(chosen_log[i]), head(once_log[i])) << i;
  for (size_t i = 0; i < per_use_log.size(); ++i)
    EXPECT_EQ(head(chosen_log[once_log.size() + i]), head(per_use_log[i])) << i;
  // Same plan again (the threads' timing does not enter).
  const PipelinePlan d = planned(g, mesh, limit, choose);
  EXPECT_EQ(d.step_us, c.step_us);
  EXPECT_EQ(d.lower_bound_us, c.lower_bound_us);
}

/// How many of `log`'s lines from `from` on are a rank floor's priced solve.
size_t priced_floor_lines(const std::vector<std::string>& log, size_t from = 0) {
  const auto priced = [](const std::string& l) { return l.find("handed to W") != std::string::npos; };
  return static_cast<size_t>(std::count_if(log.begin() + static_cast<std::ptrdiff_t>(from), log.end(), priced));
}

/// Interleaved 1F1B, two stages on each of two ranks of a 4-layer LLaMA, and a limit at which
/// memory binds (3/10 of the memory-free once plan's busiest rank): the ranks' floors are priced.
struct BindingCase {
  Graph g = testing::small_llama(4);
  Mesh mesh{{2, 2}, {"pp", "dp"}, h100()};
  PipelineOptions po = interleaved();
  int64_t limit = 0;

  BindingCase() {
    PipelineOptions once = po;
    once.params_gathered_once = true;
    const PipelinePlan free = planned(g, mesh, 0, once);
    limit = *std::max_element(free.rank_peak_bytes.begin(), free.rank_peak_bytes.end()) * 3 / 10;
  }
  static PipelineOptions interleaved() {
    PipelineOptions po = one_f_one_b();
    po.schedule = PipelineSchedule::kInterleaved1F1B;
    po.stages_per_rank = 2;
    return po;
  }
};

// Four plans with priced solves: 3 s in Release, the Release pass only.
TEST(PipelineGatherLarge, WhereTheOncePlanIsKeptOnlyItsSearchPricesRanks) {
  // Interleaved 1F1B, two stages on each of two ranks, under a limit that binds: the once
  // search bounds its ranks by their priced floors; per use, planned beside it and not kept
  // here, by its memory-free floors, and the bound kept is the lesser of the two searches'.
  const BindingCase t;
  const Graph& g = t.g;
  const Mesh& mesh = t.mesh;
  const PipelineOptions& po = t.po;
  const int64_t limit = t.limit;
  PipelineOptions once = po;
  once.params_gathered_once = true;
  std::vector<std::string> once_log, chosen_log;
  const PipelinePlan a = planned(g, mesh, limit, once, &once_log);
  ASSERT_GT(priced_floor_lines(once_log), 0U);  // the once search priced its ranks' memory
  PipelineOptions per_use = po;
  per_use.rank_memory_bound = false;
  const PipelinePlan b = planned(g, mesh, limit, per_use);
  PipelineOptions choose = po;
  choose.choose_params_gathered_once = true;
  const PipelinePlan c = planned(g, mesh, limit, choose, &chosen_log);
  ASSERT_GT(chosen_log.size(), once_log.size());  // per use was planned too
  ASSERT_TRUE(c.params_gathered_once);
  EXPECT_EQ(priced_floor_lines(chosen_log, once_log.size()), 0U);
  EXPECT_DOUBLE_EQ(c.lower_bound_us, std::min({a.lower_bound_us, b.lower_bound_us, c.step_us}));
}

// Two plans with priced solves: 2 s in Release, the Release pass only.
TEST(PipelineGatherLarge, RanksPricedAfterTheSearchRaiseItsBoundAndKeepItsPlan) {
  // The per-use search's pricing where its plan is kept (PipelineOptions::price_ranks_after):
  // the same search on memory-free floors, then each layout's ranks priced: the same plan,
  // a higher bound, still below the step.
  const BindingCase t;
  const Graph& g = t.g;
  const Mesh& mesh = t.mesh;
  const int64_t limit = t.limit;
  PipelineOptions po = t.po;
  po.params_gathered_once = true;
  po.rank_memory_bound = false;
  int asked = 0;
  std::vector<std::string> off_log, on_log;
  po.price_ranks_after = [&asked](const PipelinePlan&) { return ++asked, false; };
  const PipelinePlan off = planned(g, mesh, limit, po, &off_log);
  po.price_ranks_after = [&asked](const PipelinePlan&) { return ++asked, true; };
  const PipelinePlan on = planned(g, mesh, limit, po, &on_log);
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(priced_floor_lines(off_log), 0U);
  EXPECT_GT(priced_floor_lines(on_log), 0U);
  EXPECT_EQ(on.step_us, off.step_us);
  ASSERT_EQ(on.stages.size(), off.stages.size());
  for (size_t s = 0; s < on.stages.size(); ++s) EXPECT_EQ(on.stages[s].hi, off.stages[s].hi) << s;
  EXPECT_GT(on.lower_bound_us, off.lower_bound_us * (1 + 1e-6));
  EXPECT_LE(on.lower_bound_us, on.step_us);
  ASSERT_EQ(on.candidates.size(), off.candidates.size());
  for (size_t i = 0; i < on.candidates.size(); ++i)
    EXPECT_GE(on.candidates[i].lower_bound_us, off.candidates[i].lower_bound_us) << i;
}

TEST(PipelineGather, WithoutAMemoryLimitOnlyTheOnceSearchRuns) {
  const Graph g = testing::small_llama(2);
  const Mesh mesh({2, 2}, {"pp", "dp"}, h100());
  PipelineOptions once = one_f_one_b();
  once.params_gathered_once = true;
  std::atomic<int> priced{0};
  once.on_memory_priced = [&priced] { ++priced; };
  std::vector<std::string> once_log, chosen_log;
  const PipelinePlan a = planned(g, mesh, 0, once, &once_log);
  EXPECT_EQ(priced.load(), 0);
  PipelineOptions choose = one_f_one_b();
  choose.choose_params_gathered_once = true;
  const PipelinePlan c = planned(g, mesh, 0, choose, &chosen_log);
  EXPECT_TRUE(c.params_gathered_once);
  EXPECT_DOUBLE_EQ(c.step_us, a.step_us);
  EXPECT_EQ(chosen_log.size(), once_log.size());
}

}  // namespace
}  // namespace autoshard

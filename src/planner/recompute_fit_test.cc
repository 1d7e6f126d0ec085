// The least recomputation that fits, the sharding held: against every mode assignment of a
// small LLaMA's regions.
#include "planner/recompute_fit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "mesh/hardware.h"
#include "planner/recompute_block.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {
namespace {

/// A 2-layer tiny LLaMA on 2 devices with recomputation nodes, memory-free: 4 regions.
struct Case {
  Graph g = testing::tiny_llama(2);
  Mesh mesh = Mesh({2}, {"dp"}, *hardware_preset("h100"));
  ShardingOptimizer so{g, mesh, options()};
  static PlannerOptions options() {
    PlannerOptions o;
    o.objective = Objective::kAdditive;
    o.recompute = RecomputePolicy::kAuto;
    return o;
  }
  std::optional<RecomputeFigures> figures(const std::vector<StrategyIdx>& c) {
    const Plan p = so.evaluate(c);
    if (!std::isfinite(p.objective_us)) return std::nullopt;
    return RecomputeFigures{p.objective_us, static_cast<double>(p.peak_memory_bytes)};
  }
};

/// Every assignment of modes to the regions (mixed radix), evaluated.
std::vector<std::pair<std::vector<StrategyIdx>, RecomputeFigures>> every_assignment(Case& c,
                                                                                  const std::vector<StrategyIdx>& base) {
  const BuiltProblem& bp = c.so.problem();
  std::vector<StrategyIdx> mode(bp.recompute_regions.size(), 0);
  std::vector<std::pair<std::vector<StrategyIdx>, RecomputeFigures>> out;
  for (;;) {
    const auto choice = with_region_modes(bp, base, mode);
    if (const auto f = c.figures(choice)) out.emplace_back(choice, *f);
    size_t r = 0;
    while (r < mode.size() && ++mode[r] == static_cast<StrategyIdx>(bp.recompute_regions[r].modes.size())) mode[r++] = 0;
    if (r == mode.size()) return out;
  }
}

TEST(RecomputeFit, SetsTheRegionsModesAndTheirAuxiliaryNodes) {
  Case c;
  const Plan free_plan = c.so.get_solution();
  ASSERT_TRUE(free_plan.has_solution);
  const BuiltProblem& bp = c.so.problem();
  ASSERT_EQ(bp.recompute_regions.size(), 4u);
  const std::vector<StrategyIdx> base = c.so.solution_choice();
  std::vector<StrategyIdx> mode(4, -1);
  const auto& r0 = bp.recompute_regions[0];
  const auto full = std::find(r0.modes.begin(), r0.modes.end(), RecomputePolicy::kFull);
  ASSERT_NE(full, r0.modes.end());
  mode[0] = static_cast<StrategyIdx>(full - r0.modes.begin());
  const auto choice = with_region_modes(bp, base, mode);
  EXPECT_EQ(choice[static_cast<size_t>(r0.decision)], mode[0]);
  for (size_t r = 1; r < 4; ++r)  // -1: left as they were
    EXPECT_EQ(choice[static_cast<size_t>(bp.recompute_regions[r].decision)],
              base[static_cast<size_t>(bp.recompute_regions[r].decision)]);
  // Recomputing costs time and frees memory; the graph nodes keep their strategies.
  const Plan a = c.so.evaluate(base), b = c.so.evaluate(choice);
  EXPECT_GT(b.objective_us, a.objective_us);
  EXPECT_LT(b.peak_memory_bytes, a.peak_memory_bytes);
  for (NodeIdx i = 0; i < c.g.size(); ++i) {
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v >= 0) {
      EXPECT_EQ(choice[static_cast<size_t>(v)], base[static_cast<size_t>(v)]);
    }
  }
}

// Between keeping everything and recomputing everything, every budget gets a plan that fits,
// no slower than needed by more than the cheapest fitting assignment's own step to the next.
TEST(RecomputeFit, FindsAFittingMixNearTheCheapest) {
  Case c;
  ASSERT_TRUE(c.so.get_solution().has_solution);
  const std::vector<StrategyIdx> base = c.so.solution_choice();
  const auto all = every_assignment(c, base);
  ASSERT_GE(all.size(), 81u);  // 4 regions, 3 modes each (keep, selective, full)
  double least = 1e300, most = 0;
  for (const auto& [choice, f] : all) least = std::min(least, f.need_bytes), most = std::max(most, f.need_bytes);
  ASSERT_LT(least, most);
  int mixes = 0;
  for (int i = 1; i < 8; ++i) {
    const double budget = least + (most - least) * i / 8;
    double cheapest = 1e300, full_time = 0;
    for (const auto& [choice, f] : all) {
      if (f.need_bytes <= budget) cheapest = std::min(cheapest, f.time_us);
      if (f.need_bytes == least) full_time = std::max(full_time, f.time_us);
    }
    const auto fit = least_recompute_that_fits(c.so.problem(), base, budget,
                                               [&](const auto& ch) { return c.figures(ch); });
    ASSERT_TRUE(fit) << "budget " << budget;
    EXPECT_LE(fit->figures.need_bytes, budget);
    EXPECT_EQ(c.figures(fit->choice)->time_us, fit->figures.time_us);
    EXPECT_GE(fit->figures.time_us, cheapest);
    EXPECT_LE(fit->evaluations, 16);
    // Within 10 % of the cheapest assignment that fits (one region's step at most here).
    EXPECT_LE(fit->figures.time_us, cheapest * 1.10) << "budget " << budget;
    mixes += fit->figures.time_us < full_time;
  }
  EXPECT_GE(mixes, 6);  // not everything recomputed: less than full where the budget allows
  // Under the least need of all, nothing; with room for everything kept, the base as it is.
  EXPECT_FALSE(least_recompute_that_fits(c.so.problem(), base, least - 1, [&](const auto& ch) { return c.figures(ch); }));
  const auto roomy = least_recompute_that_fits(c.so.problem(), base, most, [&](const auto& ch) { return c.figures(ch); });
  ASSERT_TRUE(roomy);
  EXPECT_EQ(roomy->evaluations, 5);  // the probes (keep, 2 classes x 2 modes); keep fits
}

}  // namespace
}  // namespace autoshard

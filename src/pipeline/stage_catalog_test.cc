// The stage catalog's one key: each use's plans are one run in (kind, k, memory) order, which
// the split tables and the pattern sources read in.
#include "pipeline/stage_catalog.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pipeline/pipeline.h"

namespace autoshard {
namespace {

std::shared_ptr<const StageSolve> plan_of(double us) {
  auto s = std::make_shared<StageSolve>();
  s->microbatch_us = us;
  return s;
}

TEST(StageCatalog, EachUseIsOneRunInKindSizeAndMemoryOrder) {
  StageCatalog c;
  c.put(StageKey::fitted(kStageMid, 4, StageMemory{3, 100, true}), plan_of(1));
  c.put(StageKey::memory_free(kStageLast, 2), plan_of(2));
  c.put(StageKey::memory_free(kStageMid, 5), plan_of(3));
  c.put(StageKey::fitted(kStageMid, 4, StageMemory{2, 100, true}), plan_of(4));
  c.put(StageKey::memory_free(kStageMid, 2), plan_of(5));
  c.put(StageKey::rank_fit(kStageMid, 4, 2, 1, 90), nullptr);  // a refit that found none
  c.put(StageKey::fitted(kStageFirst, 7, StageMemory{1, 50, false}), plan_of(6));
  std::vector<double> free_order, fitted_order, mid_sizes;
  for (const auto& [key, s] : c.of(StagePlanUse::kMemoryFree)) free_order.push_back(s->microbatch_us);
  for (const auto& [key, s] : c.of(StagePlanUse::kFitted)) fitted_order.push_back(s->microbatch_us);
  for (const auto& [key, s] : c.memory_free(kStageMid)) mid_sizes.push_back(key.k);
  EXPECT_EQ(free_order, (std::vector<double>{5, 3, 2}));    // mid 2, mid 5, last 2
  EXPECT_EQ(fitted_order, (std::vector<double>{6, 4, 1}));  // first 7; mid 4 at 2 then 3 in flight
  EXPECT_EQ(mid_sizes, (std::vector<double>{2, 5}));
  EXPECT_TRUE(c.memory_free(kStageFirst).empty());
  EXPECT_TRUE(c.memory_free(kStageBoth).empty());
  EXPECT_EQ(c.count(StagePlanUse::kRankFit), 1u);
  // A catalogued "none" is known: a rank refit is not tried again.
  EXPECT_TRUE(c.has(StageKey::rank_fit(kStageMid, 4, 2, 1, 90)));
  EXPECT_EQ(c.find(StageKey::rank_fit(kStageMid, 4, 2, 1, 90)), nullptr);
  EXPECT_FALSE(c.has(StageKey::rank_fit(kStageMid, 4, 2, 0, 90)));
  // The fitted key leaves rank_limit out: it changes a plan's bound, not which plans fit.
  EXPECT_EQ(StageKey::fitted(kStageMid, 4, StageMemory{3, 100, true, false}),
            StageKey::fitted(kStageMid, 4, StageMemory{3, 100, true, true}));
  EXPECT_EQ(c.find(StageKey::fitted(kStageMid, 4, StageMemory{3, 100, true, false}))->microbatch_us, 1);
}

}  // namespace
}  // namespace autoshard

#include "pipeline/stage_catalog.h"

#include <iterator>
#include <limits>

namespace autoshard {

namespace {

/// The least key of `use` (and of `kind` from `kind` on): every field at its least value.
StageKey least_key(StagePlanUse use, StageKind kind) {
  const double lo = -std::numeric_limits<double>::infinity();
  return {use, kind, std::numeric_limits<int32_t>::min(), lo, std::numeric_limits<int64_t>::min(), false, lo, lo};
}

}  // namespace

StageCatalog::PlanPtr StageCatalog::find(const StageKey& key) const {
  const auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : it->second;
}

StageCatalog::Range StageCatalog::of(StagePlanUse use) const {
  const auto next = static_cast<StagePlanUse>(static_cast<int32_t>(use) + 1);
  return {plans_.lower_bound(least_key(use, kStageFirst)), plans_.lower_bound(least_key(next, kStageFirst))};
}

StageCatalog::Range StageCatalog::memory_free(StageKind kind) const {
  const auto next = static_cast<StageKind>(static_cast<int32_t>(kind) + 1);
  return {plans_.lower_bound(least_key(StagePlanUse::kMemoryFree, kind)),
          plans_.lower_bound(least_key(StagePlanUse::kMemoryFree, next))};
}

size_t StageCatalog::count(StagePlanUse use) const {
  const Range r = of(use);
  return static_cast<size_t>(std::distance(r.begin(), r.end()));
}

}  // namespace autoshard

#pragma once
/// Every stage plan the pipeline search has made or evaluated, by StageKey: the memory-free
/// plans (the relaxation), the plans fitted to a stage budget and the plans refit to one
/// rank.  The split tables (pipeline/pipeline_layout.h) read a use's plans in key order, and
/// the stage-plan sources (pipeline/stage_source.h) read the plans solved so far; the search
/// writes the catalog between parallel rounds only, so a round reads the same catalog
/// whatever the threads' timing.
#include <map>
#include <memory>

#include "pipeline/stage_key.h"

namespace autoshard {

struct StageSolve;

class StageCatalog {
 public:
  using PlanPtr = std::shared_ptr<const StageSolve>;
  using Map = std::map<StageKey, PlanPtr>;

  /// A use's plans, in (kind, k, inflight, budget, grads, deferred) order.
  struct Range {
    Map::const_iterator b, e;
    Map::const_iterator begin() const { return b; }
    Map::const_iterator end() const { return e; }
    bool empty() const { return b == e; }
  };

  /// The plan under `key`, or nullptr.
  PlanPtr find(const StageKey& key) const;
  bool has(const StageKey& key) const { return plans_.count(key) > 0; }
  /// Sets (or replaces) the plan under `key`.
  void put(const StageKey& key, PlanPtr plan) { plans_[key] = std::move(plan); }
  Range of(StagePlanUse use) const;
  /// The memory-free plans of `kind`, ascending k.
  Range memory_free(StageKind kind) const;
  /// How many plans `use` has.
  size_t count(StagePlanUse use) const;

 private:
  Map plans_;
};

}  // namespace autoshard

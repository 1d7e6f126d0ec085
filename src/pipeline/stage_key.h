#pragma once
/// What names a stage plan in the pipeline search: the canonical stage (a kind and its number
/// of layers), the memory it is planned for, and what the plan is for (StageKey).  With
/// identical layers a stage's problem depends on its kind and size only, so one plan per key
/// serves every split that uses it (pipeline/pipeline.h).
#include <cstdint>
#include <tuple>
#include <utility>

namespace autoshard {

/// Stage kinds of the cost tables: whether the stage also holds what runs before the first
/// layer (embedding) and after the last (head, loss).
enum StageKind : int32_t { kStageFirst = 0, kStageMid = 1, kStageLast = 2, kStageBoth = 3 };

/// The kind of stage position s of S.
StageKind kind_of(int32_t s, int32_t S);
/// Layers [lo, hi) of the canonical stage of a kind with k layers (of L).
std::pair<int32_t, int32_t> canonical_range(StageKind kind, int32_t k, int32_t L);

/// What a stage may use: `inflight` microbatches in flight on its rank, `budget` bytes per
/// device (0: no limit).
struct StageMemory {
  double inflight = 1;
  int64_t budget = 0;
  /// The budget also holds the gradients the runtime sums over the step (StageSolve::
  /// deferred_grad_bytes): with one stage per rank, whose budget is the rank's limit.  With v
  /// stages per rank the budget is a share of the rank and the rank's assembly counts them.
  bool grads = true;
  /// The budget is the rank's own limit (one stage per rank): only then is it a relaxation
  /// whose stage bounds enter the pipeline's bound, and only then does the stage's priced
  /// memory (StageBuilder::price_memory) give it a bound.  Not part of the key: it changes the
  /// bound a plan is given, not which plans fit.
  bool rank_limit = true;
};

/// What a catalogued plan is for.  The order is the catalog's first key field, so that each
/// use's plans are one contiguous run in (kind, k, memory) order.
enum class StagePlanUse : int32_t {
  kMemoryFree = 0,  ///< no device limit: the relaxation every bound starts from
  kFitted = 1,      ///< under a stage budget with the most in flight of its kind
  kRankFit = 2,     ///< refit to one rank's in-flight count, hand-overs and part of its limit
  kPricedFloor = 3, ///< a memory-free solve with the usage at t* priced (no plan kept)
};

/// The one key of every stage table of the search (StageCatalog, the priced floors, the rank
/// sources).  Fields a use does not need stay at their defaults.
struct StageKey {
  StagePlanUse use = StagePlanUse::kMemoryFree;
  StageKind kind = kStageMid;
  int32_t k = 1;
  double inflight = 1;   ///< microbatches in flight on the rank
  int64_t budget = 0;    ///< bytes per device; 0: no limit
  bool grads = true;     ///< the budget holds the step's summed gradients (StageMemory::grads)
  double deferred = 0;   ///< microbatches whose B handed tensors to a W not run yet
  double price = 0;      ///< us per byte of usage at t* (priced floors)

  static StageKey memory_free(StageKind kind, int32_t k) { return {StagePlanUse::kMemoryFree, kind, k}; }
  static StageKey fitted(StageKind kind, int32_t k, StageMemory mem) {
    return {StagePlanUse::kFitted, kind, k, mem.inflight, mem.budget, mem.grads};
  }
  static StageKey rank_fit(StageKind kind, int32_t k, double inflight, double deferred, int64_t budget) {
    return {StagePlanUse::kRankFit, kind, k, inflight, budget, true, deferred};
  }
  static StageKey priced_floor(StageKind kind, int32_t k, double inflight, double deferred, double price) {
    return {StagePlanUse::kPricedFloor, kind, k, inflight, 0, true, deferred, price};
  }
  auto tied() const { return std::tie(use, kind, k, inflight, budget, grads, deferred, price); }
  friend bool operator<(const StageKey& a, const StageKey& b) { return a.tied() < b.tied(); }
  friend bool operator==(const StageKey& a, const StageKey& b) { return a.tied() == b.tied(); }
};

}  // namespace autoshard

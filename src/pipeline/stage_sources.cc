/// The stage-plan sources that evaluate rather than solve (pipeline/stage_source.h): patterns
/// of solved sizes (pipeline/stage_pattern.h) at another size, and the plans at hand of the
/// fitted search.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>

#include "pipeline/stage_builder.h"
#include "pipeline/stage_source.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

/// Two solved stages of one kind around a size.
struct Bracket {
  std::shared_ptr<const StageSolve> below, above;
  int32_t kb = 0, ka = 0;
};

/// The cheapest of the bracket's patterns evaluated at k (every layer recomputed when
/// `full_recompute`), its figures set and no bound yet; nullptr when no pattern maps.
std::shared_ptr<StageSolve> between(StageBuilder& b_, StageKind kind, int32_t k, const Bracket& b, bool full_recompute) {
  const LayerMap& m = b_.layers();
  auto range = [&](int32_t n) { return canonical_range(kind, n, b_.num_layers()); };
  const auto pb = stage_pattern(b.below->sg, b.below->plan, m, range(b.kb).first, range(b.kb).second);
  const auto pa = stage_pattern(b.above->sg, b.above->plan, m, range(b.ka).first, range(b.ka).second);
  if (!pa) return nullptr;
  // One pattern at both ends is optimal between them up to their gaps; where they differ,
  // each is a candidate (the one below only with a middle layer of its own).
  std::vector<StagePattern> pats;
  if (auto both = pb ? merge_patterns(*pb, *pa) : std::nullopt) pats.push_back(std::move(*both));
  else {
    pats.push_back(*pa);
    if (pb && b.kb >= 3) pats.push_back(*pb);
  }
  return b_.at_size(kind, k, pats, full_recompute);
}

/// Gives `s` its bound and status and says so when its gap is no wider than the bracket's
/// solves left (else the caller solves).
bool accept_between(const StageBuilder& b_, StageSolve& s, StageKind kind, int32_t k, const Bracket& b, double bound,
                    std::string_view what) {
  // No wider a gap (in us) than the solves at its ends left, or the search's target: else
  // solve it.  With one pattern at both ends that always holds for the memory-free plans (the
  // plan's cost and the chord both interpolate the ends).
  bound = std::min(bound, s.plan.objective_us);
  const double allowed = std::max({b.below->microbatch_us - b.below->lower_bound_us,
                                   b.above->microbatch_us - b.above->lower_bound_us,
                                   b_.pipeline_options().target_gap * s.plan.objective_us});
  if (s.plan.objective_us - bound > allowed * (1 + 1e-9)) return false;
  s.lower_bound_us = s.plan.lower_bound_us = bound;
  s.plan.status = bound >= s.plan.objective_us ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  b_.say(fmt::format("stage kind {} with {} layers{}: the plan of {} or {} layers, {:.3f} us, bound {:.3f} us, in {:.3f}s",
                     static_cast<int>(kind), k, what, b.kb, b.ka, s.plan.objective_us,
                     s.lower_bound_us, s.seconds));
  return true;
}

/// The memory-free (kind, k) as the pattern of its nearest solved sizes, or nullptr.
class SizePattern : public StagePlanSource {
 public:
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve*,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    const StageKind kind = req.kind;
    const int32_t k = req.k;
    if (kind == kStageBoth) return nullptr;
    // The nearest solved sizes below and above k (evaluated ones are no new information).
    Bracket b;
    for (const auto& [key, sv] : cx.catalog.memory_free(kind)) {
      if (sv->interpolated || !sv->plan.has_solution) continue;
      if (key.k < k && key.k >= 2) b.below = sv, b.kb = key.k;
      if (key.k > k && !b.above) b.above = sv, b.ka = key.k;
    }
    if (!b.below || !b.above) return nullptr;
    auto s = between(cx.builder, kind, k, b, false);
    if (!s) return nullptr;
    // The stage optimum is concave in k (pipeline.h): the chord of the proven bounds holds.
    const double w = static_cast<double>(k - b.kb) / (b.ka - b.kb);
    const double chord = b.below->lower_bound_us + w * (b.above->lower_bound_us - b.below->lower_bound_us);
    return accept_between(cx.builder, *s, kind, k, b, std::max(chord, node_floor(*s->optimizer)), "") ? s : nullptr;
  }
};

/// The memory-free (kind, k) solved.
class MemoryFreeSolve : public StagePlanSource {
 public:
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve*,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    return cx.builder.solve(req.kind, req.k, StageMemory{}, 0);
  }
};

/// (kind, k) under its memory as the pattern of the nearest fitted plans of its kind and
/// in-flight count that recompute every layer (the plans at hand the fitted search prefers
/// for large stages): memory and cost are affine in the layers, so it is checked against the
/// memory and bounded by the memory-free bound.  Without such a bracket, or where it does not
/// fit, extend_fitted (with PipelineOptions::extend_fitted); nullptr when neither gives one.
class FittedPattern : public StagePlanSource {
 public:
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve* relaxed,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    const StageKind kind = req.kind;
    const int32_t k = req.k;
    const StageMemory mem = req.mem;
    if (kind == kStageBoth) return nullptr;
    const bool extend = cx.builder.pipeline_options().extend_fitted;
    // The nearest fitted plans of the kind for as many in flight, both with every layer
    // recomputed (their recomputation is no decision, so their strategies are the pattern).
    Bracket b;
    for (const auto& [key, sv] : cx.catalog.of(StagePlanUse::kFitted)) {
      const int32_t kf = key.k;
      if (key.kind != kind || key.inflight != mem.inflight || sv->interpolated || !std::isfinite(sv->microbatch_us) ||
          sv->optimizer->options().recompute != RecomputePolicy::kFull)
        continue;
      if (kf < k && kf >= 2 && kf >= b.kb) b.below = sv, b.kb = kf;
      if (kf > k && (!b.above || kf < b.ka)) b.above = sv, b.ka = kf;
    }
    if (!b.below || !b.above) return extend ? extend_fitted(cx, kind, k, mem, *relaxed) : nullptr;
    auto s = between(cx.builder, kind, k, b, true);
    if (!s || !StageBuilder::fits(*s, mem)) return extend ? extend_fitted(cx, kind, k, mem, *relaxed) : nullptr;
    s->memory_budget = mem.budget;
    // A plan under a memory limit costs at least the memory-free optimum.
    const std::string what = fmt::format(" ({} in flight, budget {} B)", mem.inflight, mem.budget);
    return accept_between(cx.builder, *s, kind, k, b, relaxed->lower_bound_us, what) ? s : nullptr;
  }
};

/// The memory-free plan with every region recomputed (no solve).
class FullRecompute : public StagePlanSource {
 public:
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve* relaxed,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    return cx.builder.recompute_all(*relaxed, req.mem);
  }
};

/// torchtitan's layout with full recomputation (StageBuilder::recipe).
class RecipeLayout : public StagePlanSource {
 public:
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve*,
                                   const std::vector<std::shared_ptr<StageSolve>>&) const override {
    return cx.builder.recipe(req.kind, req.k, req.mem);
  }
};

/// A plan with only as much recomputation as the budget needs: the memory-free plan's
/// (`from` -1) or the plan an earlier source of the list gave (`from`: its index).
class LeastRecompute : public StagePlanSource {
 public:
  LeastRecompute(int from, std::string_view what) : from_(from), what_(what) {}
  std::shared_ptr<StageSolve> plan(const StageSourceContext& cx, const StageRequest& req, const StageSolve* relaxed,
                                   const std::vector<std::shared_ptr<StageSolve>>& earlier) const override {
    const StageSolve* from = from_ < 0 ? relaxed : earlier.at(static_cast<size_t>(from_)).get();
    return from ? cx.builder.least_recompute(*from, req.mem, what_) : nullptr;
  }

 private:
  int from_;
  std::string_view what_;
};

}  // namespace

std::shared_ptr<const StageSolve> better_of(const StageSolve& was, std::shared_ptr<StageSolve> solved) {
  std::shared_ptr<StageSolve> s = solved;
  if (!s->plan.has_solution || !(s->microbatch_us < was.microbatch_us)) s = std::make_shared<StageSolve>(was);
  s->lower_bound_us = std::min(std::max(solved->lower_bound_us, was.lower_bound_us), s->microbatch_us);
  s->interpolated = false;  // solved now: a bracket end like any solve
  return s;
}

StageSources at_hand_sources(const PlannerOptions& opt) {
  StageSources out;
  const RecomputePolicy rp = opt.recompute;
  // Every region recomputed is a plan where the policy allows full recomputation; a mix per
  // region (least_recompute) where it lets each region choose.
  const bool full_allowed = rp == RecomputePolicy::kIfNeeded || rp == RecomputePolicy::kAuto || rp == RecomputePolicy::kFull;
  const bool mixes_allowed = rp == RecomputePolicy::kIfNeeded || rp == RecomputePolicy::kAuto;
  if (!full_allowed) return out;
  out.push_back(std::make_unique<FullRecompute>());
  out.push_back(std::make_unique<RecipeLayout>());
  if (mixes_allowed) {
    out.push_back(std::make_unique<LeastRecompute>(-1, "its memory-free plan"));
    out.push_back(std::make_unique<LeastRecompute>(1, "torchtitan's layout"));
  }
  return out;
}

StageSourceLists stage_source_lists(const PlannerOptions& opt, const PipelineOptions&) {
  StageSourceLists l;
  l.memory_free.push_back(std::make_unique<SizePattern>());
  l.memory_free.push_back(std::make_unique<MemoryFreeSolve>());
  l.fitted.push_back(std::make_unique<FittedPattern>());
  l.fitted.push_back(fitted_search(at_hand_sources(opt)));
  return l;
}

std::shared_ptr<StageSolve> extend_fitted(const StageSourceContext& cx, StageKind kind, int32_t k, StageMemory mem,
                                          const StageSolve& relaxed) {
  if (kind == kStageBoth || k < 2) return nullptr;  // a one-layer stage is no pattern's size
  // The sources: solved (not evaluated) fitted plans of the kind with a pattern (>= 2 layers),
  // the same in-flight count first, then the nearest size, then the smaller.
  struct Source {
    bool other_inflight;
    int32_t distance, size;
    std::shared_ptr<const StageSolve> s;
  };
  std::vector<Source> sources;
  for (const auto& [key, sv] : cx.catalog.of(StagePlanUse::kFitted)) {
    const StageKind kk = key.kind;
    const int32_t kf = key.k;
    const double f = key.inflight;
    // A plan of the same size under another budget is no pattern to extend: there the
    // memory-limited solve finds a sharding a little dearer where recomputation costs more
    // (llama3-405b --layers 32: 86.9 ms solved against 104.6 ms for the pattern).
    if (kk != kind || kf < 2 || kf == k || sv->interpolated || sv->extended || !sv->plan.has_solution || !std::isfinite(sv->microbatch_us))
      continue;
    sources.push_back({f != mem.inflight, std::abs(kf - k), kf, sv});
  }
  std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
    return std::tie(a.other_inflight, a.distance, a.size) < std::tie(b.other_inflight, b.distance, b.size);
  });
  std::shared_ptr<StageSolve> best;
  std::vector<int32_t> tried;
  for (const Source& src : sources) {
    if (tried.size() == 2) break;
    if (std::find(tried.begin(), tried.end(), src.size) != tried.end()) continue;  // one pattern per size
    tried.push_back(src.size);
    auto [lo, hi] = canonical_range(kind, src.size, cx.builder.num_layers());
    auto pat = stage_pattern(src.s->sg, src.s->plan, cx.builder.layers(), lo, hi);
    if (!pat) continue;
    auto pattern = cx.builder.at_size(kind, k, {with_middle_layers(std::move(*pat))}, false);
    if (!pattern) continue;
    auto s = cx.builder.least_recompute(*pattern, mem, fmt::format("the pattern of {} layers", src.size));
    if (s && StageBuilder::fits(*s, mem) && (!best || s->microbatch_us < best->microbatch_us)) best = std::move(s);
  }
  if (!best) return nullptr;
  best->extended = true;
  best->layer_floor_us = relaxed.layer_floor_us;
  // A plan under a memory limit costs at least the memory-free optimum.
  best->lower_bound_us = best->plan.lower_bound_us = std::min(relaxed.lower_bound_us, best->microbatch_us);
  cx.builder.say(fmt::format("stage kind {} with {} layers ({} in flight, budget {} B): a solved pattern with the least "
                  "recomputation that fits, {:.3f} us, bound {:.3f} us",
                  static_cast<int>(kind), k, mem.inflight, mem.budget, best->microbatch_us, best->lower_bound_us));
  return best;
}

}  // namespace autoshard

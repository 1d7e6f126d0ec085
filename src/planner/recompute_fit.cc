#include "planner/recompute_fit.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "planner/recompute.h"

namespace autoshard {

namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

/// A mode other than a class's base and what it changes per region (from its probe).
struct ModeChange {
  StrategyIdx mode = 0;
  RecomputeFigures per_region;
};

/// Regions with the same activation class and modes, in bp's (forward) order.
struct RegionClass {
  std::vector<int32_t> regions;
  StrategyIdx base = 0;            ///< the mode every probe leaves the others in: keep if allowed
  std::vector<ModeChange> others;  ///< the other modes, by the memory they save (most first)
};

std::vector<RegionClass> region_classes(const BuiltProblem& bp) {
  std::map<std::pair<std::string, std::vector<RecomputePolicy>>, size_t> index;
  std::vector<RegionClass> out;
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r) {
    const auto& reg = bp.recompute_regions[r];
    if (reg.modes.size() < 2) continue;  // nothing to decide
    const auto [it, fresh] = index.emplace(std::make_pair(reg.region, reg.modes), out.size());
    if (fresh) {
      RegionClass c;
      const auto keep = std::find(reg.modes.begin(), reg.modes.end(), RecomputePolicy::kNone);
      c.base = keep == reg.modes.end() ? 0 : static_cast<StrategyIdx>(keep - reg.modes.begin());
      for (StrategyIdx m = 0; m < static_cast<StrategyIdx>(reg.modes.size()); ++m)
        if (m != c.base) c.others.push_back({m, {}});
      out.push_back(std::move(c));
    }
    out[it->second].regions.push_back(static_cast<int32_t>(r));
  }
  return out;
}

/// How many regions of each class take each of its other modes (per class, per other mode).
using Counts = std::vector<std::vector<int32_t>>;

/// An estimated plan: the sums of the probes' per-region changes.
struct Estimate {
  double time_us = 0, need_bytes = 0;
  Counts counts;
};

/// The estimates no other beats in both time and need, by need ascending (time descending).
std::vector<Estimate> pareto(std::vector<Estimate> v) {
  std::stable_sort(v.begin(), v.end(), [](const Estimate& a, const Estimate& b) {
    return std::tie(a.need_bytes, a.time_us) < std::tie(b.need_bytes, b.time_us);
  });
  std::vector<Estimate> front;
  for (Estimate& e : v)
    if (front.empty() || e.time_us < front.back().time_us) front.push_back(std::move(e));
  return front;
}

/// Every way to give `left` regions of one class its other modes (the rest stay at base).
void enumerate(const RegionClass& c, size_t mode, int32_t left, std::vector<int32_t>& n, Estimate e,
               std::vector<Estimate>& out) {
  if (mode == c.others.size()) {
    e.counts.push_back(n);
    out.push_back(std::move(e));
    return;
  }
  for (int32_t k = 0; k <= left; ++k) {
    n[mode] = k;
    Estimate next = e;
    next.time_us += k * c.others[mode].per_region.time_us;
    next.need_bytes += k * c.others[mode].per_region.need_bytes;
    enumerate(c, mode + 1, left - k, n, std::move(next), out);
  }
  n[mode] = 0;
}

/// Per region, the mode `counts` gives it: per class, its other modes in order to its first
/// regions (the earliest layers, whose activations live longest), the rest at base.
std::vector<StrategyIdx> modes_of(const BuiltProblem& bp, const std::vector<RegionClass>& classes, const Counts& counts) {
  std::vector<StrategyIdx> mode(bp.recompute_regions.size(), -1);
  for (size_t c = 0; c < classes.size(); ++c) {
    size_t next = 0;
    for (size_t m = 0; m < classes[c].others.size(); ++m)
      for (int32_t k = 0; k < counts[c][m]; ++k) mode[at(classes[c].regions[next++])] = classes[c].others[m].mode;
    for (; next < classes[c].regions.size(); ++next) mode[at(classes[c].regions[next])] = classes[c].base;
  }
  return mode;
}

}  // namespace

std::vector<StrategyIdx> with_region_modes(const BuiltProblem& bp, std::vector<StrategyIdx> choice,
                                           const std::vector<StrategyIdx>& region_mode) {
  for (size_t r = 0; r < bp.recompute_regions.size() && r < region_mode.size(); ++r)
    if (region_mode[r] >= 0) choice.at(at(bp.recompute_regions[r].decision)) = region_mode[r];
  for (const auto& a : bp.recompute_aux) choice.at(at(a.node)) = -1;
  complete_recompute_choice(bp, choice);
  return choice;
}

std::optional<RecomputeFit> least_recompute_that_fits(const BuiltProblem& bp, const std::vector<StrategyIdx>& base,
                                                      double budget, const RecomputeEvaluator& evaluate,
                                                      int32_t max_evaluations) {
  std::vector<RegionClass> classes = region_classes(bp);
  if (classes.empty()) return std::nullopt;
  RecomputeFit fit;
  // Exact evaluations, each assignment once.
  std::map<std::vector<StrategyIdx>, std::optional<RecomputeFigures>> seen;
  auto exact = [&](const Counts& counts) -> std::pair<std::vector<StrategyIdx>, std::optional<RecomputeFigures>> {
    std::vector<StrategyIdx> choice = with_region_modes(bp, base, modes_of(bp, classes, counts));
    const auto it = seen.find(choice);
    if (it != seen.end()) return {choice, it->second};
    ++fit.evaluations;
    auto f = evaluate(choice);
    seen.emplace(choice, f);
    return {std::move(choice), f};
  };
  Counts none(classes.size());
  for (size_t c = 0; c < classes.size(); ++c) none[c].assign(classes[c].others.size(), 0);
  const std::optional<RecomputeFigures> keep = exact(none).second;
  if (!keep) return std::nullopt;
  // One probe per (class, other mode): all the class's regions in it.
  for (size_t c = 0; c < classes.size(); ++c) {
    RegionClass& rc = classes[c];
    for (size_t m = 0; m < rc.others.size(); ++m) {
      Counts probe = none;
      probe[c][m] = static_cast<int32_t>(rc.regions.size());
      const auto f = exact(probe).second;
      const double n = static_cast<double>(rc.regions.size());
      // A mode with no finite cost is never estimated as worth taking.
      rc.others[m].per_region = f ? RecomputeFigures{(f->time_us - keep->time_us) / n, (f->need_bytes - keep->need_bytes) / n}
                                  : RecomputeFigures{1e300, 0};
    }
    // The modes that save the most go to the first regions (modes_of).
    std::stable_sort(rc.others.begin(), rc.others.end(), [](const ModeChange& a, const ModeChange& b) {
      return a.per_region.need_bytes < b.per_region.need_bytes;
    });
  }
  // The joint front, class by class (each class's front crossed with the ones before).
  std::vector<Estimate> front{Estimate{keep->time_us, keep->need_bytes, {}}};
  for (const RegionClass& rc : classes) {
    std::vector<Estimate> crossed;
    for (const Estimate& e : front) {
      std::vector<int32_t> n(rc.others.size(), 0);
      enumerate(rc, 0, static_cast<int32_t>(rc.regions.size()), n, e, crossed);
    }
    front = pareto(std::move(crossed));
  }
  // From the fastest estimate under the budget towards less memory, until one fits exactly.
  auto first = std::upper_bound(front.begin(), front.end(), budget,
                                [](double b, const Estimate& e) { return b < e.need_bytes; });
  for (auto it = std::make_reverse_iterator(first); it != front.rend() && fit.evaluations < max_evaluations; ++it) {
    auto [choice, f] = exact(it->counts);
    if (f && f->need_bytes <= budget) {
      fit.choice = std::move(choice);
      fit.figures = *f;
      return fit;
    }
  }
  return std::nullopt;
}

}  // namespace autoshard

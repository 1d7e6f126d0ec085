#include "pipeline/pipeline_layout.h"

#include <algorithm>
#include <cmath>

/// The split tables of one (schedule, v): per stage position and size, the catalogued stage
/// plans' bounds and costs (pipeline/pipeline_dp.h runs the split DPs on them).
namespace autoshard::pipeline_detail {

int64_t Layout::budget(int32_t k) const {
  if (limit <= 0 || v == 1) return limit;
  return std::min(limit, static_cast<int64_t>(std::ceil(static_cast<double>(limit) * k * P / L)));
}

Layout layout_of(PipelineSchedule sched, int32_t P, int32_t L, int32_t v, int32_t M, int64_t limit) {
  Layout l{sched, v, P * v, P, L, limit, {}, {}};
  double most[4] = {0, 0, 0, 0};
  for (int32_t s = 0; s < l.n; ++s) {
    l.inflight.push_back(stage_inflight_microbatches(sched, P, v, M, s));
    most[kind_of(s, l.n)] = std::max(most[kind_of(s, l.n)], l.inflight.back());
  }
  for (int32_t s = 0; s < l.n; ++s) l.planned_inflight.push_back(most[kind_of(s, l.n)]);
  return l;
}

double Search::floor_of(StageKind kind) const {
  double f = kPipeInf;
  for (const auto& [key, s] : solver.catalog().memory_free(kind)) f = std::min(f, s->layer_floor_us);
  return std::isfinite(f) ? f : 0.0;
}

std::vector<double> Search::chord_bounds(StageKind kind, int32_t K) const {
  std::vector<double> v(psz(K) + 1, kPipeInf);
  std::vector<std::pair<int32_t, double>> pts;
  for (const auto& [key, s] : solver.catalog().memory_free(kind)) pts.emplace_back(key.k, s->lower_bound_us);
  if (pts.empty()) return v;
  for (int32_t k = 1; k <= K; ++k) {
    auto hi = std::lower_bound(pts.begin(), pts.end(), std::make_pair(k, -kPipeInf));
    if (hi == pts.end()) v[psz(k)] = pts.back().second + (k - pts.back().first) * floor_of(kind);
    else if (hi->first == k || hi == pts.begin()) v[psz(k)] = hi->first == k ? hi->second : 0.0;
    else {
      auto lo = hi - 1;
      const double w = static_cast<double>(k - lo->first) / (hi->first - lo->first);
      v[psz(k)] = lo->second + w * (hi->second - lo->second);
    }
  }
  return v;
}

StageCostTable Search::forward_table(const Layout& l) const {
  StageCostTable t;
  const int32_t K = L - l.n + 1;
  for (int32_t s = 0; s < l.n; ++s) {
    const StageKind kind = kind_of(s, l.n);
    std::vector<double> v(psz(K) + 1, 0.0);
    for (const auto& [key, sv] : solver.catalog().memory_free(kind)) {
      for (int32_t k = 1; k <= K; ++k)
        v[psz(k)] = kind == kStageBoth ? sv->forward_floor_us
                                       : std::max(0.0, sv->forward_floor_us + (k - key.k) * sv->layer_forward_floor_us);
      break;  // the smallest sample (the catalog is ordered by k)
    }
    t.stages.push_back(std::move(v));
  }
  return t;
}

StageCostTable Search::lower_table(const Layout& l) const {
  StageCostTable t;
  const int32_t K = L - l.n + 1;
  std::vector<double> chords[4];
  for (int32_t kind = 0; kind < 4; ++kind) chords[kind] = chord_bounds(static_cast<StageKind>(kind), K);
  for (int32_t s = 0; s < l.n; ++s) {
    const StageKind kind = kind_of(s, l.n);
    std::vector<double> v = chords[kind];
    if (l.budget_is_relaxation())
      for (const auto& [key, sv] : solver.catalog().of(StagePlanUse::kFitted)) {
        if (key.kind != kind || key.inflight > l.inflight[psz(s)] || key.budget < l.limit ||
            key.grads != l.budget_is_relaxation())
          continue;
        for (int32_t k = kind == kStageBoth ? K : std::max(key.k, 1); k <= K; ++k)
          v[psz(k)] = std::max(v[psz(k)], sv->lower_bound_us);
      }
    t.stages.push_back(std::move(v));
  }
  return t;
}

StageCostTable Search::upper_table(const Layout& l) const {
  StageCostTable t;
  const int32_t K = L - l.n + 1;
  for (int32_t s = 0; s < l.n; ++s) {
    const StageKind kind = kind_of(s, l.n);
    std::vector<double> v(psz(K) + 1, kPipeInf);
    auto at = [&](int32_t k) -> double& { return v[psz(kind == kStageBoth ? K : k)]; };
    for (const auto& [key, sv] : solver.catalog().memory_free(kind))  // what assemble() plans it for
      if ((kind == kStageBoth || key.k <= K) && StageBuilder::fits(*sv, l.planned(s, key.k)))
        at(key.k) = std::min(at(key.k), sv->microbatch_us);
    for (const auto& [key, sv] : solver.catalog().of(StagePlanUse::kFitted)) {
      const StageMemory mem = l.planned(s, key.k);
      if (key.kind == kind && (kind == kStageBoth || key.k <= K) && key.inflight >= mem.inflight &&
          key.budget <= mem.budget && key.grads >= mem.grads)
        at(key.k) = std::min(at(key.k), sv->microbatch_us);
    }
    t.stages.push_back(std::move(v));
  }
  return t;
}

}  // namespace autoshard::pipeline_detail

/// StageSolver::least_recompute: a stage plan's sharding with the least recomputation that fits
/// its budget (planner/recompute_fit.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tuple>
#include <optional>

#include "pipeline/pipeline_solve.h"
#include "planner/recompute_fit.h"
#include "planner/sharding_optimizer.h"
#include "pipeline/stage_pattern.h"

namespace autoshard {

std::shared_ptr<StageSolve> StageSolver::least_recompute(const StageSolve& from, StageMemory mem,
                                                         std::string_view what) const {
  if (!from.plan.has_solution || mem.budget <= 0) return nullptr;
  // The model with recomputation nodes, whatever model `from` was planned in: its strategies
  // carry over, and its regions are the decisions.
  // Not a structured binding: the lambda below captures `so` (clang 14 refuses bindings there).
  Carried carried_in = carried(from, RecomputePolicy::kAuto);
  const std::shared_ptr<ShardingOptimizer> so = carried_in.so;
  const std::vector<StrategyIdx>& base = carried_in.choice;
  if (std::find(base.begin(), base.end(), -1) != base.end()) return nullptr;
  // Each evaluation leaves its solution in `so`; the winner is evaluated once more at the end.
  auto figures = [&](const std::vector<StrategyIdx>& choice) -> std::optional<RecomputeFigures> {
    auto s = evaluated(so, from, choice, 1.0, mem.budget);
    if (!s) return std::nullopt;
    return RecomputeFigures{s->microbatch_us, need_bytes(*s, mem)};
  };
  const auto fit = least_recompute_that_fits(so->problem(), base, static_cast<double>(mem.budget), figures);
  if (!fit) return nullptr;
  auto s = evaluated(so, from, fit->choice, 1.0, mem.budget);
  if (s) report(*s, fmt::format("{} with the least recomputation that fits ({} evaluations)", what, fit->evaluations), mem);
  return s;
}

double StageSolver::rank_need_bytes(const StageSolve& s, double inflight, double deferred) {
  return need_bytes(s, inflight, true) + deferred * static_cast<double>(s.parts.kept_for_w_bytes);
}

std::shared_ptr<const StageSolve> StageSolver::refit(const StageSolve& from, const StageSolve& relaxed, double inflight,
                                                     double deferred, int64_t budget) const {
  // least_recompute's need leaves the hand-over to W out: it is taken from `from`, checked on
  // the answer (the recomputation may change what B keeps for W) and, when over, taken out of
  // the budget once more.
  double handover = deferred * static_cast<double>(from.parts.kept_for_w_bytes);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const StageMemory mem{inflight, static_cast<int64_t>(std::floor(static_cast<double>(budget) - handover)), true, false};
    if (mem.budget <= 0) return nullptr;
    auto s = least_recompute(from, mem, "rank refit: a plan");
    if (!s) return nullptr;
    const double need = rank_need_bytes(*s, inflight, deferred);
    if (need <= static_cast<double>(budget)) {
      s->lower_bound_us = s->plan.lower_bound_us = std::min(relaxed.lower_bound_us, s->microbatch_us);
      return s;
    }
    handover += need - static_cast<double>(budget);
  }
  return nullptr;
}

std::vector<std::shared_ptr<const StageSolve>> StageSolver::fastest_fitted(StageKind kind, int32_t k, size_t most) const {
  std::vector<std::shared_ptr<const StageSolve>> v;
  for (const auto& [key, sv] : fitted_)
    if (std::get<0>(key) == kind && std::get<1>(key) == k && sv->plan.has_solution && std::isfinite(sv->microbatch_us) &&
        std::find(v.begin(), v.end(), sv) == v.end())
      v.push_back(sv);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->microbatch_us < b->microbatch_us; });
  if (v.size() > most) v.resize(most);
  return v;
}

std::shared_ptr<const StageSolve> StageSolver::fit_for_rank(StageKind kind, int32_t k, double inflight, double deferred,
                                                            int64_t budget) {
  const auto key = std::make_tuple(static_cast<int32_t>(kind), k, inflight, deferred, budget);
  if (const auto it = rank_fits_.find(key); it != rank_fits_.end()) return it->second;
  const std::shared_ptr<const StageSolve> relaxed = free(kind, k);
  std::vector<std::shared_ptr<const StageSolve>> sources = fastest_fitted(kind, k, 2);
  if (sources.empty()) {
    const double handover = deferred * static_cast<double>(relaxed->parts.kept_for_w_bytes);
    const StageMemory mem{inflight, static_cast<int64_t>(std::floor(static_cast<double>(budget) - handover)), true, false};
    if (mem.budget > 0)
      if (auto pattern = extend_fitted(kind, k, mem, *relaxed)) sources.push_back(std::move(pattern));
  }
  for (auto& sv : rank_sources(kind, k)) sources.push_back(std::move(sv));
  sources.push_back(relaxed);
  std::shared_ptr<const StageSolve> best;
  for (const auto& from : sources) {
    auto s = refit(*from, *relaxed, inflight, deferred, budget);
    if (s && (!best || s->microbatch_us < best->microbatch_us)) best = std::move(s);
  }
  return rank_fits_.emplace(key, best).first->second;
}

std::shared_ptr<StageSolve> StageSolver::extend_fitted(StageKind kind, int32_t k, StageMemory mem,
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
  for (const auto& [key, sv] : fitted_) {
    const auto& [kk, kf, f, budget, grads] = key;
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
    auto [lo, hi] = canonical_range(kind, src.size, L_);
    auto pat = stage_pattern(src.s->sg, src.s->plan, m_, lo, hi);
    if (!pat) continue;
    auto pattern = at_size(kind, k, {with_middle_layers(std::move(*pat))}, false);
    if (!pattern) continue;
    auto s = least_recompute(*pattern, mem, fmt::format("the pattern of {} layers", src.size));
    if (s && fits(*s, mem) && (!best || s->microbatch_us < best->microbatch_us)) best = std::move(s);
  }
  if (!best) return nullptr;
  best->extended = true;
  best->layer_floor_us = relaxed.layer_floor_us;
  // A plan under a memory limit costs at least the memory-free optimum.
  best->lower_bound_us = best->plan.lower_bound_us = std::min(relaxed.lower_bound_us, best->microbatch_us);
  say(fmt::format("stage kind {} with {} layers ({} in flight, budget {} B): a solved pattern with the least "
                  "recomputation that fits, {:.3f} us, bound {:.3f} us",
                  static_cast<int>(kind), k, mem.inflight, mem.budget, best->microbatch_us, best->lower_bound_us));
  return best;
}

bool StageSolver::price_rank_pattern(int32_t k, double inflight, int64_t limit) {
  if (k < 2 || k > L_ - 2 || limit <= 0) return false;
  const std::shared_ptr<const StageSolve> relaxed = free(kStageMid, k);
  const StageMemory mem{inflight, limit, true, true};
  if (fits(*relaxed, mem)) return false;  // memory does not bind
  const PricedBound pb = price_memory(kStageMid, k, mem, *relaxed, nullptr);
  if (!pb.plan) return false;
  auto [lo, hi] = canonical_range(kStageMid, k, L_);
  auto pat = stage_pattern(pb.plan->sg, pb.plan->plan, m_, lo, hi);
  if (!pat) return false;
  rank_patterns_.push_back(with_middle_layers(std::move(*pat)));
  rank_sources_.clear();
  return true;
}

std::vector<std::shared_ptr<const StageSolve>> StageSolver::rank_sources(StageKind kind, int32_t k) {
  if (rank_patterns_.empty() || kind == kStageBoth || k < 2) return {};
  const FreeKey key{kind, k};
  if (const auto it = rank_sources_.find(key); it != rank_sources_.end()) return it->second;
  std::vector<std::shared_ptr<const StageSolve>> out;
  for (const StagePattern& p : rank_patterns_)
    if (auto s = at_size(kind, k, {p}, false)) {
      // A plan under a memory limit costs at least the memory-free optimum.
      s->lower_bound_us = s->plan.lower_bound_us = std::min(free(kind, k)->lower_bound_us, s->microbatch_us);
      out.push_back(std::move(s));
    }
  return rank_sources_.emplace(key, std::move(out)).first->second;
}

}  // namespace autoshard

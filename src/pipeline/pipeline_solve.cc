#include "pipeline/pipeline_solve.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "pipeline/backward_split.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

template <class T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

StageSolver::StageSolver(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
                         const LayerMap& m, int32_t pp)
    : b_(g, mesh, opt, popt, m, pp), sources_(stage_source_lists(opt, popt)) {}

void StageSolver::memory_priced() {
  const auto& fn = b_.pipeline_options().on_memory_priced;
  if (fn && !memory_priced_.exchange(true)) fn();
}

StageRequest StageSolver::canonical(StageKind kind, int32_t k, StageMemory mem) const {
  return {kind, kind == kStageBoth ? b_.num_layers() : k, mem};
}

std::vector<std::shared_ptr<StageSolve>> StageSolver::round(const StagePlanSource& source,
                                                            const std::vector<StageRequest>& reqs,
                                                            const std::vector<std::shared_ptr<const StageSolve>>& relaxed,
                                                            bool threads) {
  static const std::vector<std::shared_ptr<StageSolve>> kNone;
  std::vector<std::shared_ptr<StageSolve>> out(reqs.size());
  const StageSourceContext cx = context();
  auto task = [&](size_t i) { out[i] = source.plan(cx, reqs[i], relaxed[i].get(), kNone); };
  if (threads) b_.run_parallel(reqs.size(), task);
  else
    for (size_t i = 0; i < reqs.size(); ++i) task(i);
  return out;
}

void StageSolver::resolve(const StageSources& sources, const std::vector<StageKey>& keys,
                          const std::vector<StageRequest>& reqs,
                          const std::vector<std::shared_ptr<const StageSolve>>& relaxed, bool threads) {
  std::vector<size_t> pending(keys.size());
  for (size_t i = 0; i < pending.size(); ++i) pending[i] = i;
  for (size_t si = 0; si < sources.size(); ++si) {
    const bool last = si + 1 == sources.size();  // a solve: its plan is kept whatever it is
    std::vector<StageRequest> rs;
    std::vector<std::shared_ptr<const StageSolve>> rx;
    for (size_t i : pending) rs.push_back(reqs[i]), rx.push_back(relaxed[i]);
    std::vector<std::shared_ptr<StageSolve>> out = round(*sources[si], rs, rx, threads);
    std::vector<size_t> still;
    for (size_t j = 0; j < pending.size(); ++j) {
      if (out[j] || last) catalog_.put(keys[pending[j]], std::move(out[j]));
      else still.push_back(pending[j]);
    }
    pending = std::move(still);
  }
}

std::shared_ptr<const StageSolve> StageSolver::free(StageKind kind, int32_t k) {
  const StageRequest r = canonical(kind, k, StageMemory{});
  const StageKey key = StageKey::memory_free(r.kind, r.k);
  if (auto p = catalog_.find(key)) return p;
  resolve(sources_.memory_free, {key}, {r}, {nullptr}, false);
  return catalog_.find(key);
}

void StageSolver::prefetch(const std::vector<std::pair<StageKind, int32_t>>& keys) {
  std::vector<StageKey> unknown;
  std::vector<StageRequest> reqs;
  for (auto [kind, k] : keys) {
    const StageRequest r = canonical(kind, k, StageMemory{});
    const StageKey key = StageKey::memory_free(r.kind, r.k);
    if (catalog_.has(key) || contains(unknown, key)) continue;
    unknown.push_back(key);
    reqs.push_back(r);
  }
  // The patterns are evaluated on threads too: each reads only the solved sizes (SizePattern
  // skips evaluated ones), so they do not depend on one another, and the result is the same
  // as one after the other.
  resolve(sources_.memory_free, unknown, reqs, std::vector<std::shared_ptr<const StageSolve>>(reqs.size()), true);
}

std::shared_ptr<const StageSolve> StageSolver::fitted(StageKind kind, int32_t k, StageMemory mem) {
  const StageRequest r = canonical(kind, k, mem);
  auto relaxed = free(r.kind, r.k);
  if (mem.budget <= 0 || StageBuilder::fits(*relaxed, mem)) return relaxed;
  const StageKey key = StageKey::fitted(r.kind, r.k, mem);
  if (catalog_.has(key)) return catalog_.find(key);
  memory_priced();
  resolve(sources_.fitted, {key}, {r}, {relaxed}, false);
  return catalog_.find(key);
}

void StageSolver::prefetch_fitted(const std::vector<StageRequest>& reqs) {
  std::vector<std::pair<StageKind, int32_t>> sizes;
  for (const StageRequest& r : reqs) sizes.emplace_back(r.kind, r.k);
  prefetch(sizes);
  std::vector<StageKey> unknown;
  std::vector<StageRequest> todo;
  std::vector<std::shared_ptr<const StageSolve>> relaxed;
  for (const StageRequest& req : reqs) {
    const StageRequest r = canonical(req.kind, req.k, req.mem);
    auto rx = free(r.kind, r.k);  // known: prefetched above
    const StageKey key = StageKey::fitted(r.kind, r.k, r.mem);
    if (r.mem.budget <= 0 || StageBuilder::fits(*rx, r.mem) || catalog_.has(key) || contains(unknown, key)) continue;
    unknown.push_back(key);
    todo.push_back(r);
    relaxed.push_back(std::move(rx));
  }
  if (!unknown.empty()) memory_priced();
  // Evaluated on threads, as prefetch's: each reads only the fitted plans solved so far.
  resolve(sources_.fitted, unknown, todo, relaxed, true);
}

void StageSolver::refine(const std::vector<StageRequest>& reqs) {
  std::vector<StageKey> keys;
  std::vector<StageRequest> todo;
  for (const StageRequest& req : reqs) {
    const StageRequest r = canonical(req.kind, req.k, StageMemory{});
    const StageKey key = StageKey::memory_free(r.kind, r.k);
    const auto p = catalog_.find(key);
    if (p && p->interpolated && !contains(keys, key)) keys.push_back(key), todo.push_back(r);
  }
  // The last source of each list solves.
  const std::vector<std::shared_ptr<const StageSolve>> none(todo.size());
  auto solved = round(*sources_.memory_free.back(), todo, none, true);
  for (size_t i = 0; i < keys.size(); ++i) catalog_.put(keys[i], better_of(*catalog_.find(keys[i]), solved[i]));
  // The fitted plans evaluated as patterns: the fitted search on each.
  std::vector<StageKey> fits;
  std::vector<StageRequest> fit_reqs;
  std::vector<std::shared_ptr<const StageSolve>> relaxed;
  for (const StageRequest& req : reqs) {
    const StageRequest r = canonical(req.kind, req.k, req.mem);
    const StageKey key = StageKey::fitted(r.kind, r.k, r.mem);
    const auto p = catalog_.find(key);
    if (!p || !p->interpolated || contains(fits, key)) continue;
    fits.push_back(key);
    fit_reqs.push_back(r);
    relaxed.push_back(free(r.kind, r.k));
  }
  auto fitted = round(*sources_.fitted.back(), fit_reqs, relaxed, true);
  for (size_t i = 0; i < fits.size(); ++i) catalog_.put(fits[i], better_of(*catalog_.find(fits[i]), fitted[i]));
}

bool StageSolver::resolved(StageKind kind, int32_t k, StageMemory mem) const {
  const StageRequest r = canonical(kind, k, mem);
  const auto p = catalog_.find(StageKey::memory_free(r.kind, r.k));
  if (!p) return false;
  if (StageBuilder::fits(*p, mem)) return true;
  return catalog_.has(StageKey::fitted(r.kind, r.k, mem));
}

std::vector<StageBuilder::PricedFloor> StageSolver::priced_floors(const std::vector<StageKey>& keys) {
  std::vector<StageKey> todo;
  for (const StageKey& key : keys)
    if (!priced_.count(key) && !contains(todo, key)) todo.push_back(key);
  if (!todo.empty()) memory_priced();
  std::vector<std::pair<StageKind, int32_t>> sizes;
  for (const StageKey& key : todo) sizes.emplace_back(key.kind, key.k);
  prefetch(sizes);  // their memory-free plans (the stage graphs), on threads
  std::vector<std::shared_ptr<const StageSolve>> relaxed;
  for (const StageKey& key : todo) relaxed.push_back(free(key.kind, key.k));
  // A stage whose B hands nothing to its W prices no hand-over: its floor with microbatches
  // handed over is the one without, the same problem, solved once (the first stage of
  // llama3-405b's layouts: a quarter of the rank pricing's floors).
  std::vector<size_t> same_as(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    same_as[i] = i;
    if (todo[i].deferred <= 0 || !handed_to_weight_grads(relaxed[i]->sg, step_parts(relaxed[i]->sg)).empty()) continue;
    StageKey none = todo[i];
    none.deferred = 0;
    for (size_t j = 0; j < todo.size(); ++j)
      if (todo[j] == none) same_as[i] = j;
  }
  std::vector<size_t> solved;
  for (size_t i = 0; i < todo.size(); ++i)
    if (same_as[i] == i) solved.push_back(i);
  std::vector<StageBuilder::PricedFloor> out(todo.size());
  b_.run_parallel(solved.size(), [&](size_t t) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t i = solved[t];
    const StageKey& key = todo[i];
    out[i] = b_.priced_floor(*relaxed[i], key.inflight, key.deferred, key.price);
    b_.say(fmt::format("  stage kind {} with {} layers, {} in flight, {} handed to W, memory at t* priced at {:.3g} "
                       "us/GB: floor {:.3f} us, in {:.3f}s",
                       static_cast<int>(key.kind), key.k, key.inflight, key.deferred, key.price * 1e9, out[i].floor,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  });
  for (size_t i = 0; i < todo.size(); ++i) priced_[todo[i]] = out[same_as[i]];
  std::vector<StageBuilder::PricedFloor> r;
  for (const StageKey& key : keys) r.push_back(priced_.at(key));
  return r;
}

std::vector<std::shared_ptr<const StageSolve>> StageSolver::fastest_fitted(StageKind kind, int32_t k, size_t most) const {
  std::vector<std::shared_ptr<const StageSolve>> v;
  for (const auto& [key, sv] : catalog_.of(StagePlanUse::kFitted))
    if (key.kind == kind && key.k == k && sv->plan.has_solution && std::isfinite(sv->microbatch_us) && !contains(v, sv))
      v.push_back(sv);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->microbatch_us < b->microbatch_us; });
  if (v.size() > most) v.resize(most);
  return v;
}

std::shared_ptr<const StageSolve> StageSolver::fit_for_rank(StageKind kind, int32_t k, double inflight, double deferred,
                                                            int64_t budget) {
  const StageKey key = StageKey::rank_fit(kind, k, inflight, deferred, budget);
  if (catalog_.has(key)) return catalog_.find(key);
  const std::shared_ptr<const StageSolve> relaxed = free(kind, k);
  std::vector<std::shared_ptr<const StageSolve>> sources = fastest_fitted(kind, k, 2);
  if (sources.empty()) {
    const double handover = deferred * static_cast<double>(relaxed->parts.kept_for_w_bytes);
    const StageMemory mem{inflight, static_cast<int64_t>(std::floor(static_cast<double>(budget) - handover)), true, false};
    if (mem.budget > 0)
      if (auto pattern = extend_fitted(context(), kind, k, mem, *relaxed)) sources.push_back(std::move(pattern));
  }
  for (auto& sv : rank_sources(kind, k)) sources.push_back(std::move(sv));
  sources.push_back(relaxed);
  std::shared_ptr<const StageSolve> best;
  for (const auto& from : sources) {
    auto s = b_.refit(*from, *relaxed, inflight, deferred, budget);
    if (s && (!best || s->microbatch_us < best->microbatch_us)) best = std::move(s);
  }
  catalog_.put(key, best);
  return best;
}

bool StageSolver::price_rank_pattern(int32_t k, double inflight, int64_t limit) {
  if (k < 2 || k > b_.num_layers() - 2 || limit <= 0) return false;
  const std::shared_ptr<const StageSolve> relaxed = free(kStageMid, k);
  const StageMemory mem{inflight, limit, true, true};
  if (StageBuilder::fits(*relaxed, mem)) return false;  // memory does not bind
  const StageBuilder::PricedBound pb = b_.price_memory(kStageMid, k, mem, *relaxed, nullptr);
  if (!pb.plan) return false;
  auto [lo, hi] = canonical_range(kStageMid, k, b_.num_layers());
  auto pat = stage_pattern(pb.plan->sg, pb.plan->plan, b_.layers(), lo, hi);
  if (!pat) return false;
  rank_patterns_.push_back(with_middle_layers(std::move(*pat)));
  rank_sources_.clear();
  return true;
}

std::vector<std::shared_ptr<const StageSolve>> StageSolver::rank_sources(StageKind kind, int32_t k) {
  if (rank_patterns_.empty() || kind == kStageBoth || k < 2) return {};
  const StageKey key{StagePlanUse::kRankFit, kind, k};
  if (const auto it = rank_sources_.find(key); it != rank_sources_.end()) return it->second;
  std::vector<std::shared_ptr<const StageSolve>> out;
  for (const StagePattern& p : rank_patterns_)
    if (auto s = b_.at_size(kind, k, {p}, false)) {
      // A plan under a memory limit costs at least the memory-free optimum.
      s->lower_bound_us = s->plan.lower_bound_us = std::min(free(kind, k)->lower_bound_us, s->microbatch_us);
      out.push_back(std::move(s));
    }
  return rank_sources_.emplace(key, std::move(out)).first->second;
}

}  // namespace autoshard

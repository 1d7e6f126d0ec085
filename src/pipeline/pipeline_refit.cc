/// The ranks' memory after the stage plans are chosen (pipeline/pipeline_layout.h): each rank's
/// peak, the rank refit (each rank's limit shared among its stages, recomputation re-chosen
/// per rank) and the rank balance (single layers moved off the busiest rank).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/pipeline_layout.h"
#include "pipeline/pipeline_timeline.h"

namespace autoshard::pipeline_detail {

namespace {

/// Up to `most` plans of the canonical stage (kind, k) to refit from: `current` first, then the
/// fastest other solved fitted plans (shardings made for memory).
std::vector<std::shared_ptr<const StageSolve>> refit_sources(Search& S, StageKind kind, int32_t k,
                                                             const std::shared_ptr<const StageSolve>& current, size_t most,
                                                             bool rank_patterns) {
  std::vector<std::shared_ptr<const StageSolve>> out{current};
  for (const auto& sv : S.solver.fastest_fitted(kind, k, most))
    if (sv != current && out.size() < most) out.push_back(sv);
  // And the shardings made for a whole rank's memory (StageSolver::price_rank_pattern).
  if (rank_patterns)
    for (auto& sv : S.solver.rank_sources(kind, k)) out.push_back(std::move(sv));
  return out;
}

}  // namespace

void RankNeed::add(const StageSolve& s, double inflight, double deferred) {
  add(StageBuilder::rank_need_bytes(s, inflight, deferred), static_cast<double>(s.transient_bytes()));
}

void RankNeed::add(double need, double transient) {
  held += need - transient;
  passing = std::max(passing, transient);
  passing_sum += transient;
}

std::vector<TradeOption> least_work_that_fits(std::vector<std::vector<TradeOption>> options, double limit) {
  // Every combination, in a fixed order: a rank has a few stages, each a few options; with
  // many stages the ladders are cut from their ends (the plan now stays) to bound the count.
  auto combinations = [&] {
    double c = 1;
    for (const auto& o : options) c *= static_cast<double>(o.size());
    return c;
  };
  while (combinations() > 65536) {
    auto most = std::max_element(options.begin(), options.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
    most->pop_back();
  }
  double best_work = 0;
  for (const auto& o : options) best_work += o[0].us;
  best_work *= 1 - 1e-9;
  std::vector<TradeOption> best, pick(options.size());
  std::vector<size_t> at(options.size(), 0);
  while (true) {
    RankNeed need;
    double work = 0;
    for (size_t i = 0; i < options.size(); ++i) {
      pick[i] = options[i][at[i]];
      need.add(pick[i].need, pick[i].transient);
      work += pick[i].us;
    }
    if (work < best_work && need.total() <= limit) best_work = work, best = pick;
    size_t i = 0;
    while (i < at.size() && ++at[i] == options[i].size()) at[i++] = 0;
    if (i == at.size()) break;
  }
  return best;
}

RankNeed rank_need(const PipelinePlan& pl, int32_t r, int32_t skip) {
  RankNeed n;
  for (const PipelineStage& st : pl.stages)
    if (st.pp_rank == r && st.index != skip) n.add(*st.solve, st.inflight, st.deferred);
  return n;
}

/// Per pp rank, the peak per device (RankNeed): its stages' one-microbatch usages at t*, the
/// activations of the other microbatches each keeps in flight, the summed gradients, a
/// zero-bubble rank's hand-overs to W, and the most passing work of one stage.
void rank_peaks(PipelinePlan& pl) {
  pl.rank_peak_bytes.assign(psz(pl.P), 0);
  for (int32_t r = 0; r < pl.P; ++r)
    pl.rank_peak_bytes[psz(r)] = static_cast<int64_t>(std::ceil(rank_need(pl, r).total()));
}

bool ranks_fit(const PipelinePlan& pl) {
  return pl.memory_limit_bytes <= 0 ||
         std::all_of(pl.rank_peak_bytes.begin(), pl.rank_peak_bytes.end(),
                     [&](int64_t b) { return b <= pl.memory_limit_bytes; });
}

using RefitCache = std::map<std::tuple<const StageSolve*, double, double, int64_t>, std::shared_ptr<const StageSolve>>;

namespace {

/// Whether `s`'s plan recomputes any layer region.
bool recomputes(const StageSolve& s) {
  return std::any_of(s.plan.layer_recompute.begin(), s.plan.layer_recompute.end(),
                     [](const auto& lr) { return lr.second != "none"; });
}

/// The fastest of `st`'s sources refit to `budget`, `st`'s own plan where it fits as it is;
/// nullptr when none fits.
std::shared_ptr<const StageSolve> refit_stage(Search& S, const PipelineStage& st, int32_t n, int64_t budget,
                                              RefitCache& done, bool rank_patterns) {
  const auto kind = kind_of(st.index, n);
  const int32_t k = st.hi - st.lo;
  const auto relaxed = S.solver.free(kind, k);
  std::shared_ptr<const StageSolve> best =
      StageBuilder::rank_need_bytes(*st.solve, st.inflight, st.deferred) <= static_cast<double>(budget) ? st.solve : nullptr;
  for (const auto& from : refit_sources(S, kind, k, st.solve, 3, rank_patterns)) {
    // Its own plan fits as it is and recomputes nothing: a refit of it, with the least
    // recomputation that fits, is the same plan (as fast: not taken), and costs a problem
    // with recomputation nodes built for nothing.
    if (from == st.solve && best && !recomputes(*from)) continue;
    const auto key = std::make_tuple(from.get(), st.inflight, st.deferred, budget);
    auto it = done.find(key);
    if (it == done.end()) it = done.emplace(key, S.solver.builder().refit(*from, *relaxed, st.inflight, st.deferred, budget)).first;
    if (it->second && (!best || it->second->microbatch_us < best->microbatch_us)) best = it->second;
  }
  return best;
}

/// Rank r's stages refit to parts of the limit: each stage `base` (per stage index) and of what
/// the bases leave, a share in proportion to what it needs above its base now.  Per stage of
/// the rank (in order) its plan, and whether the rank then fits; empty when a stage has none.
std::pair<std::vector<std::shared_ptr<const StageSolve>>, bool> refit_rank(Search& S, const PipelinePlan& pl, int32_t r,
                                                                         const std::vector<double>& base, RefitCache& done,
                                                                         bool rank_patterns) {
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  double above = 0, bases = 0;
  for (const PipelineStage& st : pl.stages)
    if (st.pp_rank == r) {
      above += StageBuilder::rank_need_bytes(*st.solve, st.inflight, st.deferred) - base[psz(st.index)];
      bases += base[psz(st.index)];
    }
  if (above <= 0) return {};
  // The stages' needs may add up to more than the limit by the passing work the rank never
  // holds at once (RankNeed), as its stages have it now.
  const double room = static_cast<double>(pl.memory_limit_bytes) + rank_need(pl, r).unheld();
  const double scale = (room - bases) / above;
  std::vector<std::shared_ptr<const StageSolve>> plans;
  RankNeed need;
  for (const PipelineStage& st : pl.stages) {
    if (st.pp_rank != r) continue;
    const double b = base[psz(st.index)];
    const auto budget = static_cast<int64_t>(std::floor(b + (StageBuilder::rank_need_bytes(*st.solve, st.inflight, st.deferred) - b) * scale));
    plans.push_back(refit_stage(S, st, n, budget, done, rank_patterns));
    if (!plans.back()) plans.back() = st.solve;  // keeps its plan
    need.add(*plans.back(), st.inflight, st.deferred);
  }
  return {plans, need.total() <= static_cast<double>(pl.memory_limit_bytes)};
}

using StagePlans = std::vector<std::shared_ptr<const StageSolve>>;

/// `p` with rank r's stages (in order) given `plans`.
void put_rank(PipelinePlan& p, int32_t r, const StagePlans& plans) {
  size_t i = 0;
  for (PipelineStage& st : p.stages)
    if (st.pp_rank == r) st.solve = plans[i++];
}

/// Rank r refit both ways to share (refit_rank with no bases and with `least`), the better
/// kept: fitting first, then the least work.
std::pair<StagePlans, bool> share_rank(Search& S, const PipelinePlan& pl, int32_t r, const std::vector<double>& least,
                                       RefitCache& done, bool rank_patterns) {
  auto work = [](const StagePlans& v) {
    double w = 0;
    for (const auto& p : v) w += p->microbatch_us;
    return w;
  };
  auto a = refit_rank(S, pl, r, std::vector<double>(least.size(), 0.0), done, rank_patterns);
  auto b = refit_rank(S, pl, r, least, done, rank_patterns);
  if (b.first.empty() || (!a.first.empty() && std::make_pair(!a.second, work(a.first)) <= std::make_pair(!b.second, work(b.first))))
    return a;
  return b;
}

/// Rank r's stages refit (share_rank) from their kind's solved shardings and, where that fits
/// and shortens the timeline, also from the rank patterns (the least work of one rank need
/// not shorten it: its stages may come out less even); empty when no refit.
StagePlans refit_one_rank(Search& S, const PipelinePlan& pl, int32_t r, const std::vector<double>& least,
                          RefitCache& done) {
  auto b = share_rank(S, pl, r, least, done, false);
  if (!S.solver.has_rank_patterns()) return b.first;
  auto c = share_rank(S, pl, r, least, done, true);
  if (c.first.empty() || !c.second || c.first == b.first) return b.first;
  if (!b.first.empty() && b.second) {
    PipelinePlan x = pl, y = pl;
    put_rank(x, r, b.first);
    put_rank(y, r, c.first);
    if (stage_timeline(y).makespan_us >= stage_timeline(x).makespan_us) return b.first;
  }
  return c.first;
}

}  // namespace

/// The rank refit: each rank's limit shared among its stages and each stage given the fastest
/// of its sources (refit_sources) with the least recomputation that fits its part at its own
/// rank's in-flight and hand-over counts (StageBuilder::refit).  Two ways to share, the better
/// kept per rank (fitting first, then the least work): in proportion to what the stages need
/// now, and each stage its least need with no activations kept plus a share of the rest in
/// proportion to what it needs above that (a stage that can give more gives more; on
/// llama3-405b 8x16x8 each alone won on some candidates).  Why: the stage plans are made per
/// (kind, layers) for the most in flight of their kind and, with v > 1, for a share of a
/// balanced rank, so a rank with fewer in flight or less than its share recomputes more than
/// it needs to (llama3-405b 8x16x8: pp rank 1 at 65 of 74.5 GiB worked the most), and a rank
/// over the limit is brought under by recomputing more, a few evaluations instead of
/// memory-limited solves.  Ranks are independent; a stage no source fits keeps its plan.
void refit_ranks(Search& S, PipelinePlan& pl, const std::vector<int32_t>& ranks) {
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  auto chosen = [&](int32_t r) { return ranks.empty() || std::find(ranks.begin(), ranks.end(), r) != ranks.end(); };
  // A rank that keeps more than the limit with no activations kept at all (each stage's least
  // over its sources) fits no refit: the candidate is not worth the evaluations (llama3-405b's
  // memory-free splits need 3-5 times the limit).
  std::vector<double> least(psz(n), kPipeInf), rank_least(psz(pl.P), 0);
  for (const PipelineStage& st : pl.stages) {
    if (!chosen(st.pp_rank)) continue;
    double& l = least[psz(st.index)];
    for (const auto& from : refit_sources(S, kind_of(st.index, n), st.hi - st.lo, st.solve, 3, true))
      l = std::min(l, StageBuilder::rank_need_bytes(*from, 1, st.deferred) - static_cast<double>(from->activation_bytes));
    l = std::min(l, StageBuilder::rank_need_bytes(*st.solve, st.inflight, st.deferred));
    rank_least[psz(st.pp_rank)] += l;
  }
  // (Less the passing work its stages now need but never hold at once.)
  for (int32_t r = 0; r < pl.P; ++r)
    if (chosen(r) && rank_least[psz(r)] - rank_need(pl, r).unheld() > static_cast<double>(pl.memory_limit_bytes)) return;
  RefitCache done;
  for (int32_t r = 0; r < pl.P; ++r)
    if (chosen(r))
      if (auto plans = refit_one_rank(S, pl, r, least, done); !plans.empty()) put_rank(pl, r, plans);
  rank_peaks(pl);
}

namespace {

/// Stage `st`'s own sharding with the least recomputation that fits `budget` at its rank's
/// in-flight and hand-over counts (StageBuilder::refit); nullptr when none fits.
std::shared_ptr<const StageSolve> refit_own(Search& S, const PipelineStage& st, int32_t n, int64_t budget) {
  return S.solver.builder().refit(*st.solve, *S.solver.free(kind_of(st.index, n), st.hi - st.lo), st.inflight,
                                  st.deferred, budget);
}

/// Stage `st`'s sharding with the least recomputation that fits each budget of a ladder
/// around what it could have now (its need plus the rank's `slack`), in steps of `unit` both
/// ways: less gives memory to the rank's other stages, more takes theirs.  Its plan now first;
/// repeated figures once.
std::vector<TradeOption> stage_options(Search& S, const PipelineStage& st, int32_t n, double slack, double unit) {
  constexpr int kSteps = 4;
  const auto figures = [&](const StageSolve& p, int64_t budget) {
    return TradeOption{budget, p.microbatch_us, StageBuilder::rank_need_bytes(p, st.inflight, st.deferred),
                       static_cast<double>(p.transient_bytes())};
  };
  std::vector<TradeOption> out{figures(*st.solve, -1)};
  const double now = out[0].need + slack;
  for (int i = -kSteps; i <= kSteps; ++i) {
    const auto budget = static_cast<int64_t>(std::floor(now + i * unit));
    if (budget <= 0) continue;
    const auto p = refit_own(S, st, n, budget);
    if (!p) continue;
    const TradeOption o = figures(*p, budget);
    if (std::none_of(out.begin(), out.end(), [&](const TradeOption& x) { return x.us == o.us && x.need == o.need; }))
      out.push_back(o);
  }
  return out;
}

/// Per stage of rank r (in order), the option of least total work whose rank need fits the
/// limit, where that is less work than now; empty otherwise.
std::vector<TradeOption> traded_rank(Search& S, const PipelinePlan& pl, int32_t r) {
  // A stage that recomputes nothing has no option of less work than its plan now, so a rank
  // none of whose stages recomputes has no trade (llama3-70b 8x8x8, whose ranks fit with
  // room: 216 refits for nothing, a quarter of the plan's CPU).
  if (std::none_of(pl.stages.begin(), pl.stages.end(),
                   [&](const PipelineStage& st) { return st.pp_rank == r && recomputes(*st.solve); }))
    return {};
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  const auto limit = static_cast<double>(pl.memory_limit_bytes);
  const double slack = std::max(0.0, limit - rank_need(pl, r).total());
  std::vector<std::vector<TradeOption>> options;
  for (const PipelineStage& st : pl.stages)
    if (st.pp_rank == r) options.push_back(stage_options(S, st, n, slack, limit / 128));
  return least_work_that_fits(std::move(options), limit);
}

}  // namespace

/// The rank trade: each rank's stages trade memory for recomputation among themselves
/// (traded_rank), the traded plan kept where its timeline is shorter.  Why: the refit shares a
/// rank's limit in proportion to its stages' needs, but a layer region recomputed on a stage
/// with more microbatches in flight frees more memory for the same time (llama3-405b 8x8x8
/// Interleaved1F1B v=4: rank 1's first stage keeps 13 microbatches, its others 8), and the
/// room a refit leaves unused (a region's bytes do not divide a share) goes to no stage.  All
/// ranks at once: the timeline is the busiest rank's, and a trade on one rank alone can
/// lengthen it by moving work in time.  A rank of one stage has nothing to trade (its refit
/// had the whole limit).  Evaluations only: a few refits per stage, the chosen ones made
/// again (the same inputs give the same plan).
void trade_ranks(Search& S, PipelinePlan& pl) {
  if (pl.memory_limit_bytes <= 0 || !ranks_fit(pl) || pl.v < 2) return;
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  PipelinePlan t = pl;
  for (int32_t r = 0; r < pl.P; ++r) {
    const std::vector<TradeOption> chosen = traded_rank(S, pl, r);
    if (chosen.empty()) continue;
    StagePlans plans;
    for (const PipelineStage& st : pl.stages) {
      if (st.pp_rank != r) continue;
      const TradeOption& o = chosen[plans.size()];
      std::shared_ptr<const StageSolve> p = o.budget >= 0 ? refit_own(S, st, n, o.budget) : nullptr;
      plans.push_back(p ? std::move(p) : st.solve);
    }
    put_rank(t, r, plans);
  }
  rank_peaks(t);
  const double ts = stage_timeline(t).makespan_us;
  if (ranks_fit(t) && ts < stage_timeline(pl).makespan_us) {
    pl = std::move(t);
    pl.step_us = ts;
  }
}

namespace {

/// `pl` with one layer moved from stage `from` to its neighbour `to`, the two stages planned
/// for their ranks (StageSolver::fit_for_rank under what the rank's other stages leave, else
/// the receiving rank refit as a whole); nullopt when a rank does not fit.
std::optional<PipelinePlan> moved_layer(Search& S, const PipelinePlan& pl, int32_t from, int32_t to) {
  PipelinePlan t = pl;
  const int32_t n = static_cast<int32_t>(t.stages.size());
  PipelineStage &a = t.stages[psz(from)], &b = t.stages[psz(to)];
  if (to == from + 1) --a.hi, --b.lo;
  else ++a.lo, ++b.hi;
  for (PipelineStage* st : {&a, &b}) {
    const auto kind = kind_of(st->index, n);
    const int32_t k = st->hi - st->lo;
    // What the rank's other stages need (RankNeed): a stage that needs at most the rest fits
    // whatever its passing work.
    const double left = static_cast<double>(t.memory_limit_bytes) - rank_need(t, st->pp_rank, st->index).total();
    auto plan = left > 0 ? S.solver.fit_for_rank(kind, k, st->inflight, st->deferred, static_cast<int64_t>(std::floor(left)))
                         : nullptr;
    if (!plan && st == &b) {
      // The receiving rank's stages share its limit again, this one first planned for its old
      // need grown by a layer's share.
      const double need = StageBuilder::rank_need_bytes(*pl.stages[psz(to)].solve, st->inflight, st->deferred);
      plan = S.solver.fit_for_rank(kind, k, st->inflight, st->deferred, static_cast<int64_t>(need * k / (k - 1)));
      if (plan) {
        st->solve = plan;
        refit_ranks(S, t, {st->pp_rank});
        if (t.rank_peak_bytes[psz(st->pp_rank)] > t.memory_limit_bytes) return std::nullopt;
        continue;
      }
    }
    if (!plan) return std::nullopt;
    st->solve = plan;
  }
  rank_peaks(t);
  if (!ranks_fit(t)) return std::nullopt;
  return t;
}

}  // namespace

void balance_ranks(Search& S, PipelinePlan& pl, int32_t max_moves) {
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  double step = stage_timeline(pl).makespan_us;
  for (int32_t tried = 0; tried < max_moves;) {
    std::vector<double> work(psz(pl.P), 0);
    for (const PipelineStage& st : pl.stages) work[psz(st.pp_rank)] += st.solve->microbatch_us;
    const auto busy = static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin());
    std::optional<PipelinePlan> best;
    double best_step = step;
    for (int32_t s = 0; s < n && tried < max_moves; ++s) {
      const PipelineStage& st = pl.stages[psz(s)];
      if (st.pp_rank != busy || st.hi - st.lo < 2) continue;
      for (int32_t to : {s - 1, s + 1}) {
        if (to < 0 || to >= n || pl.stages[psz(to)].pp_rank == busy || tried++ >= max_moves) continue;
        auto t = moved_layer(S, pl, s, to);
        if (!t) continue;
        const double ts = stage_timeline(*t).makespan_us;
        if (ts < best_step * (1 - 1e-9)) {
          best_step = ts;
          best = std::move(t);
        }
      }
    }
    if (!best) break;
    pl = std::move(*best);
    pl.step_us = step = best_step;
  }
}

}  // namespace autoshard::pipeline_detail

#include "pipeline/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "planner/fit_advice.h"
#include "pipeline/pipeline_choice.h"
#include "pipeline/pipeline_dp.h"
#include "pipeline/pipeline_layout.h"
#include "pipeline/pipeline_solve.h"
#include "pipeline/pipeline_timeline.h"
#include "pipeline/pipeline_variant.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

using namespace pipeline_detail;  // NOLINT(google-build-using-namespace): this file's own detail

namespace {



/// k of pipeline_schedule.h for stages `st` (each stage's time split in its parts' ratio).
double stage_factor(PipelineSchedule sch, const std::vector<const StageSolve*>& st) {
  std::vector<double> f, b, w;
  for (const StageSolve* s : st) {
    const PartTimes& p = s->parts;
    const double all = p.forward_us + p.input_grad_us + p.weight_grad_us;
    const double c = std::isfinite(s->microbatch_us) ? s->microbatch_us : 0.0;
    f.push_back(all > 0 ? c * p.forward_us / all : c);
    b.push_back(all > 0 ? c * p.input_grad_us / all : 0.0);
    w.push_back(all > 0 ? c * p.weight_grad_us / all : 0.0);
  }
  return bubble_factor(sch, f, b, w);
}

/// k of the model's layer: the phase mix of the one-layer middle stage (planned once, shared
/// by every split), so that the step of a split is the interleaved formula with a constant k
/// and the DPs stay exact (pipeline_schedule.h).  The layers dominate every stage; the first
/// stage (no input gradient to send) and the last differ, and the report's timeline runs
/// every stage with its own f, b and w.  Without a middle stage (S = 2), the least k of the
/// solved stages.
double layer_factor(Search& S, PipelineSchedule sch, int32_t n) {
  if (!splits_backward(sch)) return 1.0;
  if (n > 2 && S.L - n + 1 >= 1) return stage_factor(sch, {S.solver.free(kStageMid, 1).get()});
  double k = 1.0;
  for (const auto& [key, s] : S.solver.catalog().of(StagePlanUse::kMemoryFree))
    k = std::min(k, stage_factor(sch, {s.get()}));
  return k;
}

/// The best split on tables `t` and its step (on lower-bound tables: a lower bound of the step
/// over all splits).  Both DPs are exact for their schedule's formula with factor k.
Evaluated split_step(const StageCostTable& t, int32_t L, int32_t P, int32_t v, int32_t M,
                     PipelineSchedule sch = PipelineSchedule::k1F1B, double k = 1.0) {
  Evaluated e;
  const bool v_shape = v_shaped(sch);
  const StageSplit s = v == 1 && !splits_backward(sch) ? best_split_latency(t, L, P, M)
                                                       : best_split_ranks(t, L, P, v, M, k, v_shape);
  if (s.layers.empty()) return e;
  e.layers = s.layers;
  e.step_us = e.lower_bound_us = s.value;
  return e;
}

/// The solved stages of `layers` at their positions' planned memory; empty when one has no plan.
std::vector<std::shared_ptr<const StageSolve>> split_solves(Search& S, const Layout& l, const std::vector<int32_t>& layers) {
  std::vector<std::shared_ptr<const StageSolve>> st;
  const int32_t n = static_cast<int32_t>(layers.size());
  for (int32_t s = 0; s < n; ++s) {
    auto sv = S.solver.fitted(kind_of(s, n), layers[psz(s)], l.planned(s, layers[psz(s)]));
    if (!std::isfinite(sv->microbatch_us)) return {};
    st.push_back(std::move(sv));
  }
  return st;
}

/// What the schedule really takes with these stages: the makespan of torch's op orders run
/// against the stage dependencies (pipeline/pipeline_timeline.h), each stage with its own
/// forward, input-gradient and weight-gradient time.
double timeline_step(PipelineSchedule sch, int32_t P, int32_t v, int32_t M,
                     const std::vector<std::shared_ptr<const StageSolve>>& st) {
  std::vector<const StageSolve*> raw;
  for (const auto& s : st) raw.push_back(s.get());
  return schedule_timeline(sch, P, v, M, stage_times(raw)).makespan_us;
}

/// A lower bound of every split's timeline on tables of lower bounds: a rank runs its ops one
/// at a time, so no schedule ends before M times the busiest rank's stage costs; the least of
/// that over splits is the rank DP with no fill-and-drain (factor 0).  With a whole backward
/// (1F1B, GPipe, Interleaved1F1B), rank r's first op waits for the forwards of stages 0..r-1
/// and its last op is a backward of one of its stages, which stages r-1..0 wait for, so the
/// timeline is at least M R_r + sum_{s < r} c_s for every r (split_head_tail_bound for one
/// stage per rank, split_ranks_head_tail_bound for v).  With a split backward (zero bubble)
/// the wait ahead holds with the stages' forward floors (split_ranks_head_bound).  The schedule formula is
/// no bound of the timeline for uneven splits (pipeline_test.cc shows one above it), so it
/// is not used as one.  With P = 1 the formula is exactly M R.
/// `floors` (when not empty): per rank and layers, a lower bound of the rank's work under its
/// memory (rank_memory_floors), which every rank's work is raised to.
double busiest_rank_bound(const StageCostTable& low, const StageCostTable& forward, int32_t L, int32_t P, int32_t v,
                          int32_t M, PipelineSchedule sch, const RankFloors& floors) {
  if (P < 2) return split_step(low, L, P, v, M, sch, 1.0).lower_bound_us;
  const RankFloors* rf = floors.empty() ? nullptr : &floors;
  const StageSplit s = best_split_ranks(low, L, P, v, M, 0.0, v_shaped(sch), rf);
  const double busiest = s.layers.empty() ? kPipeInf : s.value;
  // A split backward may end a rank on a W nothing waits for: the forwards ahead only.
  if (splits_backward(sch)) return std::max(busiest, split_ranks_head_bound(low, forward, L, P, v, M, v_shaped(sch), rf));
  // One stage per rank without a split backward: also the fill ahead of and the drain after
  // each rank's own work (split_head_tail_bound), exact for equal stages.
  // With rank floors, also each rank's floor with the fill ahead of it (the interleaved form
  // at v = 1): the floors raise what the head-and-tail DP on the stage bounds cannot.
  if (v == 1)
    return std::max({busiest, split_head_tail_bound(low, L, P, M),
                     rf ? split_ranks_head_tail_bound(low, L, P, 1, M, false, rf) : 0.0});
  // v stages per rank (Interleaved1F1B): the same fill and drain, through each rank's first stage.
  return std::max(busiest, split_ranks_head_tail_bound(low, L, P, v, M, v_shaped(sch), rf));
}

/// Stage tables with every middle stage held to q or q + 1 layers (the first and last, which
/// also hold the embedding and the head, stay free): the near-equal chunks the timeline
/// favours, since an interleaved rank with one long chunk stalls the ranks it feeds.
StageCostTable near_equal(StageCostTable t, int32_t q) {
  const int32_t n = static_cast<int32_t>(t.stages.size());
  for (int32_t s = 1; s + 1 < n; ++s)
    for (size_t k = 0; k < t.stages[psz(s)].size(); ++k)
      if (static_cast<int32_t>(k) != q && static_cast<int32_t>(k) != q + 1) t.stages[psz(s)][k] = kPipeInf;
  return t;
}

/// The split the schedule runs fastest on its timeline among a few candidates: the formula
/// DP's, the best formula split with near-equal middle stages, and torchtitan's equal split.
/// The formula assumes a rank's chunks are alike; the DP left alone balances ranks with very
/// uneven chunks, whose timeline is far longer (issue 25: 70B 753 ms formula, 988 ms timeline).
/// Deterministic: the first of equal makespans.
Evaluated best_on_timeline(Search& S, const Layout& l, Evaluated best) {
  const int32_t n = l.n, L = S.L, M = S.popt.microbatches, q = L / n;
  std::vector<std::vector<int32_t>> cands;
  if (!best.layers.empty()) cands.push_back(best.layers);
  if (n > 2) {
    // The sizes the near-equal and equal splits use.
    std::vector<std::pair<int32_t, int32_t>> sizes;  // (stage position, k)
    for (int32_t k : {q, q + 1})
      if (k >= 1 && k <= L - n + 1) sizes.emplace_back(1, k);
    for (int32_t s : {0, n - 1})
      for (int32_t k : {q - 1, q})
        if (k >= 1) sizes.emplace_back(s, k);
    std::vector<StageRequest> keys;
    for (const auto& [s, k] : sizes) keys.push_back(StageRequest{kind_of(s, n), k, l.planned(s, k)});
    S.solver.prefetch_fitted(keys);
    const double k = layer_factor(S, l.schedule, n);
    const Evaluated e = split_step(near_equal(S.upper_table(l), q), L, S.P, l.v, M, l.schedule, k);
    if (!e.layers.empty()) cands.push_back(e.layers);
  }
  cands.push_back(equal_split(L, n));
  Evaluated out;
  out.lower_bound_us = best.lower_bound_us;
  for (const auto& layers : cands) {
    const auto st = split_solves(S, l, layers);
    if (st.empty()) continue;
    const double t = timeline_step(l.schedule, S.P, l.v, M, st);
    if (t < out.step_us) {
      out.step_us = t;
      out.layers = layers;
    }
  }
  return out;
}

/// Solves stage sizes until the (schedule, v) gap is below the target, or its lower bound
/// reaches `cutoff` (the best step of another schedule or another mesh: this one cannot win;
/// step_us stays infinite).
Evaluated search_split(Search& S, const Layout& l, double cutoff, const std::function<const RankPricing&()>& pricing) {
  const int32_t P = S.P, L = S.L, M = S.popt.microbatches, n = l.n, v = l.v;
  const int32_t K = L - n + 1;
  // A kind never solved yet: one and two layers, the balanced size and two layers above a
  // rank's share with one stage per rank, so that the sizes the DP asks for between are mostly
  // evaluated patterns (StageSolver::free), all at once; the DP on the bounds asks for more.
  std::vector<std::pair<StageKind, int32_t>> first;
  for (int32_t s = 0; s < n; s = s == 0 && n > 2 ? n - 2 : s + 1) {
    const StageKind kind = kind_of(s, n);
    if (S.solver.catalog().memory_free(kind).empty())
      for (int32_t k : {1, std::min(K, 2), std::min(K, (L + n - 1) / n), std::min(K, (L + P - 1) / P + 2)})
        first.emplace_back(kind, k);
  }
  S.solver.prefetch(first);
  if (std::isfinite(cutoff) && cutoff >= S.popt.cutoff_us) {
    // Another mesh's step, which the memory-free bound alone may already reach: then the
    // ranks' memory is never priced (the most expensive step of a layout's search under a
    // limit).  Not against this mesh's own layouts: the floors priced here are also stage
    // plans the later layouts and the assembly draw on.
    const double free_bound = busiest_rank_bound(S.lower_table(l), S.forward_table(l), L, P, v, M, l.schedule, {});
    if (free_bound >= cutoff) {
      Evaluated cut;
      cut.lower_bound_us = free_bound;
      return cut;
    }
  }
  // Under a limit: the ranks' work under their memory (priced once per search, here so that
  // the sizes above are solved first, as without it).
  const RankFloors floors = l.limit > 0 ? rank_memory_floors(S, l, pricing()) : RankFloors{};
  Evaluated best;
  double bound = 0;  // of the timeline: the busiest rank's work
  for (int iter = 0; iter < 16; ++iter) {
    const double k = layer_factor(S, l.schedule, n);
    const StageCostTable lower = S.lower_table(l);
    const Evaluated low = split_step(lower, L, P, v, M, l.schedule, k);
    best.lower_bound_us = std::max(best.lower_bound_us, low.lower_bound_us);  // of the formula
    bound = std::max(bound, busiest_rank_bound(lower, S.forward_table(l), L, P, v, M, l.schedule, floors));  // each is valid
    if (bound >= cutoff) {
      best.step_us = kPipeInf;
      best.lower_bound_us = bound;
      return best;
    }
    Evaluated e = split_step(S.upper_table(l), L, P, v, M, l.schedule, k);
    if (e.step_us < best.step_us) {
      e.lower_bound_us = best.lower_bound_us;
      best = e;
    }
    if (std::isfinite(best.step_us) && best.step_us - best.lower_bound_us <= S.popt.target_gap * best.step_us) break;
    std::vector<int32_t> wanted;  // stage positions
    for (int32_t s = 0; s < static_cast<int32_t>(low.layers.size()); ++s)
      if (!S.solver.resolved(kind_of(s, n), low.layers[psz(s)], l.planned(s, low.layers[psz(s)]))) wanted.push_back(s);
    std::vector<StageRequest> fits;
    for (int32_t s : wanted) fits.push_back(StageRequest{kind_of(s, n), low.layers[psz(s)], l.planned(s, low.layers[psz(s)])});
    S.solver.prefetch_fitted(fits);  // all at once, on threads
    const bool added = !wanted.empty();
    if (!added) break;
  }
  Evaluated out = best_on_timeline(S, l, best);
  out.lower_bound_us = std::min(bound, out.step_us);
  return out;
}


/// The (schedule, v) pairs plan_pipeline tries.  Auto: the zero-bubble schedules, then
/// interleaved 1F1B, with the most stages per rank first (smallest bubble, so its step prunes
/// the others early), then 1F1B; GPipe runs the same step as 1F1B (pipeline_schedule.h) with
/// more activations in flight, so auto never prefers it.
std::vector<std::pair<PipelineSchedule, int32_t>> schedules_to_try(const PipelineOptions& popt, int32_t P,
                                                                   int32_t L) {
  std::vector<std::pair<PipelineSchedule, int32_t>> tries;
  const std::vector<PipelineSchedule> scheds =
      popt.schedule ? std::vector<PipelineSchedule>{*popt.schedule}
                    : std::vector<PipelineSchedule>{PipelineSchedule::kInterleavedZeroBubble,
                                                    PipelineSchedule::kZBVZeroBubble,
                                                    PipelineSchedule::kInterleaved1F1B, PipelineSchedule::k1F1B};
  for (PipelineSchedule s : scheds) {
    std::vector<int32_t> vs = stages_per_rank_options(s);
    if (vs.size() > 1 || vs.front() > 1)
      vs = popt.stages_per_rank > 0 ? std::vector<int32_t>{popt.stages_per_rank} : vs;
    if (!popt.fixed_layers.empty()) vs = {static_cast<int32_t>(popt.fixed_layers.size()) / P};
    for (int32_t v : vs) {
      const std::string why = schedule_problem(s, P, v, popt.microbatches);
      const bool fits = why.empty() && P * v <= L;
      if (!fits && popt.schedule)
        throw std::invalid_argument(fmt::format(
            "--schedule {}: {}", schedule_name(s),
            why.empty() ? fmt::format("{} x {} stages exceed the {} layers", P, v, L) : why));
      if (fits) tries.emplace_back(s, v);
    }
  }
  return tries;
}

/// A fixed split's step and bound (PipelineOptions::fixed_layers).
Evaluated fixed_split(Search& S, const Layout& l) {
  const int32_t v = l.v;
  const std::vector<int32_t>& layers = S.popt.fixed_layers;
  const int32_t n = static_cast<int32_t>(layers.size());
  int32_t total = 0;
  for (int32_t k : layers) total += k;
  if (n != S.P * v || total != S.L || *std::min_element(layers.begin(), layers.end()) < 1)
    throw std::invalid_argument(fmt::format("pipeline: a fixed split needs {} stages of >= 1 layer summing to {}",
                                            S.P * v, S.L));
  std::vector<StageRequest> keys;
  for (int32_t s = 0; s < n; ++s)
    keys.push_back(StageRequest{kind_of(s, n), layers[psz(s)], l.planned(s, layers[psz(s)])});
  S.solver.prefetch_fitted(keys);  // every stage's plan at once, on threads
  std::vector<double> low;
  for (int32_t s = 0; s < n; ++s) {
    auto st = S.solver.fitted(kind_of(s, n), layers[psz(s)], l.planned(s, layers[psz(s)]));
    // A bound under a budget that is not a relaxation: the memory-free one.
    low.push_back(l.budget_is_relaxation() ? st->lower_bound_us : S.solver.free(kind_of(s, n), layers[psz(s)])->lower_bound_us);
  }
  Evaluated e;
  e.layers = layers;
  const auto st = split_solves(S, l, layers);
  e.step_us = st.empty() ? kPipeInf : timeline_step(l.schedule, S.P, v, S.popt.microbatches, st);
  // The busiest rank's work (the formula with no fill-and-drain): a bound of the timeline.
  double bound = pipelined_step_us(l.schedule, low, S.P, v, S.popt.microbatches, 0.0);
  // One stage per rank, whole backwards: also the stages before each rank fill and drain.
  double before = 0;
  if (v == 1 && !splits_backward(l.schedule))
    for (int32_t r = 0; r < n; before += low[psz(r)], ++r)
      bound = std::max(bound, S.popt.microbatches * low[psz(r)] + before);
  e.lower_bound_us = std::min(e.step_us, bound);
  return e;
}

/// Why no split fits the memory, and what would: the smallest stage planned under its budget
/// that found no plan, its proven floor, and what its memory-free plan needs with as many in
/// flight, part by part (StageBuilder::need_bytes: the parts add up to that need).
std::string no_fit_message(const Search& S, const PipelinePlan& pl) {
  std::shared_ptr<const StageSolve> worst;
  StageKey at;
  for (const auto& [key, sv] : S.solver.catalog().of(StagePlanUse::kFitted))
    if (!std::isfinite(sv->microbatch_us) && (!worst || key.k < at.k)) {
      worst = sv;
      at = key;
    }
  if (!worst || pl.memory_limit_bytes <= 0) return "pipeline: no stage split has a plan";
  const int32_t k = at.k;
  const double f = at.inflight;
  const int64_t budget = at.budget;
  const StageSolve& relaxed = *S.solver.catalog().find(StageKey::memory_free(at.kind, at.k));
  const int64_t floor = worst->plan.min_peak_lower_bound_bytes;
  const bool none = S.solver.builder().options().recompute == RecomputePolicy::kNone;
  if (!relaxed.plan.has_solution)  // its figures are unknown (stopped at --time-limit): none to break down
    return fmt::format(
        "pipeline: no stage split fits {} per device: a stage of {} layers has no plan, its memory-free solve none "
        "either within --time-limit {} s (a larger one may find one)",
        bytes_ceil(pl.memory_limit_bytes), k, S.solver.builder().options().time_limit_s);
  const int64_t state = relaxed.microbatch_peak_bytes - relaxed.activation_bytes;
  return fmt::format(
      "pipeline: no stage split fits {} per device: a stage of {} layers with {} microbatches in flight on its "
      "budget of {} has no plan{}{}; its memory-free plan needs {}: {} of parameter state and working memory{}, "
      "{}{} of activations kept by each microbatch in flight.  It would "
      "fit with {}fewer layers or more devices per stage (a larger pp or stage mesh), or smaller microbatches "
      "(more --microbatches for the same batch: in-flight activations shrink with the microbatch)",
      bytes_ceil(pl.memory_limit_bytes), k, f, bytes_ceil(budget), none ? " without recomputation" : " even with recomputation",
      floor > 0 ? fmt::format(" (it needs at least {})", bytes_ceil(floor)) : "",
      bytes_ceil(static_cast<int64_t>(std::ceil(StageBuilder::need_bytes(relaxed, f, at.grads)))), bytes_ceil(state),
      relaxed.gathered_param_bytes > 0
          ? fmt::format(" ({} of it parameters kept gathered over the microbatches)", bytes_ceil(relaxed.gathered_param_bytes))
          : "",
      at.grads ? fmt::format("{} of gradients summed over the step, and ", bytes_ceil(relaxed.deferred_grad_bytes)) : "and ",
      bytes_ceil(relaxed.activation_bytes),
      none ? "recomputation (--recompute auto), " : "");
}

}  // namespace

StageTimes stage_times(const std::vector<const StageSolve*>& stages) {
  StageTimes t;
  for (const StageSolve* st : stages) {
    const PartTimes& p = st->parts;
    const double all = p.forward_us + p.input_grad_us + p.weight_grad_us, c = st->microbatch_us;
    t.forward_us.push_back(all > 0 ? c * p.forward_us / all : c / 2);
    t.backward_us.push_back(all > 0 ? c * p.input_grad_us / all : c / 2);
    t.weight_us.push_back(all > 0 ? c * p.weight_grad_us / all : 0.0);
  }
  return t;
}

StageTimes stage_times(const PipelinePlan& pl) {
  std::vector<const StageSolve*> st;
  for (const PipelineStage& s : pl.stages) st.push_back(s.solve.get());
  return stage_times(st);
}

PipelineTimeline stage_timeline(const PipelinePlan& pl) {
  return schedule_timeline(pl.schedule, pl.P, pl.v, pl.M, stage_times(pl));
}

std::vector<int32_t> equal_split(int32_t L, int32_t S) {
  std::vector<int32_t> r(psz(S), L / S);
  for (int32_t i = 0, extra = L % S; extra > 0; ++i, --extra) ++r[psz(S > 2 ? 1 + i % (S - 2) : i % S)];
  return r;
}

namespace {

/// What the search over (schedule, v) layouts found: the candidates that fit (in the order
/// tried), the least bound and whether any candidate was planned under the limit.
struct SearchResult {
  std::vector<ScheduleCandidate> cands;
  double lower = kPipeInf;
  bool planned = false;
  /// The least bound of the layouts PipelineOptions::cutoff_us stopped (infinite: none was).
  double cut_lower = kPipeInf;
};

/// The search: each layout's best split (search_split, or the fixed split), the steps found so
/// far pruning the later layouts; then, under a limit, each v > 1 layout's memory-free split.
/// With v > 1 a stage's budget is a share of its rank's memory, which can force recomputation
/// on a split whose ranks would fit the limit without it, or a dearer split whose stages fit
/// theirs: the memory-free split is a candidate too, kept only where its assembled ranks fit
/// (never re-planned).  Its bound is no bound under the limit: not counted.
SearchResult search_layouts(Search& S, const std::vector<Layout>& layouts, PipelinePlan& pl) {
  const PipelineOptions& popt = S.popt;
  PipelineProgressTracker& progress = S.solver.builder().progress();
  std::optional<RankPricing> pricing;
  auto priced = [&]() -> const RankPricing& {
    if (!pricing) pricing = rank_pricing(S, layouts);
    return *pricing;
  };
  SearchResult r;
  // The best step so far: another mesh's (the cutoff), then this mesh's layouts'.
  double best_step = popt.cutoff_us;
  for (const Layout& l : layouts) {
    progress.searching(fmt::format("{}{}", schedule_name(l.schedule), l.v > 1 ? fmt::format(" v={}", l.v) : ""));
    const Evaluated e = popt.fixed_layers.empty() ? search_split(S, l, best_step, priced) : fixed_split(S, l);
    progress.evaluated(e.step_us, e.lower_bound_us);
    pl.candidates.push_back({l.schedule, l.v, e.step_us, e.lower_bound_us});
    r.lower = std::min(r.lower, e.lower_bound_us);
    if (!std::isfinite(e.step_us) && e.lower_bound_us >= popt.cutoff_us) r.cut_lower = std::min(r.cut_lower, e.lower_bound_us);
    best_step = std::min(best_step, e.step_us);
    if (!e.layers.empty() && std::isfinite(e.step_us)) r.cands.push_back({e, l, l.schedule, l.v});
  }
  r.planned = !r.cands.empty();
  if (!popt.fixed_layers.empty() || pl.memory_limit_bytes <= 0) return r;
  progress.searching("memory-free splits");
  for (const Layout& l : layouts) {
    if (l.v == 1) continue;
    Layout unlimited = l;
    unlimited.limit = 0;
    const Evaluated e = search_split(S, unlimited, popt.cutoff_us, priced);
    if (!e.layers.empty() && std::isfinite(e.step_us)) r.cands.push_back({e, unlimited, l.schedule, l.v});
  }
  return r;
}

/// A middle stage of half a rank's layers priced under its share of the limit at the
/// layouts' most in flight (StageSolver::price_rank_pattern): the stage plans are made per
/// (kind, layers) under a share of a rank, and their shardings fit a whole rank badly; this
/// sharding, made for a rank's memory, is a further source of every rank's refit.
void price_rank_pattern(Search& S, const std::vector<Layout>& layouts, int64_t limit) {
  double most = 1;
  for (const Layout& l : layouts) most = std::max(most, *std::max_element(l.inflight.begin(), l.inflight.end()));
  // Half a rank's layers: the middle layers' sharding is what is kept, and the smaller
  // stage's priced solves end sooner.
  const int32_t k = std::max(2, (S.L + S.P - 1) / S.P / 2);
  S.solver.price_rank_pattern(k, most, static_cast<int64_t>(static_cast<double>(limit) * k * S.P / S.L));
}

/// The search's least bound with each searched layout's ranks raised to their priced floors
/// (PipelineOptions::price_ranks_after), on the search's final stage tables: each layout's
/// bound is the larger of its search's and this one (both hold), at most its step (a layout
/// with no plan that fits, or cut off, has an infinite step: its priced bound counts whole).
/// Updates pl.candidates' bounds, one per layout in `layouts`' order.
double priced_after(const Search& S, const std::vector<Layout>& layouts, PipelinePlan& pl) {
  PipelineOptions on = S.popt;
  on.rank_memory_bound = true;
  Search T{S.g, S.mesh, on, S.m, S.solver, S.pp, S.P, S.L};
  const RankPricing rp = rank_pricing(T, layouts);
  double lower = kPipeInf;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const Layout& l = layouts[i];
    PipelinePlan::Candidate& c = pl.candidates[i];
    if (l.limit > 0) {
      const RankFloors floors = rank_memory_floors(T, l, rp);
      if (!floors.empty()) {
        const double b = busiest_rank_bound(T.lower_table(l), T.forward_table(l), T.L, T.P, l.v, on.microbatches,
                                            l.schedule, floors);
        c.lower_bound_us = std::max(c.lower_bound_us, std::min(b, c.step_us));
      }
    }
    lower = std::min(lower, c.lower_bound_us);
  }
  return lower;
}

}  // namespace

PipelineCutoff::PipelineCutoff(double lower_bound_us)
    : std::runtime_error(fmt::format("no plan on this mesh beats the cutoff: lower bound {:.1f} us", lower_bound_us)),
      lower_bound_us_(lower_bound_us) {}

namespace {

/// The plan's fixed fields before the search: sizes, meshes, layers and memory limit.
PipelinePlan plan_head(const Search& S, const PlannerOptions& opt) {
  PipelinePlan pl;
  pl.P = S.P;
  pl.M = S.popt.microbatches;
  pl.pp_dim = S.pp;
  pl.stage_mesh = S.solver.builder().sub();
  pl.layers = S.m.layers;
  pl.memory_limit_bytes = opt.memory_limit_bytes < 0 ? S.mesh.hardware().memory_bytes : opt.memory_limit_bytes;
  pl.params_gathered_once = S.popt.params_gathered_once;
  return pl;
}

/// Whether memory shaped `pl` or its bound (VariantPlan::memory_bound).
bool memory_bound(Search& S, const PipelinePlan& pl) {
  if (!S.solver.catalog().of(StagePlanUse::kFitted).empty() || S.solver.has_priced_floors() || !ranks_fit(pl))
    return true;
  const int32_t n = static_cast<int32_t>(pl.stages.size());
  for (const PipelineStage& st : pl.stages)
    if (st.solve->microbatch_us > S.solver.free(kind_of(st.index, n), st.hi - st.lo)->microbatch_us) return true;
  return false;
}

}  // namespace

VariantPlan pipeline_detail::plan_with_gather(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                                             const PipelineOptions& popt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t pp = pp_dim_of(mesh);
  if (pp < 0) throw std::invalid_argument("pipeline: the mesh has no dim named pp");
  const LayerMap m = map_layers(g);
  StageSolver solver(g, mesh, opt, popt, m, pp);
  Search S{g, mesh, popt, m, solver, pp, static_cast<int32_t>(mesh.size(pp)), m.num_layers()};
  if (S.P > S.L)
    throw std::invalid_argument(fmt::format("pp size {} exceeds the graph's {} layers", S.P, S.L));
  if (popt.microbatches < 1)
    throw std::invalid_argument(fmt::format("--microbatches: expected >= 1, got {}", popt.microbatches));
  PipelinePlan pl = plan_head(S, opt);
  if (!popt.fixed_layers.empty() && !popt.schedule)
    throw std::invalid_argument("pipeline: a fixed split needs a schedule");
  std::vector<Layout> layouts;
  for (const auto& [s, v] : schedules_to_try(popt, S.P, S.L))
    layouts.push_back(layout_of(s, S.P, S.L, v, pl.M, pl.memory_limit_bytes));
  const SearchResult found = search_layouts(S, layouts, pl);
  if (found.cands.empty() && std::isfinite(found.cut_lower)) throw PipelineCutoff(found.cut_lower);
  if (found.cands.empty()) throw std::runtime_error(no_fit_message(S, pl));
  const std::string no_fit = found.planned ? std::string() : no_fit_message(S, pl);
  if (pl.memory_limit_bytes > 0 && popt.refit_ranks && popt.rank_pattern && !popt.stage_hook)
    price_rank_pattern(S, layouts, pl.memory_limit_bytes);
  solver.builder().progress().searching("assembling the ranks");
  pl = fastest_that_fits(S, pl, found.cands);
  // Only memory-free candidates, and none fits: no plan, as without them.
  if (!found.planned && pl.memory_limit_bytes > 0 &&
      *std::max_element(pl.rank_peak_bytes.begin(), pl.rank_peak_bytes.end()) > pl.memory_limit_bytes)
    throw std::runtime_error(no_fit);
  double lower = found.lower;
  if (!popt.rank_memory_bound && popt.price_ranks_after && popt.fixed_layers.empty() && pl.memory_limit_bytes > 0 &&
      popt.price_ranks_after(pl))
    lower = priced_after(S, layouts, pl);
  pl.lower_bound_us = std::min(lower, pl.step_us);
  pl.gap = pl.step_us > 0 ? (pl.step_us - pl.lower_bound_us) / pl.step_us : 0;
  map_nodes(S, pl);
  pl.intra_op_solves = solver.builder().solves();
  pl.clock_stopped_solves = solver.builder().clock_stopped_solves();
  pl.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool bound = memory_bound(S, pl);
  return {std::move(pl), bound};
}

}  // namespace autoshard

/// Lower bounds of a pp rank's work under the device limit for all its stages together: the
/// rank-level Lagrangian relaxation of memory that layouts with v > 1 stages per rank need.
///
/// Why.  With v stages per rank the stages' budgets are shares of the rank's memory
/// (pipeline_layout.h Layout::budget), which bound nothing: a plan may give one stage more and
/// another less.  The constraint that holds is the rank's: sum_j need_j <= limit, need_j a
/// stage's one-microbatch peak plus its other in-flight microbatches' kept activations (the
/// rank's peak, pipeline_assemble.cc rank_peaks).  Each need_j is at least the stage's true
/// usage at its forward/backward boundary t*, which its priced problem counts as U_j less a
/// rounding of a byte per node live there (inflight_memory.h boundary_usage).  So for every
/// price lambda >= 0 the rank's work R = sum_j T_j satisfies
///     R >= sum_j min_x [T_j(x) + lambda (U_j(x) - live_j)] - lambda limit,
/// and each min is a memory-free priced solve's proven bound (StageSolver::priced_floors).
///
/// Which solves.  One price for the whole search, from the Kelley dual of a representative
/// middle stage on its share (StageSolver::price_memory); the priced floors of each stage kind
/// at 1 and 32 layers and at the least and the most in-flight count of all the layouts.
/// With the layers tied, a plan's priced cost is affine in the layers and in the in-flight
/// count, so the floors are concave in each: chords between samples are lower bounds, and
/// above the largest size each layer adds at least its memory-free floor less its rounding.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "planner/pipeline_layout.h"

namespace autoshard::pipeline_detail {

namespace {

/// The largest stage size sampled: above it a layer adds its memory-free floor only, so it is
/// well above the stages of any split the DPs consider (llama3-405b on 8 ranks: 4-8 layers).
constexpr int32_t kLargestSample = 32;

/// The chord of (x, y) samples (x ascending) at x0, or +inf outside them.
double chord_at(const std::vector<std::pair<double, double>>& pts, double x0) {
  for (size_t i = 0; i < pts.size(); ++i) {
    if (pts[i].first == x0) return pts[i].second;
    if (i + 1 < pts.size() && pts[i].first < x0 && x0 < pts[i + 1].first) {
      const double w = (x0 - pts[i].first) / (pts[i + 1].first - pts[i].first);
      return pts[i].second + w * (pts[i + 1].second - pts[i].second);
    }
  }
  return kPipeInf;
}

}  // namespace

RankPricing rank_pricing(Search& S, const std::vector<Layout>& layouts) {
  RankPricing rp;
  double lo = kPipeInf, hi = 0;
  int32_t n_most = 0;
  for (const Layout& l : layouts) {
    if (l.v == 1 || l.limit <= 0 || l.n < 3) continue;
    for (double f : l.inflight) lo = std::min(lo, f), hi = std::max(hi, f);
    n_most = std::max(n_most, l.n);
  }
  if (!S.popt.rank_memory_bound || hi <= 0 || S.popt.stage_hook) return rp;
  const int32_t K = S.L - n_most + 1;  // every layout's stages may hold this many
  // The price: a two-layer middle stage on its share of the rank at the most in flight (where
  // memory binds first); none where that stage's memory-free plan fits.
  const int32_t k0 = std::min(2, K);
  const int64_t limit = layouts.front().limit;
  const StageMemory share{hi, static_cast<int64_t>(static_cast<double>(limit) * k0 * S.P / S.L), false, true};
  const auto relaxed = S.solver.free(kStageMid, k0);
  if (StageSolver::fits(*relaxed, share)) return rp;
  const StageSolver::PricedBound pb = S.solver.price_memory(kStageMid, k0, share, *relaxed, nullptr);
  // Where pricing the representative's memory lifts its bound by less than the target gap, the
  // floors would lift the ranks' by as little (llama3-405b `--layers 32`: 0.02 %, for 25 s of
  // priced solves): none.
  if (!(pb.lambda > 0) || pb.bound <= relaxed->lower_bound_us * (1 + S.popt.target_gap)) return rp;
  rp.lambda = pb.lambda;
  rp.f_lo = lo;
  rp.f_hi = hi;
  // Two sizes: the floors are concave in k, so their chord bounds every size between, and
  // a sample between would only lower it where its own proof is looser.
  rp.sizes = {1};
  if (K > 1) rp.sizes.push_back(std::min(K, kLargestSample));
  std::vector<StageSolver::PriceKey> keys;
  for (int32_t kind : {kStageFirst, kStageMid, kStageLast})
    for (int32_t k : rp.sizes)
      for (double f : {lo, hi}) keys.emplace_back(kind, k, f, rp.lambda);
  S.solver.priced_floors(keys);  // all at once, on threads
  return rp;
}

RankFloors rank_memory_floors(Search& S, const Layout& l, const RankPricing& rp) {
  if (!(rp.lambda > 0) || l.v == 1 || l.limit <= 0 || l.n < 3) return {};
  const int32_t L = S.L, K = L - l.n + 1;
  const double lambda = rp.lambda;
  // Per kind and in-flight count f: the floor per k, chords in f between the two samples,
  // then in k between the sizes.
  auto table = [&](int32_t kind, double f) {
    std::vector<std::pair<double, double>> pts;  // (k, floor at f)
    int64_t live_most = 0;
    for (int32_t k : rp.sizes) {
      const auto at = S.solver.priced_floors({{kind, k, rp.f_lo, lambda}, {kind, k, rp.f_hi, lambda}});
      const double y = rp.f_hi > rp.f_lo
                           ? chord_at({{rp.f_lo, at[0].floor}, {rp.f_hi, at[1].floor}}, f)
                           : std::min(at[0].floor, at[1].floor);
      pts.emplace_back(k, y);
      live_most = std::max({live_most, at[0].live, at[1].live});
    }
    const auto& [k_max, y_max] = pts.back();
    // Above the largest size: each layer adds its memory-free floor, less (generously) the
    // rounding of every node live at t* in the largest sample.
    const double slope = S.solver.free(static_cast<StageKind>(kind), static_cast<int32_t>(k_max))->layer_floor_us -
                         lambda * static_cast<double>(live_most);
    std::vector<double> v(psz(K) + 1, kPipeInf);
    for (int32_t k = 1; k <= K; ++k)
      v[psz(k)] = k > k_max ? y_max + (k - k_max) * slope : chord_at(pts, k);
    return v;
  };
  RankFloors floors(psz(l.P));
  for (int32_t q = 0; q < l.P; ++q) {
    std::vector<std::vector<double>> tables;
    for (int32_t s = 0; s < l.n; ++s)
      if (stage_rank(l.schedule, l.P, s) == q) tables.push_back(table(kind_of(s, l.n), l.inflight[psz(s)]));
    std::vector<const std::vector<double>*> ptrs;
    for (const auto& t : tables) ptrs.push_back(&t);
    std::vector<double> g = rank_least_sums(ptrs, L);
    for (double& x : g)
      if (x < kPipeInf) x -= lambda * static_cast<double>(l.limit);
    floors[psz(q)] = std::move(g);
  }
  return floors;
}

}  // namespace autoshard::pipeline_detail

/// Lower bounds of a pp rank's work under the device limit for all its stages together: the
/// rank-level Lagrangian relaxation of memory that layouts with v > 1 stages per rank need,
/// and that one stage per rank gets too (its time-limited memory-limited solves prove little:
/// llama3-405b's 16-layer stage, 565 ms proven against a 779 ms floor).
///
/// Why.  With v stages per rank the stages' budgets are shares of the rank's memory
/// (pipeline_layout.h Layout::budget), which bound nothing: a plan may give one stage more and
/// another less.  The constraint that holds is the rank's: sum_j need_j <= limit, need_j a
/// stage's one-microbatch peak plus its other in-flight microbatches' kept activations (the
/// rank's peak, pipeline_assemble.cc rank_peaks).  Each need_j is at least the stage's true
/// usage at its forward/backward boundary t* plus the gradients it sums over the step, which
/// its priced problem counts as U_j less a rounding of a byte per node live there
/// (inflight_memory.h boundary_usage, price_boundary_usage).  So for every
/// price lambda >= 0 the rank's work R = sum_j T_j satisfies
///     R >= sum_j min_x [T_j(x) + lambda (U_j(x) - live_j)] - lambda limit,
/// and each min is a memory-free priced solve's proven bound (StageSolver::priced_floors).
///
/// A zero-bubble rank also keeps, per microbatch whose W waits, the gradients its B handed
/// over (pipeline_schedule.h deferred_microbatches): priced too, on the tensors B hands to W.
///
/// Which solves.  One price for the whole search, from the Kelley dual of a representative
/// middle stage on its share (StageBuilder::price_memory); the priced floors of each stage kind
/// at 1 layer and at a rank's share of the layers, at the least and the most in-flight count
/// of all the layouts (and the least of the interleaved ones), and with none or the most
/// microbatches handed to W.
/// With the layers tied, a plan's priced cost is affine in the layers and jointly in the
/// in-flight and handed-over counts, so the floors are concave in each: chords between samples
/// are lower bounds, and above the largest size each layer adds at least its memory-free
/// floor less its rounding.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/pipeline_layout.h"

namespace autoshard::pipeline_detail {

namespace {

/// The largest stage size sampled: a rank's share of the layers, the largest stage of a
/// balanced split with one stage per rank.  Above it a layer adds its memory-free floor only
/// (a weaker floor, but such a stage makes its rank busier than the balanced split's); below
/// it the chord from one layer is closer to the concave floors the smaller the sample, and
/// the sample's priced solve is smaller.  Not less: on llama3-405b 8x8x8 (16 layers) a sample
/// of 8 lets the DP's splits with larger stages bring the bound down from 23.8 to 22.1 s.
int32_t largest_sample(int32_t L, int32_t P) { return std::max(2, (L + P - 1) / P); }
/// The most distinct in-flight counts sampled one by one (each costs a priced solve per stage
/// kind and size); with more, the least, the most and the least of v > 1 (chords between).
constexpr size_t kMostCounts = 4;

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

/// What a rank at stage position s of `l` keeps for its deferred weight gradients, in
/// microbatches (pipeline_schedule.h deferred_microbatches; 0 without a split backward).
double deferred_at(const Search& S, const Layout& l, int32_t s) {
  return deferred_microbatches(l.schedule, l.P, l.v, S.popt.microbatches, stage_rank(l.schedule, l.P, s));
}

}  // namespace

RankPricing rank_pricing(Search& S, const std::vector<Layout>& layouts) {
  RankPricing rp;
  double lo = kPipeInf, hi = 0, lo_v = kPipeInf, d_hi = 0;
  int32_t n_most = 0;
  std::vector<double> counts;  // every stage's in-flight count, for a few-count search
  for (const Layout& l : layouts) {
    if (l.limit <= 0 || l.n < 3) continue;
    for (double f : l.inflight) {
      counts.push_back(f);
      lo = std::min(lo, f), hi = std::max(hi, f);
      if (l.v > 1) lo_v = std::min(lo_v, f);
    }
    for (int32_t s = 0; s < l.n; ++s) d_hi = std::max(d_hi, deferred_at(S, l, s));
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
  if (StageBuilder::fits(*relaxed, share)) return rp;
  const StageBuilder::PricedBound pb = S.solver.builder().price_memory(kStageMid, k0, share, *relaxed, nullptr);
  // Where pricing the representative's memory lifts its bound by less than the target gap, the
  // floors would lift the ranks' by as little (llama3-405b `--layers 32`: 0.02 %, for 25 s of
  // priced solves): none.
  if (!(pb.lambda > 0) || pb.bound <= relaxed->lower_bound_us * (1 + S.popt.target_gap)) return rp;
  rp.lambda = pb.lambda;
  rp.fs = {lo};
  if (lo_v > lo && lo_v < hi) rp.fs.push_back(lo_v);
  if (hi > lo) rp.fs.push_back(hi);
  // The stages of a rank with v > 1 hold unequal counts (stage_inflight_microbatches: 3 and 2
  // on the first rank of Interleaved1F1B at P = 2, M = 4, not 2.5 each); where the layouts
  // have at most kMostCounts distinct counts each is sampled, so no stage's floor is a chord.
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  if (counts.size() <= kMostCounts) rp.fs = counts;
  rp.d_hi = d_hi;
  // Two sizes: the floors are concave in k, so their chord bounds every size between, and
  // a sample between would only lower it where its own proof is looser.
  rp.sizes = {1};
  if (K > 1) rp.sizes.push_back(std::min(K, largest_sample(S.L, S.P)));
  std::vector<StageKey> keys;
  for (int32_t kind : {kStageFirst, kStageMid, kStageLast})
    for (int32_t k : rp.sizes)
      for (double d : {0.0, d_hi})
        for (double f : rp.fs)
          if (d == 0 || d_hi > 0)
            keys.push_back(StageKey::priced_floor(static_cast<StageKind>(kind), k, f, d, rp.lambda));
  S.solver.priced_floors(keys);  // all at once, on threads
  return rp;
}

RankFloors rank_memory_floors(Search& S, const Layout& l, const RankPricing& rp) {
  if (!(rp.lambda > 0) || l.limit <= 0 || l.n < 3) return {};
  const int32_t L = S.L, K = L - l.n + 1;
  const double lambda = rp.lambda;
  // A kind's floor at k sampled layers, f in flight and d handed to W: the floors are jointly
  // concave in (f, d) (a plan's priced cost is affine in both), so the bilinear mix of the
  // four corners around (f, d) (a convex combination) bounds it.
  auto at = [&](int32_t kind, int32_t k, double f, double d, int64_t& live_most) {
    size_t i = 0;  // the sampled counts f0 <= f <= f1 around f
    while (i + 2 < rp.fs.size() && f > rp.fs[i + 1]) ++i;
    const double f0 = rp.fs[i], f1 = rp.fs[std::min(i + 1, rp.fs.size() - 1)];
    const double a = f1 > f0 ? std::clamp((f - f0) / (f1 - f0), 0.0, 1.0) : 0.0;
    const double b = rp.d_hi > 0 ? d / rp.d_hi : 0.0;
    double y = 0;
    for (const auto& [ff, dd, w] : {std::tuple{f0, 0.0, (1 - a) * (1 - b)}, std::tuple{f1, 0.0, a * (1 - b)},
                                    std::tuple{f0, rp.d_hi, (1 - a) * b}, std::tuple{f1, rp.d_hi, a * b}}) {
      if (w <= 0) continue;
      const StageKey key = StageKey::priced_floor(static_cast<StageKind>(kind), k, ff, dd, lambda);
      const StageBuilder::PricedFloor p = S.solver.priced_floors({key})[0];
      y += w * p.floor;
      live_most = std::max(live_most, p.live);
    }
    return y;
  };
  // Per kind, f and d: the floor per k, chords in k between the sizes.
  auto table = [&](int32_t kind, double f, double d) {
    std::vector<std::pair<double, double>> pts;  // (k, floor)
    int64_t live_most = 0;
    for (int32_t k : rp.sizes) pts.emplace_back(k, at(kind, k, f, d, live_most));
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
      if (stage_rank(l.schedule, l.P, s) == q)
        tables.push_back(table(kind_of(s, l.n), l.inflight[psz(s)], deferred_at(S, l, s)));
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

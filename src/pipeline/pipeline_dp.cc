#include "pipeline/pipeline_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace autoshard {

namespace {

constexpr double kDpInf = std::numeric_limits<double>::infinity();

double dp_at(const std::vector<double>& v, int32_t k) {
  return k >= 0 && static_cast<size_t>(k) < v.size() ? v[static_cast<size_t>(k)] : kDpInf;
}

/// Min-sum DP with every stage cost <= cap; fills `layers` with the argmin split.
double capped_min_sum(const StageCostTable& c, int32_t L, int32_t S, double cap,
                      std::vector<int32_t>* layers) {
  const size_t W = static_cast<size_t>(L) + 1;
  std::vector<double> F(static_cast<size_t>(S + 1) * W, kDpInf);
  std::vector<int32_t> arg(F.size(), 0);
  F[0] = 0;
  for (int32_t s = 1; s <= S; ++s) {
    // Stage s-1 ends at layer l; the S - s stages after it need one layer each.
    for (int32_t l = s; l <= L - (S - s); ++l) {
      double best = kDpInf;
      int32_t bk = 0;
      for (int32_t k = 1; k <= l - (s - 1); ++k) {
        const double prev = F[static_cast<size_t>(s - 1) * W + static_cast<size_t>(l - k)];
        if (prev == kDpInf) continue;
        const double ck = c.cost(s - 1, S, k);
        if (!(ck <= cap)) continue;
        if (prev + ck < best) {
          best = prev + ck;
          bk = k;
        }
      }
      F[static_cast<size_t>(s) * W + static_cast<size_t>(l)] = best;
      arg[static_cast<size_t>(s) * W + static_cast<size_t>(l)] = bk;
    }
  }
  const double total = F[static_cast<size_t>(S) * W + static_cast<size_t>(L)];
  if (layers && total < kDpInf) {
    layers->assign(static_cast<size_t>(S), 0);
    for (int32_t s = S, l = L; s >= 1; --s) {
      const int32_t k = arg[static_cast<size_t>(s) * W + static_cast<size_t>(l)];
      (*layers)[static_cast<size_t>(s - 1)] = k;
      l -= k;
    }
  }
  return total;
}

}  // namespace

double StageCostTable::cost(int32_t s, int32_t S, int32_t k) const {
  if (!stages.empty()) return dp_at(stages.at(static_cast<size_t>(s)), k);
  if (S == 1) return dp_at(both, k);
  if (s == 0) return dp_at(first, k);
  if (s == S - 1) return dp_at(last, k);
  return dp_at(mid, k);
}

std::vector<double> split_costs(const StageCostTable& c, const std::vector<int32_t>& layers) {
  std::vector<double> r;
  const int32_t S = static_cast<int32_t>(layers.size());
  for (int32_t s = 0; s < S; ++s) r.push_back(c.cost(s, S, layers[static_cast<size_t>(s)]));
  return r;
}

StageSplit best_split_sum(const StageCostTable& c, int32_t L, int32_t S) {
  StageSplit r;
  if (S < 1 || L < S) return r;
  r.value = capped_min_sum(c, L, S, kDpInf, &r.layers);
  if (r.layers.empty()) r.value = kDpInf;
  return r;
}

namespace {

/// Rank q's j-th stage: q + j P (looped), or in a V q and 2P - 1 - q (rank 0 holds the first
/// and the last stage).
int32_t rank_stage(int32_t P, bool v_shape, int32_t q, int32_t j) { return v_shape && j == 1 ? 2 * P - 1 - q : q + j * P; }

/// Stage s's table of S stages: its own, or its kind's.
const std::vector<double>& stage_table(const StageCostTable& t, int32_t s, int32_t S) {
  if (!t.stages.empty()) return t.stages.at(static_cast<size_t>(s));
  return S == 1 ? t.both : s == 0 ? t.first : s == S - 1 ? t.last : t.mid;
}

/// Cheapest j stages of one kind holding n layers: G[j][n], with the argmin sizes.
struct RankTable {
  std::vector<double> g;                      ///< per n: the rank's least sum
  std::vector<std::vector<int32_t>> sizes;    ///< per n: its stage sizes, in stage order
};

/// The v stages of a rank, stage j with table `t[j]`; n layers in all, each stage >= 1.
RankTable rank_table(const std::vector<const std::vector<double>*>& tables, int32_t L) {
  const int32_t v = static_cast<int32_t>(tables.size());
  // F[j][n]: stages 0..j-1 of the rank with n layers.
  const size_t W = static_cast<size_t>(L) + 1;
  std::vector<std::vector<double>> F(static_cast<size_t>(v) + 1, std::vector<double>(W, kDpInf));
  std::vector<std::vector<int32_t>> A(F.size(), std::vector<int32_t>(W, 0));
  F[0][0] = 0;
  for (int32_t j = 1; j <= v; ++j) {
    const std::vector<double>& t = *tables[static_cast<size_t>(j - 1)];
    for (int32_t n = j; n <= L; ++n)
      for (int32_t k = 1; k <= n - (j - 1); ++k) {
        const double x = F[static_cast<size_t>(j - 1)][static_cast<size_t>(n - k)] + dp_at(t, k);
        if (x < F[static_cast<size_t>(j)][static_cast<size_t>(n)]) {
          F[static_cast<size_t>(j)][static_cast<size_t>(n)] = x;
          A[static_cast<size_t>(j)][static_cast<size_t>(n)] = k;
        }
      }
  }
  RankTable r;
  r.g = F[static_cast<size_t>(v)];
  r.sizes.assign(W, {});
  for (int32_t n = 0; n <= L; ++n) {
    if (r.g[static_cast<size_t>(n)] == kDpInf) continue;
    std::vector<int32_t> part(static_cast<size_t>(v));
    for (int32_t j = v, m = n; j >= 1; --j) {
      part[static_cast<size_t>(j - 1)] = A[static_cast<size_t>(j)][static_cast<size_t>(m)];
      m -= part[static_cast<size_t>(j - 1)];
    }
    r.sizes[static_cast<size_t>(n)] = std::move(part);
  }
  return r;
}

/// Least sum_r g_r(n_r) over ranks with every g_r(n_r) <= cap and sum n_r = L; `n` receives
/// the layers per rank.
double ranks_min_sum(const std::vector<const RankTable*>& rank, int32_t L, double cap,
                     std::vector<int32_t>* n) {
  const size_t P = rank.size(), W = static_cast<size_t>(L) + 1;
  std::vector<double> F(W, kDpInf), G(W);
  std::vector<std::vector<int32_t>> arg(P, std::vector<int32_t>(W, 0));
  F[0] = 0;
  for (size_t r = 0; r < P; ++r) {
    std::fill(G.begin(), G.end(), kDpInf);
    for (size_t l = 0; l < W; ++l) {
      if (F[l] == kDpInf) continue;
      for (size_t m = 1; l + m < W; ++m) {
        const double g = rank[r]->g[m];
        if (!(g <= cap)) continue;
        if (F[l] + g < G[l + m]) {
          G[l + m] = F[l] + g;
          arg[r][l + m] = static_cast<int32_t>(m);
        }
      }
    }
    std::swap(F, G);
  }
  if (F[W - 1] == kDpInf) return kDpInf;
  n->assign(P, 0);
  for (size_t r = P, l = W - 1; r-- > 0;) {
    (*n)[r] = arg[r][l];
    l -= static_cast<size_t>((*n)[r]);
  }
  return F[W - 1];
}

}  // namespace

std::vector<double> rank_least_sums(const std::vector<const std::vector<double>*>& tables, int32_t L) {
  return rank_table(tables, L).g;
}

namespace {

/// g raised to rank q's floor, where one is given.
void raise_to_floor(std::vector<double>& g, const RankFloors* rank_floor, int32_t q) {
  if (!rank_floor) return;
  const std::vector<double>& f = rank_floor->at(static_cast<size_t>(q));
  for (size_t n = 0; n < g.size() && n < f.size(); ++n)
    if (g[n] < kDpInf) g[n] = std::max(g[n], f[n]);
}

}  // namespace

StageSplit best_split_ranks(const StageCostTable& c, int32_t L, int32_t P, int32_t v, int32_t M,
                            double factor, bool v_shape, const RankFloors* rank_floor) {
  StageSplit r;
  r.value = kDpInf;
  if (P < 2 || v < 1 || L < P * v || (v_shape && v != 2)) return r;
  const int32_t S = P * v;
  // Rank q's j-th stage: q + j P (looped), or in a V rank q holds q and 2P - 1 - q (rank 0
  // holds the first and the last stage).
  auto stage_of = [&](int32_t q, int32_t j) { return rank_stage(P, v_shape, q, j); };
  auto table_of = [&](int32_t s) { return &stage_table(c, s, S); };
  std::vector<RankTable> tables;
  for (int32_t q = 0; q < P; ++q) {
    std::vector<const std::vector<double>*> t;
    for (int32_t j = 0; j < v; ++j) t.push_back(table_of(stage_of(q, j)));
    tables.push_back(rank_table(t, L));
    raise_to_floor(tables.back().g, rank_floor, q);
  }
  std::vector<const RankTable*> rank;
  for (const RankTable& t : tables) rank.push_back(&t);
  std::vector<double> caps;
  for (const RankTable& t : tables)
    for (double x : t.g)
      if (x < kDpInf) caps.push_back(x);
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  const double a = M - factor / v;
  for (double cap : caps) {
    if (a * cap >= r.value) break;
    std::vector<int32_t> n;
    const double sum = ranks_min_sum(rank, L, cap, &n);
    if (sum == kDpInf) continue;
    double mx = 0;
    for (size_t q = 0; q < n.size(); ++q) mx = std::max(mx, rank[q]->g[static_cast<size_t>(n[q])]);
    const double value = a * mx + factor * sum / v;
    if (value < r.value) {
      r.value = value;
      r.layers.assign(static_cast<size_t>(S), 0);
      for (int32_t q = 0; q < P; ++q)
        for (int32_t j = 0; j < v; ++j)
          r.layers[static_cast<size_t>(stage_of(q, j))] =
              rank[static_cast<size_t>(q)]->sizes[static_cast<size_t>(n[static_cast<size_t>(q)])][static_cast<size_t>(j)];
    }
  }
  return r;
}

namespace {

/// Whether some split keeps every stage's M c_s + (the costs before it) within `cap`.
bool head_tail_fits(const StageCostTable& c, int32_t L, int32_t S, int32_t M, double cap) {
  const size_t W = static_cast<size_t>(L) + 1;
  std::vector<double> F(W, kDpInf), G(W);
  F[0] = 0;  // F[l]: least prefix of the stages so far over l layers
  for (int32_t s = 0; s < S; ++s) {
    std::fill(G.begin(), G.end(), kDpInf);
    for (size_t l = 0; l < W; ++l) {
      if (F[l] == kDpInf) continue;
      for (size_t k = 1; l + k < W; ++k) {
        const double x = c.cost(s, S, static_cast<int32_t>(k));
        if (x < kDpInf && M * x + F[l] <= cap) G[l + k] = std::min(G[l + k], F[l] + x);
      }
    }
    std::swap(F, G);
  }
  return F[W - 1] < kDpInf;
}

}  // namespace

double split_head_tail_bound(const StageCostTable& c, int32_t L, int32_t S, int32_t M) {
  if (S < 1 || L < S || !head_tail_fits(c, L, S, M, kDpInf)) return kDpInf;
  double hi = 1;
  while (!head_tail_fits(c, L, S, M, hi)) hi *= 2;
  double lo = 0;  // never feasible below the optimum, so lo stays a lower bound
  while (hi - lo > 1e-9 * hi) {
    const double mid = (lo + hi) / 2;
    (head_tail_fits(c, L, S, M, mid) ? hi : lo) = mid;
  }
  return lo;
}

namespace {

/// Per layers n of one rank: the (R, what its first stage adds to the later ranks' wait) pairs
/// no other beats in both, the latter ascending (so R descending).
using RankPairs = std::vector<std::vector<std::pair<double, double>>>;

RankPairs rank_pairs(const std::vector<double>& first, const std::vector<double>& first_head, const RankTable& rest,
                     int32_t L, int32_t v, const std::vector<double>* floor) {
  RankPairs out(static_cast<size_t>(L) + 1);
  for (int32_t n = v; n <= L; ++n) {
    std::vector<std::pair<double, double>> all;  // (its head contribution, R)
    for (int32_t k0 = 1; k0 <= n - (v - 1); ++k0) {
      const double f = dp_at(first, k0), h = dp_at(first_head, k0);
      const double r = v == 1 ? (n == k0 ? 0.0 : kDpInf) : dp_at(rest.g, n - k0);
      if (f < kDpInf && r < kDpInf && h < kDpInf) all.emplace_back(h, std::max(f + r, floor ? dp_at(*floor, n) : 0.0));
    }
    std::sort(all.begin(), all.end());
    auto& keep = out[static_cast<size_t>(n)];
    for (const auto& [h, r] : all)
      if (keep.empty() || r < keep.back().first) keep.emplace_back(r, h);
  }
  return out;
}

/// Whether some split keeps every rank's M R_q + (its ranks-before's first stages) within cap.
bool ranks_head_tail_fit(const std::vector<RankPairs>& pairs, int32_t L, int32_t M, double cap) {
  const size_t W = static_cast<size_t>(L) + 1;
  std::vector<double> H(W, kDpInf), G(W);
  H[0] = 0;
  for (const RankPairs& rp : pairs) {
    std::fill(G.begin(), G.end(), kDpInf);
    for (size_t l = 0; l < W; ++l) {
      if (H[l] == kDpInf) continue;
      for (size_t n = 1; l + n < W; ++n)
        for (const auto& [r, f] : rp[n])
          if (M * r + H[l] <= cap) {
            G[l + n] = std::min(G[l + n], H[l] + f);
            break;  // the later pairs have dearer first stages
          }
    }
    std::swap(H, G);
  }
  return H[W - 1] < kDpInf;
}

}  // namespace

double split_ranks_head_tail_bound(const StageCostTable& c, int32_t L, int32_t P, int32_t v, int32_t M,
                                   bool v_shape, const RankFloors* rank_floor) {
  return split_ranks_head_bound(c, c, L, P, v, M, v_shape, rank_floor);
}

double split_ranks_head_bound(const StageCostTable& c, const StageCostTable& head, int32_t L, int32_t P, int32_t v,
                              int32_t M, bool v_shape, const RankFloors* rank_floor) {
  const int32_t S = P * v;
  if (P < 1 || v < 1 || L < S || (v_shape && v != 2)) return kDpInf;
  std::vector<RankPairs> pairs;
  for (int32_t q = 0; q < P; ++q) {
    std::vector<const std::vector<double>*> rest;
    for (int32_t j = 1; j < v; ++j) rest.push_back(&stage_table(c, rank_stage(P, v_shape, q, j), S));
    pairs.push_back(rank_pairs(stage_table(c, q, S), stage_table(head, q, S), rank_table(rest, L), L, v,
                               rank_floor ? &rank_floor->at(static_cast<size_t>(q)) : nullptr));
  }
  if (!ranks_head_tail_fit(pairs, L, M, kDpInf)) return kDpInf;
  double hi = 1;
  while (!ranks_head_tail_fit(pairs, L, M, hi)) hi *= 2;
  double lo = 0;  // never feasible below the optimum, so lo stays a lower bound
  while (hi - lo > 1e-9 * hi) {
    const double mid = (lo + hi) / 2;
    (ranks_head_tail_fit(pairs, L, M, mid) ? hi : lo) = mid;
  }
  return lo;
}

StageSplit best_split_latency(const StageCostTable& c, int32_t L, int32_t S, int32_t M) {
  StageSplit r;
  r.value = kDpInf;
  if (S < 1 || L < S) return r;
  // Candidate maxima: every finite cost a stage of this split could have.
  std::vector<double> caps;
  for (int32_t s = 0; s < S; ++s)
    for (int32_t k = 1; k <= L - S + 1; ++k)
      if (const double x = c.cost(s, S, k); x < kDpInf) caps.push_back(x);
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  for (double cap : caps) {
    if ((M - 1) * cap >= r.value) break;
    std::vector<int32_t> layers;
    const double sum = capped_min_sum(c, L, S, cap, &layers);
    if (sum == kDpInf) continue;
    const std::vector<double> costs = split_costs(c, layers);
    const double v = sum + (M - 1) * *std::max_element(costs.begin(), costs.end());
    if (v < r.value) {
      r.value = v;
      r.layers = std::move(layers);
    }
  }
  return r;
}

}  // namespace autoshard

#include "planner/pipeline_dp.h"

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

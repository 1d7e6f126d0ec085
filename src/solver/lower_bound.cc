#include "solver/lower_bound.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "solver/subgradient.h"
#include "solver/trws.h"

namespace autoshard {
namespace {

/// unary[g][s], edges (a, b, row-major matrix); shared by both overloads.
template <class UnaryOf, class EdgeList, class Ends, class Matrix>
Cost split_bound(size_t n, UnaryOf unary, const EdgeList& edges, Ends ends, Matrix matrix) {
  std::vector<int32_t> deg(n, 0);
  for (const auto& e : edges) {
    auto [a, b] = ends(e);
    ++deg[static_cast<size_t>(a)];
    ++deg[static_cast<size_t>(b)];
  }
  Cost lb = 0;
  for (size_t g = 0; g < n; ++g)
    if (deg[g] == 0) {
      const auto& u = unary(g);
      lb += *std::min_element(u.begin(), u.end());
    }
  for (const auto& e : edges) {
    auto [a, b] = ends(e);
    const auto& ua = unary(static_cast<size_t>(a));
    const auto& ub = unary(static_cast<size_t>(b));
    double da = deg[static_cast<size_t>(a)], db = deg[static_cast<size_t>(b)];
    const auto& m = matrix(e);
    Cost best = kInfCost;
    for (size_t i = 0; i < ua.size(); ++i) {
      double base = ua[i] / da;
      for (size_t j = 0; j < ub.size(); ++j) best = std::min(best, base + ub[j] / db + m[i * ub.size() + j]);
    }
    lb += best;
  }
  return lb;
}

}  // namespace

Cost edge_split_lower_bound(const GroupModel& m) {
  if (m.infeasible) return kInfCost;
  return m.offset + split_bound(
                        m.unary.size(), [&](size_t g) -> const std::vector<Cost>& { return m.unary[g]; },
                        m.edges, [](const GroupModel::Edge& e) { return std::pair{e.a, e.b}; },
                        [](const GroupModel::Edge& e) -> const std::vector<Cost>& { return e.m; });
}

Cost edge_split_lower_bound(const Problem& p) {
  return split_bound(
      p.nodes.size(), [&](size_t g) -> const std::vector<Cost>& { return p.nodes[g].costs; }, p.edges,
      [](const ProblemEdge& e) { return std::pair{e.u, e.v}; },
      [](const ProblemEdge& e) -> const std::vector<Cost>& { return e.costs; });
}

Cost lagrangian_memory_bound(const GroupModel& m, Cost upper_bound, double time_s) {
  using Clock = std::chrono::steady_clock;
  if (m.infeasible) return kInfCost;
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(time_s));
  const int32_t ng = m.num_groups(), nseg = m.num_segments();
  const bool memory = m.limit >= 0 && nseg > 0;
  Trws trws(m);
  std::vector<double> lam(static_cast<size_t>(nseg), 0.0), prefix(static_cast<size_t>(nseg) + 1, 0.0);
  std::vector<std::vector<double>> pen(static_cast<size_t>(ng));
  for (int32_t g = 0; g < ng; ++g) pen[static_cast<size_t>(g)].assign(m.unary[static_cast<size_t>(g)].size(), 0.0);
  Subgradient sg(/*patience=*/4, /*shrink=*/0.6);
  std::vector<double> usage(static_cast<size_t>(nseg) + 1);
  for (int step = 0; Clock::now() < until; ++step) {
    double constant = 0;
    for (int32_t t = 0; t < nseg; ++t) {
      prefix[static_cast<size_t>(t) + 1] = prefix[static_cast<size_t>(t)] + lam[static_cast<size_t>(t)];
      if (lam[static_cast<size_t>(t)] > 0)
        constant += lam[static_cast<size_t>(t)] * static_cast<double>(m.base[static_cast<size_t>(t)] - m.limit);
    }
    for (int32_t g = 0; g < ng; ++g) {
      auto& pg = pen[static_cast<size_t>(g)];
      std::fill(pg.begin(), pg.end(), 0.0);
      for (const auto& pc : m.pieces[static_cast<size_t>(g)]) {
        double price = prefix[static_cast<size_t>(pc.seg_hi)] - prefix[static_cast<size_t>(pc.seg_lo)];
        if (price > 0)
          for (size_t s = 0; s < pg.size(); ++s) pg[s] += price * static_cast<double>(pc.du[s]);
      }
    }
    trws.iterate(step == 0 ? 20 : 5, &pen);
    const Cost lb = trws.lower_bound(&pen) + constant + m.offset;
    sg.record(lb);
    if (!memory || sg.best() >= upper_bound) break;
    // Subgradient: usage profile of the labeling minus the limit.
    std::fill(usage.begin(), usage.end(), 0.0);
    const auto& x = trws.labeling();
    for (int32_t g = 0; g < ng; ++g)
      for (const auto& pc : m.pieces[static_cast<size_t>(g)]) {
        double d = static_cast<double>(pc.du[static_cast<size_t>(x[static_cast<size_t>(g)])]);
        usage[static_cast<size_t>(pc.seg_lo)] += d;
        usage[static_cast<size_t>(pc.seg_hi)] -= d;
      }
    double run = 0;
    std::vector<double> grad(static_cast<size_t>(nseg), 0.0);
    for (int32_t t = 0; t < nseg; ++t) {
      run += usage[static_cast<size_t>(t)];
      if (m.can_bind(t))  // segments that can never overflow keep price 0
        grad[static_cast<size_t>(t)] = static_cast<double>(m.base[static_cast<size_t>(t)]) + run - static_cast<double>(m.limit);
    }
    Subgradient::project(lam, grad);
    // No direction once the labeling fits: the bound is as good as it gets here.
    if (!sg.step(lam, grad, lb + std::max(upper_bound - lb, 1e-9 * std::abs(upper_bound)), lb)) break;
  }
  return sg.best();
}

}  // namespace autoshard

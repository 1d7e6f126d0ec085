#include "solver/lower_bound.h"

#include <algorithm>

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

}  // namespace autoshard

#include "solver/lagrangian.h"

#include <algorithm>
#include <cmath>

#include "solver/greedy.h"
#include "solver/row_prices.h"

namespace autoshard {

LagrangianResult lagrangian_memory(const Problem& p, const std::vector<MemoryRow>& rows,
                                   std::chrono::steady_clock::time_point deadline,
                                   int max_iterations) {
  LagrangianResult res;
  const double limit = static_cast<double>(p.usage_limit);
  RowPrices prices(p, rows);
  std::vector<double>& lambda = prices.prices();
  Problem priced = p;
  EliminationOptions eo;
  eo.deadline = deadline;

  // Elimination until it first fails; if that is the first priced problem, the heuristic from
  // then on (a later failure means the deadline: stop).
  bool heuristic = false;
  auto solve_priced = [&](const std::vector<double>& lam) -> std::optional<std::vector<StrategyIdx>> {
    lambda = lam;
    prices.price_into(priced);
    if (!heuristic) {
      if (auto x = solve_by_elimination(priced, eo)) {
        res.exact = true;
        return x;
      }
      if (res.exact) return std::nullopt;
      heuristic = true;
    }
    std::vector<StrategyIdx> x = reduced_greedy(priced, deadline);
    if (x.empty()) return std::nullopt;
    return x;
  };
  auto row_loads = [&](const std::vector<StrategyIdx>& x) {
    const std::vector<int64_t> l = prices.loads(x);
    return std::vector<double>(l.begin(), l.end());
  };
  auto consider = [&](const std::vector<StrategyIdx>& x, const std::vector<double>& load) {
    for (double l : load)
      if (l > limit) return;
    Cost c = evaluate_cost(p, x);
    if (c < res.best_cost) {
      res.best_cost = c;
      res.best_feasible = x;
    }
  };

  double theta = 1.0;
  int since_improve = 0;
  double best_dual = -kInfCost;
  std::vector<double> best_lambda = lambda;
  for (int it = 0; it < max_iterations; ++it) {
    if (std::chrono::steady_clock::now() > deadline) break;
    auto x = solve_priced(lambda);
    if (!x) break;
    res.applicable = true;
    ++res.iterations;
    const std::vector<double> load = row_loads(*x);
    consider(*x, load);
    if (heuristic && !res.best_feasible.empty()) break;  // no bound to improve: a plan is enough
    // Dual value: priced optimum - sum_k lambda_k * (limit - 0) ... the offsets are in load.
    double dual = evaluate_cost(p, *x);
    double norm2 = 0;
    std::vector<double> g(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      g[k] = load[k] - limit;
      dual += lambda[k] * g[k];
      norm2 += g[k] * g[k];
    }
    if (dual > best_dual) {
      best_dual = dual;
      best_lambda = lambda;
      since_improve = 0;
    } else if (++since_improve >= 4) {
      theta /= 2;
      since_improve = 0;
    }
    if (norm2 == 0) break;
    // Target: the best feasible cost, or the dual plus 10% while none is known.
    double target = res.best_cost < kInfCost ? res.best_cost : best_dual + 0.1 * std::abs(best_dual) + 1;
    if (target <= best_dual + 1e-12 * std::max(1.0, std::abs(best_dual))) break;  // proven
    double step = theta * (target - dual) / norm2;
    bool moved = false;
    for (size_t k = 0; k < rows.size(); ++k) {
      double nl = std::max(0.0, lambda[k] + step * g[k]);
      moved = moved || nl != lambda[k];
      lambda[k] = nl;
    }
    if (!moved || theta < 1e-6) break;
  }
  res.lower_bound = res.exact ? best_dual : -kInfCost;
  // No feasible point yet: push the best prices up until one fits.
  if (res.applicable && res.best_feasible.empty()) {
    std::vector<double> lam = best_lambda;
    double floor_price = 0;
    for (double l : lam) floor_price = std::max(floor_price, l);
    if (floor_price == 0) {
      // Prices of the order cost / usage.
      double c = 0, u = 0;
      for (const ProblemNode& nd : p.nodes) {
        c += *std::max_element(nd.costs.begin(), nd.costs.end());
        u += static_cast<double>(*std::max_element(nd.usages.begin(), nd.usages.end()));
      }
      floor_price = u > 0 ? std::max(c, 1.0) / u : 1.0;
      std::fill(lam.begin(), lam.end(), floor_price * 1e-3);
    }
    for (int k = 0; k < 40 && res.best_feasible.empty(); ++k) {
      if (std::chrono::steady_clock::now() > deadline) break;
      auto x = solve_priced(lam);
      if (!x) break;
      consider(*x, row_loads(*x));
      for (double& l : lam) l = l * 2 + floor_price * 1e-3;
    }
  }
  return res;
}

}  // namespace autoshard

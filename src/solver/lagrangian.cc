#include "solver/lagrangian.h"

#include <algorithm>
#include <cmath>

#include "solver/greedy.h"
#include "solver/row_prices.h"
#include "solver/subgradient.h"

namespace autoshard {

namespace {

/// The priced problems of one run and the result they build up.
struct PricedSolver {
  const Problem& p;
  const std::vector<MemoryRow>& rows;
  std::chrono::steady_clock::time_point deadline;
  LagrangianResult& res;
  const double limit;
  RowPrices prices;
  std::vector<double>& lambda;
  Problem priced;
  EliminationOptions eo;
  /// Elimination until it first fails; if that is the first priced problem, the heuristic from
  /// then on (a later failure means the deadline: stop).
  bool heuristic = false;

  PricedSolver(const Problem& p_, const std::vector<MemoryRow>& rows_, std::chrono::steady_clock::time_point deadline_,
               LagrangianResult& res_)
      : p(p_), rows(rows_), deadline(deadline_), res(res_), limit(static_cast<double>(p_.usage_limit)),
        prices(p_, rows_), lambda(prices.prices()), priced(p_) {
    eo.deadline = deadline_;
  }

  std::optional<std::vector<StrategyIdx>> solve(const std::vector<double>& lam) {
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
  }

  std::vector<double> row_loads(const std::vector<StrategyIdx>& x) const {
    const std::vector<int64_t> l = prices.loads(x);
    return std::vector<double>(l.begin(), l.end());
  }

  /// Keeps x as the best feasible point if it fits every row and beats the one so far.
  void consider(const std::vector<StrategyIdx>& x, const std::vector<double>& load) {
    for (double l : load)
      if (l > limit) return;
    Cost c = evaluate_cost(p, x);
    if (c < res.best_cost) {
      res.best_cost = c;
      res.best_feasible = x;
    }
  }

  std::vector<double> subgradient_ascent(int max_iterations);
  void price_until_feasible(std::vector<double> lam);
};

/// Subgradient ascent on the dual; returns the prices of the best dual value.
std::vector<double> PricedSolver::subgradient_ascent(int max_iterations) {
  Subgradient sg(/*patience=*/4, /*shrink=*/0.5);
  std::vector<double> best_lambda = lambda;
  for (int it = 0; it < max_iterations; ++it) {
    if (std::chrono::steady_clock::now() > deadline) break;
    auto x = solve(lambda);
    if (!x) break;
    res.applicable = true;
    ++res.iterations;
    const std::vector<double> load = row_loads(*x);
    consider(*x, load);
    if (heuristic && !res.best_feasible.empty()) break;  // no bound to improve: a plan is enough
    // Dual value: the priced optimum minus sum_k lambda_k (limit - offset_k); the offsets are in
    // the loads.
    double dual = evaluate_cost(p, *x);
    std::vector<double> g(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      g[k] = load[k] - limit;
      dual += lambda[k] * g[k];
    }
    if (sg.record(dual)) best_lambda = lambda;
    const double best_dual = sg.best();
    // Target: the best feasible cost, or the dual plus 10% while none is known.
    const double target = res.best_cost < kInfCost ? res.best_cost : best_dual + 0.1 * std::abs(best_dual) + 1;
    if (target <= best_dual + 1e-12 * std::max(1.0, std::abs(best_dual))) break;  // proven
    if (!sg.step(lambda, g, target, dual) || sg.theta() < 1e-6) break;
  }
  res.lower_bound = res.exact ? sg.best() : -kInfCost;
  return best_lambda;
}

/// No feasible point yet: push the prices up from `lam` until one fits.
void PricedSolver::price_until_feasible(std::vector<double> lam) {
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
    auto x = solve(lam);
    if (!x) break;
    consider(*x, row_loads(*x));
    for (double& l : lam) l = l * 2 + floor_price * 1e-3;
  }
}

}  // namespace

LagrangianResult lagrangian_memory(const Problem& p, const std::vector<MemoryRow>& rows,
                                   std::chrono::steady_clock::time_point deadline,
                                   int max_iterations) {
  LagrangianResult res;
  PricedSolver s(p, rows, deadline, res);
  std::vector<double> best_lambda = s.subgradient_ascent(max_iterations);
  if (res.applicable && res.best_feasible.empty()) s.price_until_feasible(std::move(best_lambda));
  return res;
}

}  // namespace autoshard

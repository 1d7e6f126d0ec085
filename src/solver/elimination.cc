#include "solver/elimination.h"

#include <algorithm>
#include <limits>
#include <set>

namespace autoshard {

namespace {

/// A cost table over a sorted scope of variables; index = sum of digit * stride, the last
/// variable of the scope varying fastest.
struct Factor {
  std::vector<PNodeIdx> scope;
  std::vector<int64_t> stride;
  std::vector<Cost> table;
};

Factor make_factor(std::vector<PNodeIdx> scope, const std::vector<int64_t>& dom) {
  Factor f;
  f.scope = std::move(scope);
  f.stride.assign(f.scope.size(), 1);
  int64_t size = 1;
  for (size_t k = f.scope.size(); k-- > 0;) {
    f.stride[k] = size;
    size *= dom[static_cast<size_t>(f.scope[k])];
  }
  f.table.assign(static_cast<size_t>(size), 0);
  return f;
}

}  // namespace

std::optional<std::vector<StrategyIdx>> solve_by_elimination(const Problem& p,
                                                             const EliminationOptions& opt,
                                                             EliminationStats* stats) {
  EliminationStats local;
  if (!stats) stats = &local;
  const size_t n = static_cast<size_t>(p.num_nodes());
  std::vector<int64_t> dom(n);
  for (size_t v = 0; v < n; ++v) dom[v] = static_cast<int64_t>(p.nodes[v].costs.size());
  std::vector<Factor> factors;
  std::vector<std::vector<int32_t>> of_var(n);  // live factor ids per variable
  auto add = [&](Factor f) {
    int32_t id = static_cast<int32_t>(factors.size());
    for (PNodeIdx v : f.scope) of_var[static_cast<size_t>(v)].push_back(id);
    factors.push_back(std::move(f));
  };
  for (size_t v = 0; v < n; ++v) {
    Factor f = make_factor({static_cast<PNodeIdx>(v)}, dom);
    f.table = p.nodes[v].costs;
    add(std::move(f));
  }
  for (const ProblemEdge& e : p.edges) {
    if (e.u == e.v) return std::nullopt;
    bool flip = e.u > e.v;
    Factor f = make_factor(flip ? std::vector<PNodeIdx>{e.v, e.u} : std::vector<PNodeIdx>{e.u, e.v}, dom);
    const int64_t nv = dom[static_cast<size_t>(e.v)];
    for (int64_t a = 0; a < dom[static_cast<size_t>(e.u)]; ++a)
      for (int64_t b = 0; b < nv; ++b) {
        Cost c = e.costs[static_cast<size_t>(a * nv + b)];
        if (flip) f.table[static_cast<size_t>(b * f.stride[0] + a)] = c;
        else f.table[static_cast<size_t>(a * f.stride[0] + b)] = c;
      }
    add(std::move(f));
  }

  std::vector<char> gone(n, 0);
  std::vector<PNodeIdx> order;
  std::vector<std::vector<int32_t>> bucket(n);  // factors used when eliminating v
  auto neighbours = [&](size_t v) {
    std::set<PNodeIdx> s;
    for (int32_t id : of_var[v])
      for (PNodeIdx u : factors[static_cast<size_t>(id)].scope)
        if (static_cast<size_t>(u) != v) s.insert(u);
    return s;
  };
  auto table_size = [&](const std::set<PNodeIdx>& s) {
    double size = 1;
    for (PNodeIdx u : s) size *= static_cast<double>(dom[static_cast<size_t>(u)]);
    return size;
  };
  for (size_t step = 0; step < n; ++step) {
    if (std::chrono::steady_clock::now() > opt.deadline) return std::nullopt;
    // Greedy: the variable whose elimination creates the smallest table.
    size_t best = n;
    double best_size = std::numeric_limits<double>::infinity();
    for (size_t v = 0; v < n; ++v) {
      if (gone[v]) continue;
      double s = table_size(neighbours(v));
      if (s < best_size) best_size = s, best = v;
      if (s <= 1) break;
    }
    if (best == n) break;
    const double work = best_size * static_cast<double>(dom[best]);
    stats->largest_table = std::max(stats->largest_table, best_size);
    if (best_size > static_cast<double>(opt.max_table) || work > static_cast<double>(opt.max_work))
      return std::nullopt;
    const size_t v = best;
    std::set<PNodeIdx> nb = neighbours(v);
    Factor out = make_factor(std::vector<PNodeIdx>(nb.begin(), nb.end()), dom);
    bucket[v] = of_var[v];
    // For each factor of the bucket: its stride for each variable of the new scope, and v's.
    struct Use {
      const Factor* f;
      std::vector<int64_t> stride_in_out;  // per out-scope variable
      int64_t v_stride;
    };
    std::vector<Use> uses;
    for (int32_t id : bucket[v]) {
      const Factor& f = factors[static_cast<size_t>(id)];
      Use u{&f, std::vector<int64_t>(out.scope.size(), 0), 0};
      for (size_t k = 0; k < f.scope.size(); ++k) {
        if (static_cast<size_t>(f.scope[k]) == v) {
          u.v_stride = f.stride[k];
          continue;
        }
        auto it = std::lower_bound(out.scope.begin(), out.scope.end(), f.scope[k]);
        u.stride_in_out[static_cast<size_t>(it - out.scope.begin())] = f.stride[k];
      }
      uses.push_back(std::move(u));
    }
    // Odometer over the new scope, tracking each factor's base offset.
    const size_t m = out.scope.size();
    std::vector<int64_t> digit(m, 0);
    std::vector<int64_t> base(uses.size(), 0);
    const int64_t dv = dom[v];
    for (size_t idx = 0; idx < out.table.size(); ++idx) {
      Cost bestc = kInfCost;
      for (int64_t x = 0; x < dv; ++x) {
        Cost c = 0;
        for (size_t k = 0; k < uses.size(); ++k)
          c += uses[k].f->table[static_cast<size_t>(base[k] + x * uses[k].v_stride)];
        bestc = std::min(bestc, c);
      }
      out.table[idx] = bestc;
      // Advance the odometer (last variable fastest).
      for (size_t k = m; k-- > 0;) {
        const size_t var = static_cast<size_t>(out.scope[k]);
        ++digit[k];
        for (size_t f = 0; f < uses.size(); ++f) base[f] += uses[f].stride_in_out[k];
        if (digit[k] < dom[var]) break;
        for (size_t f = 0; f < uses.size(); ++f) base[f] -= uses[f].stride_in_out[k] * dom[var];
        digit[k] = 0;
      }
    }
    // Retire the bucket's factors from their other variables.
    for (int32_t id : bucket[v])
      for (PNodeIdx u : factors[static_cast<size_t>(id)].scope) {
        auto& list = of_var[static_cast<size_t>(u)];
        list.erase(std::remove(list.begin(), list.end(), id), list.end());
      }
    gone[v] = 1;
    ++stats->eliminated;
    order.push_back(static_cast<PNodeIdx>(v));
    if (!out.scope.empty()) add(std::move(out));
  }

  // Back-substitution in reverse elimination order.
  std::vector<StrategyIdx> choice(n, 0);
  for (size_t k = order.size(); k-- > 0;) {
    const size_t v = static_cast<size_t>(order[k]);
    Cost bestc = kInfCost;
    StrategyIdx bestx = 0;
    for (int64_t x = 0; x < dom[v]; ++x) {
      Cost c = 0;
      for (int32_t id : bucket[v]) {
        const Factor& f = factors[static_cast<size_t>(id)];
        int64_t off = 0;
        for (size_t j = 0; j < f.scope.size(); ++j) {
          const size_t u = static_cast<size_t>(f.scope[j]);
          off += f.stride[j] * (u == v ? x : choice[u]);
        }
        c += f.table[static_cast<size_t>(off)];
      }
      if (c < bestc) bestc = c, bestx = static_cast<StrategyIdx>(x);
    }
    choice[v] = bestx;
  }
  return choice;
}

}  // namespace autoshard

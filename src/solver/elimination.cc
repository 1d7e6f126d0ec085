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

Factor make_factor(std::vector<PNodeIdx> scope, const std::vector<int64_t>& dom,
                   bool allocate = true) {
  Factor f;
  f.scope = std::move(scope);
  f.stride.assign(f.scope.size(), 1);
  int64_t size = 1;
  for (size_t k = f.scope.size(); k-- > 0;) {
    f.stride[k] = size;
    size *= dom[static_cast<size_t>(f.scope[k])];
  }
  if (allocate) f.table.assign(static_cast<size_t>(size), 0);
  return f;
}

}  // namespace

namespace {

enum class Outcome { kSolved, kTooLarge, kDeadline };

/// One elimination run.  `symbolic`: only sizes are computed (no tables), with the domains in
/// `dom_in`; on kTooLarge, `fail_scope` receives the variables of the refused table.
Outcome eliminate(const Problem& p, const EliminationOptions& opt, EliminationStats* stats,
                  bool symbolic, const std::vector<int64_t>& dom_in,
                  std::vector<PNodeIdx>* fail_scope, std::vector<StrategyIdx>* result) {
  const size_t n = static_cast<size_t>(p.num_nodes());
  const std::vector<int64_t>& dom = dom_in;
  std::vector<Factor> factors;
  std::vector<std::vector<int32_t>> of_var(n);  // live factor ids per variable
  auto add = [&](Factor f) {
    int32_t id = static_cast<int32_t>(factors.size());
    for (PNodeIdx v : f.scope) of_var[static_cast<size_t>(v)].push_back(id);
    factors.push_back(std::move(f));
  };
  for (size_t v = 0; v < n; ++v) {
    Factor f = make_factor({static_cast<PNodeIdx>(v)}, dom, false);
    if (!symbolic) f.table = p.nodes[v].costs;
    add(std::move(f));
  }
  for (const ProblemEdge& e : p.edges) {
    if (e.u == e.v) return Outcome::kTooLarge;
    bool flip = e.u > e.v;
    Factor f = make_factor(flip ? std::vector<PNodeIdx>{e.v, e.u} : std::vector<PNodeIdx>{e.u, e.v},
                           dom, !symbolic);
    if (symbolic) {
      add(std::move(f));
      continue;
    }
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
  // The table each variable's elimination would create, kept up to date: eliminating v changes
  // the neighbourhoods of v's neighbours only (recomputing every variable's at every step made
  // the ordering quadratic in set builds, most of the elimination's time on llama3-70b stages).
  std::vector<double> size_if_eliminated(n);
  for (size_t v = 0; v < n; ++v) size_if_eliminated[v] = table_size(neighbours(v));
  // Retires v's bucket from its other variables and adds the new factor over v's neighbours.
  auto retire = [&](size_t v, Factor out) {
    for (int32_t id : bucket[v])
      for (PNodeIdx u : factors[static_cast<size_t>(id)].scope) {
        auto& list = of_var[static_cast<size_t>(u)];
        list.erase(std::remove(list.begin(), list.end(), id), list.end());
      }
    gone[v] = 1;
    ++stats->eliminated;
    order.push_back(static_cast<PNodeIdx>(v));
    std::vector<PNodeIdx> touched = out.scope;
    if (!out.scope.empty()) add(std::move(out));
    for (PNodeIdx u : touched) size_if_eliminated[static_cast<size_t>(u)] = table_size(neighbours(static_cast<size_t>(u)));
  };
  for (size_t step = 0; step < n; ++step) {
    if (std::chrono::steady_clock::now() > opt.deadline) return Outcome::kDeadline;
    // Greedy: the variable whose elimination creates the smallest table.
    size_t best = n;
    double best_size = std::numeric_limits<double>::infinity();
    for (size_t v = 0; v < n; ++v) {
      if (gone[v]) continue;
      const double s = size_if_eliminated[v];
      if (s < best_size) best_size = s, best = v;
      if (s <= 1) break;
    }
    if (best == n) break;
    const double work = best_size * static_cast<double>(dom[best]);
    stats->largest_table = std::max(stats->largest_table, best_size);
    stats->work += work * static_cast<double>(of_var[best].size());
    if (best_size > static_cast<double>(opt.max_table) || work > static_cast<double>(opt.max_work)) {
      if (fail_scope) {
        std::set<PNodeIdx> nb = neighbours(best);
        fail_scope->assign(nb.begin(), nb.end());
        fail_scope->push_back(static_cast<PNodeIdx>(best));
      }
      return Outcome::kTooLarge;
    }
    const size_t v = best;
    std::set<PNodeIdx> nb = neighbours(v);
    Factor out = make_factor(std::vector<PNodeIdx>(nb.begin(), nb.end()), dom, !symbolic);
    bucket[v] = of_var[v];
    if (symbolic) {
      retire(v, std::move(out));
      continue;
    }
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
    retire(v, std::move(out));
  }

  if (symbolic) return Outcome::kSolved;
  // Back-substitution in reverse elimination order.
  std::vector<StrategyIdx>& choice = *result;
  choice.assign(n, 0);
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
  return Outcome::kSolved;
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
  std::vector<StrategyIdx> choice;
  std::vector<PNodeIdx> scope;
  // A symbolic pass first: failing is then cheap.
  EliminationStats plan;
  Outcome o = eliminate(p, opt, &plan, true, dom, &scope, nullptr);
  if (o == Outcome::kDeadline) return std::nullopt;
  stats->largest_table = plan.largest_table;
  if (o == Outcome::kSolved && plan.work <= static_cast<double>(opt.max_work)) {
    o = eliminate(p, opt, stats, false, dom, nullptr, &choice);
    if (o == Outcome::kSolved) return choice;
    return std::nullopt;
  }
  // Cutset conditioning: fix a few variables of the dense core (each of their values in turn)
  // until the rest eliminates within the limits; the best over all values is the optimum.
  std::vector<PNodeIdx> cut;
  std::vector<int64_t> cdom = dom;
  double combos = 1;
  for (;;) {
    PNodeIdx pick = -1;
    for (PNodeIdx v : scope)
      if (cdom[static_cast<size_t>(v)] > 1 &&
          (pick < 0 || cdom[static_cast<size_t>(v)] > cdom[static_cast<size_t>(pick)]))
        pick = v;
    if (pick < 0) return std::nullopt;
    combos *= static_cast<double>(cdom[static_cast<size_t>(pick)]);
    if (combos > static_cast<double>(opt.max_cut_combinations) || cut.size() >= 4) return std::nullopt;
    cut.push_back(pick);
    cdom[static_cast<size_t>(pick)] = 1;
    EliminationStats sym;
    scope.clear();
    o = eliminate(p, opt, &sym, true, cdom, &scope, nullptr);
    if (o == Outcome::kDeadline) return std::nullopt;
    if (o == Outcome::kSolved) {
      // Worth it only if all combinations together stay cheap.
      if (combos * sym.work > static_cast<double>(opt.max_work)) return std::nullopt;
      break;
    }
  }
  stats->cut = static_cast<int32_t>(cut.size());
  // Enumerate the cut's values.
  Problem q = p;
  std::vector<StrategyIdx> value(cut.size(), 0);
  std::vector<StrategyIdx> best;
  Cost best_cost = kInfCost;
  std::vector<char> in_cut(n, 0);
  for (PNodeIdx c : cut) in_cut[static_cast<size_t>(c)] = 1;
  for (;;) {
    // Restrict the cut nodes to their current values.
    for (size_t k = 0; k < cut.size(); ++k) {
      const size_t c = static_cast<size_t>(cut[k]);
      const size_t x = static_cast<size_t>(value[k]);
      q.nodes[c].costs.assign(1, p.nodes[c].costs[x]);
      q.nodes[c].usages.assign(1, p.nodes[c].usages[x]);
    }
    for (size_t k = 0; k < p.edges.size(); ++k) {
      const ProblemEdge& e = p.edges[k];
      const size_t u = static_cast<size_t>(e.u), v = static_cast<size_t>(e.v);
      if (!in_cut[u] && !in_cut[v]) continue;
      const size_t nu = p.nodes[u].costs.size(), nv = p.nodes[v].costs.size();
      auto val = [&](size_t node) {
        for (size_t j = 0; j < cut.size(); ++j)
          if (static_cast<size_t>(cut[j]) == node) return static_cast<size_t>(value[j]);
        return size_t{0};
      };
      std::vector<Cost>& dst = q.edges[k].costs;
      dst.clear();
      for (size_t a = 0; a < nu; ++a) {
        if (in_cut[u] && a != val(u)) continue;
        for (size_t b = 0; b < nv; ++b) {
          if (in_cut[v] && b != val(v)) continue;
          dst.push_back(e.costs[a * nv + b]);
        }
      }
    }
    std::vector<StrategyIdx> sub;
    o = eliminate(q, opt, stats, false, cdom, nullptr, &sub);
    if (o == Outcome::kDeadline) return std::nullopt;
    if (o == Outcome::kSolved) {
      for (size_t k = 0; k < cut.size(); ++k) sub[static_cast<size_t>(cut[k])] = value[k];
      Cost c = evaluate_cost(p, sub);
      if (c < best_cost || best.empty()) best_cost = c, best = sub;
    }
    size_t k = 0;
    while (k < cut.size() && ++value[k] == static_cast<StrategyIdx>(dom[static_cast<size_t>(cut[k])]))
      value[k++] = 0;
    if (k == cut.size()) break;
  }
  if (best.empty()) return std::nullopt;
  return best;
}

}  // namespace autoshard

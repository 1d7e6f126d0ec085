#include "solver/reducer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <limits>
#include <unordered_map>

#include "solver/min_plus.h"
#include "solver/reducer_graph.h"

namespace autoshard::reduce_detail {
namespace {

/// Most multiply-adds one degree-2 elimination may do (~50 ms), and the most entries its new
/// edge (and record) may have: on 4-D meshes nodes have thousands of strategies and one product
/// would take seconds; such nodes stay for the search.
constexpr int64_t kDeg2MaxWork = 50'000'000;
constexpr int64_t kDeg2MaxTable = 4'000'000;
/// Rounds of "run the work list, then drop pieces that can no longer bind".
constexpr int kMaxRounds = 50;

/// The rules (reduce.h) run over a work list of nodes until nothing changes.
class Rules : public WorkGraph {
 public:
  Rules(const Problem& p, const ReduceOptions& opt, bool single_interval, Reduced& out)
      : WorkGraph(p, opt, out), single_interval_(single_interval) {}

  void run() {
    init();
    drop_safe_pieces();  // memory-free nodes are known before the first rule
    remove_overflowing();
    for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) enqueue(v);
    for (int round = 0; round < kMaxRounds && !r_.infeasible; ++round) {
      ++r_.rounds;
      while (!queue_.empty() && !r_.infeasible) {
        if ((++steps_ & 63) == 0 && std::chrono::steady_clock::now() > opt_.deadline) break;
        const PNodeIdx v = queue_.front();
        queue_.pop_front();
        node(v).queued = false;
        process(v);
      }
      if (r_.infeasible || !queue_.empty()) break;  // done, or out of time
      // The base only grows as rules fire: more pieces become safe, more strategies overflow.
      const bool dropped = drop_safe_pieces();
      if (!remove_overflowing() && !dropped) break;
    }
    compute_binding();
    r_.base.assign(r_.binding.size(), 0);
    int64_t acc = 0;
    for (size_t s = 0; s < r_.base.size(); ++s) r_.base[s] = acc += base_diff_[s];
  }

 private:
  // ---- rules ----------------------------------------------------------------------------
  void process(PNodeIdx v) {
    WNode& n = node(v);
    if (!n.alive) return;
    if (!remove_forbidden(v)) return;
    if (n.k() == 1) {
      fold_single(v);
      return;
    }
    if (opt_.decompose) {
      const std::vector<int32_t> adj = n.adj;
      for (int32_t id : adj) try_decompose(id);
    }
    if (opt_.dominance && remove_dominated(v)) return;  // v is re-queued
    if (opt_.eliminate && eliminate(v)) return;
    if (opt_.merge) merge(v);
  }

  /// Returns false when v became empty (infeasible) or changed (re-queued).
  bool remove_forbidden(PNodeIdx v) {
    WNode& n = node(v);
    const int32_t k = n.k();
    std::vector<char> keep(sz(k), 1);
    bool any = false;
    for (int32_t q = 0; q < k; ++q)
      if (!(n.cost[sz(q)] < kInfCost)) keep[sz(q)] = 0, any = true;
    for (int32_t id : n.adj) {
      const WEdge& e = edge(id);
      const int32_t ko = node(other(e, v)).k();
      for (int32_t q = 0; q < k; ++q) {
        if (!keep[sz(q)]) continue;
        bool all_inf = true;
        for (int32_t o = 0; o < ko && all_inf; ++o) all_inf = !(ev(e, v, q, o) < kInfCost);
        if (all_inf) keep[sz(q)] = 0, any = true;
      }
    }
    if (!any) return true;
    if (std::none_of(keep.begin(), keep.end(), [](char c) { return c != 0; })) {
      r_.infeasible = true;
      return false;
    }
    remove_strategies(v, keep);
    return false;
  }

  /// A single strategy has no spread: its pieces are already all in the base.
  void fold_single(PNodeIdx v) {
    WNode& n = node(v);
    for (int32_t id : n.adj) {
      const WEdge& e = edge(id);
      WNode& on = node(other(e, v));
      for (int32_t o = 0; o < on.k(); ++o) on.cost[sz(o)] += ev(e, v, 0, o);
    }
    r_.constant_cost += n.cost[0];
    Elimination el = start_elimination(v, {});
    el.table = {n.orig[0]};
    r_.eliminated.push_back(std::move(el));
    kill(v);
  }

  void try_decompose(int32_t id) {
    WEdge& e = edge(id);
    if (!e.alive) return;
    WNode& na = node(e.a);
    WNode& nb = node(e.b);
    const size_t ka = sz(na.k()), kb = sz(nb.k());
    double scale = 0;
    for (Cost c : e.m) {
      if (!(std::fabs(c) < kInfCost)) return;
      scale = std::max(scale, std::fabs(c));
    }
    const double tol = 1e-12 * scale;
    // e(p,q) = a(p) + b(q) with a(p) = e(p,0), b(q) = e(0,q) - e(0,0).
    for (size_t p = 1; p < ka; ++p)
      for (size_t q = 1; q < kb; ++q)
        if (std::fabs(e.m[p * kb + q] - (e.m[p * kb] + e.m[q] - e.m[0])) > tol) return;
    for (size_t p = 0; p < ka; ++p) na.cost[p] += e.m[p * kb];
    for (size_t q = 0; q < kb; ++q) nb.cost[q] += e.m[q] - e.m[0];
    remove_edge(id);
  }

  bool remove_dominated(PNodeIdx v);
  bool eliminate(PNodeIdx v);
  bool merge(PNodeIdx v);
  void merge_into(PNodeIdx g, PNodeIdx h, const std::vector<int32_t>& f);

  const bool single_interval_;
  int64_t steps_ = 0;  ///< work-list steps, for the deadline check
};

/// Removes dominated and duplicate strategies; returns true if any was removed.
bool Rules::remove_dominated(PNodeIdx v) {
  WNode& n = node(v);
  const int32_t k = n.k();
  std::vector<char> keep(sz(k), 1);
  bool any = false;
  // v's row of each incident edge, contiguous (an edge stored with v as its second end would be
  // read down a column, which is most of the time on big strategy counts).
  std::vector<std::vector<Cost>> transposed(n.adj.size());
  std::vector<const Cost*> rows(n.adj.size());
  std::vector<int32_t> width(n.adj.size());
  for (size_t i = 0; i < n.adj.size(); ++i) {
    const WEdge& e = edge(n.adj[i]);
    const int32_t ko = node(other(e, v)).k();
    width[i] = ko;
    if (e.a == v) {  // already row-major by v's strategy: read e.m in place
      rows[i] = e.m.data();
      continue;
    }
    transposed[i].resize(sz(k) * sz(ko));
    for (int32_t q = 0; q < k; ++q)
      for (int32_t o = 0; o < ko; ++o) transposed[i][sz(q) * sz(ko) + sz(o)] = ev(e, v, q, o);
    rows[i] = transposed[i].data();
  }
  auto row_of = [&](size_t i, int32_t q) { return rows[i] + sz(q) * sz(width[i]); };
  // Sum of each strategy's rows: a can only dominate b if its sum is no larger (a cheap test
  // that settles most pairs).
  std::vector<Cost> total(sz(k), 0);
  for (size_t i = 0; i < n.adj.size(); ++i)
    for (int32_t q = 0; q < k; ++q) {
      const Cost* rq = row_of(i, q);
      for (int32_t o = 0; o < width[i]; ++o) total[sz(q)] += rq[o];
    }
  auto dominates = [&](int32_t a, int32_t b) {  // a dominates b (all <=)
    if (n.cost[sz(a)] > n.cost[sz(b)] || total[sz(a)] > total[sz(b)]) return false;
    for (const WPiece& pc : n.pieces)
      if (pc.u[sz(a)] > pc.u[sz(b)]) return false;
    for (size_t i = 0; i < n.adj.size(); ++i)
      if (!all_at_most(row_of(i, a), row_of(i, b), width[i])) return false;
    return true;
  };
  for (int32_t b = 0; b < k; ++b) {
    for (int32_t a = 0; a < k; ++a) {
      if (a == b || !keep[sz(a)] || !dominates(a, b)) continue;
      if (a > b && dominates(b, a)) continue;  // equal strategies: keep the lower index
      keep[sz(b)] = 0;
      any = true;
      break;
    }
  }
  if (any) remove_strategies(v, keep);
  return any;
}

/// Eliminates v (degree 0, 1 or 2).  Among equal-cost responses the one using least memory is
/// taken; a node with pieces is eliminated only if every response uses none of them.
bool Rules::eliminate(PNodeIdx v) {
  WNode& n = node(v);
  const int32_t k = n.k();
  const bool free = n.pieces.empty();
  std::vector<int64_t> spread(sz(k), 0);  // usage above the minima; 0 in every piece iff 0
  for (const WPiece& pc : n.pieces)
    for (int32_t q = 0; q < k; ++q) spread[sz(q)] += pc.u[sz(q)];
  auto ok = [&](int32_t q) { return free || spread[sz(q)] == 0; };
  auto better = [&](Cost c, int32_t q, Cost best, int32_t bq) {
    return c < best || (c == best && bq >= 0 && spread[sz(q)] < spread[sz(bq)]);
  };
  if (n.adj.empty()) {
    int32_t best = 0;
    for (int32_t q = 1; q < k; ++q)
      if (better(n.cost[sz(q)], q, n.cost[sz(best)], best)) best = q;
    if (!ok(best)) return false;
    r_.constant_cost += n.cost[sz(best)];
    Elimination el = start_elimination(v, {});
    el.table = {n.orig[sz(best)]};
    r_.eliminated.push_back(std::move(el));
    kill(v);
    return true;
  }
  if (n.adj.size() == 1) {
    const WEdge& e = edge(n.adj[0]);
    const PNodeIdx u = other(e, v);
    WNode& un = node(u);
    std::vector<Cost> add(sz(un.k()), kInfCost);
    std::vector<int32_t> arg(sz(un.k()), -1);
    for (int32_t p = 0; p < un.k(); ++p) {
      for (int32_t q = 0; q < k; ++q) {
        const Cost c = n.cost[sz(q)] + ev(e, v, q, p);
        if (c < kInfCost && better(c, q, add[sz(p)], arg[sz(p)])) add[sz(p)] = c, arg[sz(p)] = q;
      }
      if (arg[sz(p)] >= 0 && !ok(arg[sz(p)])) return false;
    }
    Elimination el = start_elimination(v, {u});
    el.table.resize(sz(un.k()));
    for (int32_t p = 0; p < un.k(); ++p) {
      un.cost[sz(p)] += add[sz(p)];
      el.table[sz(p)] = n.orig[sz(std::max(arg[sz(p)], 0))];
    }
    r_.eliminated.push_back(std::move(el));
    kill(v);
    return true;
  }
  if (n.adj.size() != 2) return false;
  const WEdge& e1 = edge(n.adj[0]);
  const WEdge& e2 = edge(n.adj[1]);
  const PNodeIdx u = other(e1, v), w = other(e2, v);
  const int64_t ku = node(u).k(), kw = node(w).k();
  const bool grows = ku * kw > ku * k + k * kw;
  if (single_interval_ && grows && !edge_index_.count(edge_key(u, w)) &&
      ku * kw - (ku * k + k * kw) > opt_.chain_growth_slack)
    return false;
  if (ku * k * kw > kDeg2MaxWork || ku * kw > kDeg2MaxTable) return false;
  // v's strategies in order of (spread, index): the first to reach a minimum is the one
  // `better` prefers; the product vectorises.
  std::vector<int32_t> order(sz(k));
  for (int32_t q = 0; q < k; ++q) order[sz(q)] = q;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return spread[sz(a)] < spread[sz(b)]; });
  MinPlusProduct mp = min_plus_product(
      static_cast<int32_t>(ku), static_cast<int32_t>(kw), order,
      [&](int32_t q, int32_t p) { return ev(e1, v, q, p) + n.cost[sz(q)]; },
      [&](int32_t q, int32_t o) { return ev(e2, v, q, o); });
  for (int32_t a : mp.arg)
    if (a >= 0 && !ok(a)) return false;
  Elimination el = start_elimination(v, {u, w});
  el.table.resize(mp.arg.size());
  for (size_t i = 0; i < mp.arg.size(); ++i) el.table[i] = n.orig[sz(std::max(mp.arg[i], 0))];
  r_.eliminated.push_back(std::move(el));
  kill(v);
  add_edge(u, w, mp.m);
  return true;
}

/// Merges v into a neighbour h when each strategy of h leaves v exactly one finite choice (or
/// h into v, when that is a bijection and h is the lighter one).  Returns true if merged.
bool Rules::merge(PNodeIdx v) {
  WNode& n = node(v);
  auto allowed = [&](const WNode& from, const WNode& into) {
    if (!single_interval_ || from.pieces.empty()) return true;
    if (from.pieces.size() > 1) return false;
    if (into.pieces.empty()) return true;
    return into.pieces.size() == 1 && into.pieces[0].lo == from.pieces[0].lo &&
           into.pieces[0].hi == from.pieces[0].hi;
  };
  std::vector<int32_t> f;
  for (int32_t id : n.adj) {
    const WEdge& e = edge(id);
    const PNodeIdx h = other(e, v);
    WNode& hn = node(h);
    // f[t]: v's only finite choice when h takes t.
    f.assign(sz(hn.k()), -1);
    bool function = true;
    for (int32_t t = 0; t < hn.k() && function; ++t) {
      for (int32_t s = 0; s < n.k() && function; ++s) {
        if (!(ev(e, v, s, t) < kInfCost)) continue;
        function = f[sz(t)] < 0;
        f[sz(t)] = s;
      }
      function = function && f[sz(t)] >= 0;
    }
    if (!function) continue;
    // A bijection can go either way: move the lighter node's pieces and edges.
    std::vector<int32_t> inv(sz(n.k()), -1);
    bool bijection = n.k() == hn.k();
    for (int32_t t = 0; t < hn.k() && bijection; ++t) {
      bijection = inv[sz(f[sz(t)])] < 0;
      inv[sz(f[sz(t)])] = t;
    }
    auto weight = [](const WNode& x) { return x.pieces.size() + x.adj.size(); };
    if (bijection && weight(n) > weight(hn) && allowed(hn, n)) {
      merge_into(h, v, inv);
      return true;
    }
    if (allowed(n, hn)) {
      merge_into(v, h, f);
      return true;
    }
  }
  return false;
}

/// Moves g (whose strategy is f[h's strategy]) into h: cost, pieces and edges.
void Rules::merge_into(PNodeIdx g, PNodeIdx h, const std::vector<int32_t>& f) {
  WNode& w = node(g);
  WNode& hn = node(h);
  const int32_t link = edge_index_.at(edge_key(g, h));
  Elimination el = start_elimination(g, {h});
  el.table.resize(sz(hn.k()));
  for (int32_t t = 0; t < hn.k(); ++t) {
    const int32_t s = f[sz(t)];
    hn.cost[sz(t)] += w.cost[sz(s)] + ev(edge(link), g, s, t);
    el.table[sz(t)] = w.orig[sz(s)];
  }
  remove_edge(link);
  for (const WPiece& pc : w.pieces) {
    WPiece mapped{pc.lo, pc.hi, std::vector<int64_t>(sz(hn.k()))};
    for (int32_t t = 0; t < hn.k(); ++t) mapped.u[sz(t)] = pc.u[sz(f[sz(t)])];
    add_piece(hn, std::move(mapped));
  }
  w.pieces.clear();
  while (!w.adj.empty()) {
    const int32_t id = w.adj.back();
    const PNodeIdx o = other(edge(id), g);
    const int32_t ko = node(o).k();
    std::vector<Cost> m(sz(hn.k()) * sz(ko));
    for (int32_t t = 0; t < hn.k(); ++t)
      for (int32_t q = 0; q < ko; ++q) m[sz(t) * sz(ko) + sz(q)] = ev(edge(id), g, f[sz(t)], q);
    remove_edge(id);
    add_edge(h, o, m);
  }
  r_.eliminated.push_back(std::move(el));
  w.alive = false;
  enqueue(h);
}

}  // namespace

Reduced run_reductions(const Problem& p, const ReduceOptions& opt, bool single_interval) {
  Reduced out;
  Rules(p, opt, single_interval, out).run();
  return out;
}

}  // namespace autoshard::reduce_detail

#include "solver/reduce.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <deque>
#include <unordered_map>

#include "solver/min_plus.h"

namespace autoshard {

namespace {
namespace reduce_impl {

/// Most multiply-adds one degree-2 elimination may do (~50 ms).
constexpr int64_t kDeg2MaxWork = 50'000'000;

struct WNode {
  bool alive = true;
  bool queued = false;
  bool mem_free = false;
  std::vector<StrategyIdx> orig;  // original strategy of each current strategy
  std::vector<Cost> cost;
  std::vector<int64_t> usage;
  int64_t start = 0, end = 0;
  std::vector<int32_t> adj;  // live incident edges (never two to the same neighbour)

  int32_t k() const { return static_cast<int32_t>(cost.size()); }
  int64_t max_usage() const { return usage.empty() ? 0 : *std::max_element(usage.begin(), usage.end()); }
  bool const_usage() const {
    return std::all_of(usage.begin(), usage.end(), [&](int64_t u) { return u == usage[0]; });
  }
};

struct WEdge {
  bool alive = true;
  PNodeIdx a = 0, b = 0;
  std::vector<Cost> m;  // |S_a| x |S_b| row-major
};

inline uint64_t edge_key(PNodeIdx x, PNodeIdx y) {
  if (x > y) std::swap(x, y);
  return (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
}


class Reducer {
 public:
  Reducer(const Problem& p, const ReduceOptions& opt) : p_(p), opt_(opt) {
    nodes_.resize(sz(p.num_nodes()));
    for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
      const ProblemNode& n = p.nodes[sz(v)];
      WNode& w = nodes_[sz(v)];
      w.cost = n.costs;
      w.usage = n.usages;
      w.start = n.start;
      w.end = n.end;
      w.orig.resize(n.costs.size());
      for (size_t q = 0; q < n.costs.size(); ++q) w.orig[q] = static_cast<StrategyIdx>(q);
    }
    edge_index_.reserve(p.edges.size() * 2);
    for (const ProblemEdge& e : p.edges) add_edge(e.u, e.v, e.costs);
  }

  ReducedProblem run() {
    out_.original_nodes = p_.num_nodes();
    for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) enqueue(v);
    for (int round = 0; round < 50 && !out_.infeasible; ++round) {
      while (!queue_.empty() && !out_.infeasible) {
        if ((++steps_ & 63) == 0 && std::chrono::steady_clock::now() > opt_.deadline) break;
        PNodeIdx v = queue_.front();
        queue_.pop_front();
        nodes_[sz(v)].queued = false;
        process(v);
      }
      if (out_.infeasible || !opt_.eliminate || !queue_.empty()) break;  // done, or out of time
      if (!update_mem_free()) break;
    }
    build_output();
    return std::move(out_);
  }

 private:
  // ---- graph edits --------------------------------------------------------------------
  void enqueue(PNodeIdx v) {
    WNode& n = nodes_[sz(v)];
    if (n.alive && !n.queued) {
      n.queued = true;
      queue_.push_back(v);
    }
  }
  PNodeIdx other(const WEdge& e, PNodeIdx x) const { return e.a == x ? e.b : e.a; }
  /// Entry of edge e when node x takes sx and the other end takes sy.
  Cost ev(const WEdge& e, PNodeIdx x, int32_t sx, int32_t sy) const {
    if (e.a == x) return e.m[sz(sx) * sz(nodes_[sz(e.b)].k()) + sz(sy)];
    return e.m[sz(sy) * sz(nodes_[sz(e.b)].k()) + sz(sx)];
  }

  void add_edge(PNodeIdx a, PNodeIdx b, const std::vector<Cost>& m) {
    auto it = edge_index_.find(edge_key(a, b));
    if (it != edge_index_.end()) {
      WEdge& e = edges_[sz(it->second)];
      if (e.a == a) {
        for (size_t i = 0; i < m.size(); ++i) e.m[i] += m[i];
      } else {  // transpose: m is |S_a| x |S_b|, e.m is |S_b| x |S_a|
        size_t ka = sz(nodes_[sz(a)].k()), kb = sz(nodes_[sz(b)].k());
        for (size_t p = 0; p < ka; ++p)
          for (size_t q = 0; q < kb; ++q) e.m[q * ka + p] += m[p * kb + q];
      }
    } else {
      int32_t id = static_cast<int32_t>(edges_.size());
      edges_.push_back(WEdge{true, a, b, m});
      edge_index_.emplace(edge_key(a, b), id);
      nodes_[sz(a)].adj.push_back(id);
      nodes_[sz(b)].adj.push_back(id);
    }
    enqueue(a);
    enqueue(b);
  }

  void remove_edge(int32_t id) {
    WEdge& e = edges_[sz(id)];
    e.alive = false;
    edge_index_.erase(edge_key(e.a, e.b));
    for (PNodeIdx x : {e.a, e.b}) {
      auto& adj = nodes_[sz(x)].adj;
      auto it = std::find(adj.begin(), adj.end(), id);
      *it = adj.back();
      adj.pop_back();
      enqueue(x);
    }
    e.m.clear();
    e.m.shrink_to_fit();
  }

  void remove_strategies(PNodeIdx v, const std::vector<char>& keep) {
    WNode& n = nodes_[sz(v)];
    const size_t k = sz(n.k());
    for (int32_t id : n.adj) {
      WEdge& e = edges_[sz(id)];
      size_t ka = sz(nodes_[sz(e.a)].k()), kb = sz(nodes_[sz(e.b)].k());
      std::vector<Cost> m;
      m.reserve(e.m.size());
      for (size_t p = 0; p < ka; ++p)
        for (size_t q = 0; q < kb; ++q)
          if ((e.a == v ? keep[p] : keep[q])) m.push_back(e.m[p * kb + q]);
      e.m = std::move(m);
      enqueue(other(e, v));
    }
    size_t j = 0;
    for (size_t q = 0; q < k; ++q) {
      if (!keep[q]) continue;
      n.orig[j] = n.orig[q];
      n.cost[j] = n.cost[q];
      n.usage[j] = n.usage[q];
      ++j;
    }
    n.orig.resize(j);
    n.cost.resize(j);
    n.usage.resize(j);
    enqueue(v);
  }

  void to_base(const WNode& n, int64_t u) {
    if (n.end > n.start && u != 0) out_.base.push_back({n.start, n.end, u});
  }

  Elimination start_elimination(PNodeIdx v, std::initializer_list<PNodeIdx> deps) {
    Elimination el;
    el.node = v;
    for (PNodeIdx d : deps) {
      const WNode& dn = nodes_[sz(d)];
      el.deps.push_back(d);
      std::vector<StrategyIdx> pos(p_.nodes[sz(d)].costs.size(), -1);
      for (int32_t i = 0; i < dn.k(); ++i) pos[sz(dn.orig[sz(i)])] = i;
      el.dep_pos.push_back(std::move(pos));
      el.dep_count.push_back(dn.k());
    }
    return el;
  }

  /// Removes v and its edges; `usage` is counted as base usage over v's interval.
  void kill(PNodeIdx v, int64_t usage) {
    WNode& n = nodes_[sz(v)];
    while (!n.adj.empty()) remove_edge(n.adj.back());
    to_base(n, usage);
    n.alive = false;
  }

  // ---- rules ----------------------------------------------------------------------------
  void process(PNodeIdx v) {
    WNode& n = nodes_[sz(v)];
    if (!n.alive) return;
    if (!remove_forbidden(v)) return;
    if (n.k() == 1) {
      fold_single(v);
      return;
    }
    if (opt_.decompose) {
      std::vector<int32_t> adj = n.adj;
      for (int32_t id : adj) try_decompose(id);
    }
    if (opt_.dominance && remove_dominated(v)) return;  // v is re-queued
    if (opt_.eliminate) eliminate(v, n.mem_free || n.const_usage());
  }

  /// Returns false when v became empty (infeasible) or changed (re-queued).
  bool remove_forbidden(PNodeIdx v) {
    WNode& n = nodes_[sz(v)];
    const int32_t k = n.k();
    std::vector<char> keep(sz(k), 1);
    bool any = false;
    for (int32_t q = 0; q < k; ++q)
      if (!(n.cost[sz(q)] < kInfCost)) keep[sz(q)] = 0, any = true;
    for (int32_t id : n.adj) {
      const WEdge& e = edges_[sz(id)];
      const int32_t ko = nodes_[sz(other(e, v))].k();
      for (int32_t q = 0; q < k; ++q) {
        if (!keep[sz(q)]) continue;
        bool all_inf = true;
        for (int32_t r = 0; r < ko && all_inf; ++r) all_inf = !(ev(e, v, q, r) < kInfCost);
        if (all_inf) keep[sz(q)] = 0, any = true;
      }
    }
    if (!any) return true;
    if (std::none_of(keep.begin(), keep.end(), [](char c) { return c != 0; })) {
      out_.infeasible = true;
      return false;
    }
    remove_strategies(v, keep);
    return false;
  }

  void fold_single(PNodeIdx v) {
    WNode& n = nodes_[sz(v)];
    for (int32_t id : n.adj) {
      const WEdge& e = edges_[sz(id)];
      PNodeIdx o = other(e, v);
      WNode& on = nodes_[sz(o)];
      for (int32_t r = 0; r < on.k(); ++r) on.cost[sz(r)] += ev(e, v, 0, r);
    }
    out_.constant_cost += n.cost[0];
    Elimination el = start_elimination(v, {});
    el.table = {n.orig[0]};
    out_.eliminated.push_back(std::move(el));
    kill(v, n.usage[0]);
  }

  void try_decompose(int32_t id) {
    WEdge& e = edges_[sz(id)];
    if (!e.alive) return;
    WNode& na = nodes_[sz(e.a)];
    WNode& nb = nodes_[sz(e.b)];
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

  /// Removes dominated and duplicate strategies; returns true if any was removed.
  bool remove_dominated(PNodeIdx v) {
    WNode& n = nodes_[sz(v)];
    const int32_t k = n.k();
    std::vector<char> keep(sz(k), 1);
    bool any = false;
    // v's row of each incident edge, contiguous (an edge stored with v as its second end
    // would be read down a column, which is most of the time on big strategy counts).
    std::vector<std::vector<Cost>> transposed(n.adj.size());
    std::vector<const Cost*> base(n.adj.size());
    std::vector<int32_t> width(n.adj.size());
    for (size_t i = 0; i < n.adj.size(); ++i) {
      const WEdge& e = edges_[sz(n.adj[i])];
      const int32_t ko = nodes_[sz(other(e, v))].k();
      width[i] = ko;
      if (e.a == v) {  // already row-major by v's strategy: read e.m in place
        base[i] = e.m.data();
        continue;
      }
      transposed[i].resize(sz(k) * sz(ko));
      for (int32_t q = 0; q < k; ++q)
        for (int32_t r = 0; r < ko; ++r) transposed[i][sz(q) * sz(ko) + sz(r)] = ev(e, v, q, r);
      base[i] = transposed[i].data();
    }
    auto row_of = [&](size_t i, int32_t q) { return base[i] + sz(q) * sz(width[i]); };
    // Sum of each strategy's rows: a can only dominate b if its sum is no larger (a cheap
    // test that settles most pairs).
    std::vector<Cost> total(sz(k), 0);
    for (size_t i = 0; i < n.adj.size(); ++i)
      for (int32_t q = 0; q < k; ++q) {
        const Cost* rq = row_of(i, q);
        for (int32_t r = 0; r < width[i]; ++r) total[sz(q)] += rq[r];
      }
    auto dominates = [&](int32_t a, int32_t b) {  // a dominates b (all <=)
      if (n.cost[sz(a)] > n.cost[sz(b)]) return false;
      if (!n.mem_free && n.usage[sz(a)] > n.usage[sz(b)]) return false;
      if (total[sz(a)] > total[sz(b)]) return false;
      for (size_t i = 0; i < n.adj.size(); ++i) {
        const Cost* ra = row_of(i, a);
        const Cost* rb = row_of(i, b);
        for (int32_t r = 0; r < width[i]; ++r)
          if (ra[r] > rb[r]) return false;
      }
      return true;
    };
    for (int32_t b = 0; b < k; ++b) {
      for (int32_t a = 0; a < k; ++a) {
        if (a == b || !keep[sz(a)]) continue;
        if (!dominates(a, b)) continue;
        // Equal strategies dominate each other: keep the lower index.
        if (a > b && dominates(b, a)) continue;
        keep[sz(b)] = 0;
        any = true;
        break;
      }
    }
    if (any) remove_strategies(v, keep);
    return any;
  }

  /// Eliminates v (degree 0, 1 or 2).  With `free` (memory-free or constant usage) v's best
  /// response is chosen by cost alone and its maximum usage goes to the base.  Otherwise the
  /// elimination is done only if every best response (ties broken towards lower usage) has
  /// v's minimum usage: then the choice is optimal for cost and for memory at once, and v
  /// counts as a constant minimum usage.
  void eliminate(PNodeIdx v, bool free) {
    WNode& n = nodes_[sz(v)];
    const int32_t k = n.k();
    const int64_t umin = *std::min_element(n.usage.begin(), n.usage.end());
    auto ok = [&](int32_t q) { return free || n.usage[sz(q)] == umin; };
    auto better = [&](Cost c, int32_t q, Cost best, int32_t bq) {
      return c < best || (c == best && bq >= 0 && n.usage[sz(q)] < n.usage[sz(bq)]);
    };
    const int64_t base_usage = free ? n.max_usage() : umin;
    if (n.adj.empty()) {
      int32_t best = 0;
      for (int32_t q = 1; q < k; ++q)
        if (better(n.cost[sz(q)], q, n.cost[sz(best)], best)) best = q;
      if (!ok(best)) return;
      out_.constant_cost += n.cost[sz(best)];
      Elimination el = start_elimination(v, {});
      el.table = {n.orig[sz(best)]};
      out_.eliminated.push_back(std::move(el));
      kill(v, base_usage);
      return;
    }
    if (n.adj.size() == 1) {
      const int32_t id = n.adj[0];
      const WEdge& e = edges_[sz(id)];
      const PNodeIdx u = other(e, v);
      WNode& un = nodes_[sz(u)];
      std::vector<Cost> add(sz(un.k()), kInfCost);
      std::vector<int32_t> arg(sz(un.k()), -1);
      for (int32_t p = 0; p < un.k(); ++p) {
        for (int32_t q = 0; q < k; ++q) {
          Cost c = n.cost[sz(q)] + ev(e, v, q, p);
          if (c < kInfCost && better(c, q, add[sz(p)], arg[sz(p)])) add[sz(p)] = c, arg[sz(p)] = q;
        }
        if (arg[sz(p)] >= 0 && !ok(arg[sz(p)])) return;
      }
      Elimination el = start_elimination(v, {u});
      el.table.resize(sz(un.k()));
      for (int32_t p = 0; p < un.k(); ++p) {
        un.cost[sz(p)] += add[sz(p)];
        el.table[sz(p)] = n.orig[sz(std::max(arg[sz(p)], 0))];
      }
      out_.eliminated.push_back(std::move(el));
      kill(v, base_usage);
      return;
    }
    if (n.adj.size() == 2) {
      const int32_t id1 = n.adj[0], id2 = n.adj[1];
      const WEdge& e1 = edges_[sz(id1)];
      const WEdge& e2 = edges_[sz(id2)];
      const PNodeIdx u = other(e1, v), w = other(e2, v);
      const int64_t ku = nodes_[sz(u)].k(), kw = nodes_[sz(w)].k();
      const bool existing = edge_index_.count(edge_key(u, w)) > 0;
      if (!existing && ku * kw > ku * k + k * kw + opt_.chain_growth_slack) return;
      // The min-plus product costs ku * k * kw; beyond the cap the node stays for the search
      // (on 4-D meshes k is in the thousands and one product would take seconds).
      if (ku * k * kw > kDeg2MaxWork) return;
      // v's strategies in order of (usage, index): the first to reach a minimum is the one
      // `better` prefers (least usage, then lowest index); the product vectorises (it was a
      // second of llama3-70b on 8x8x8).
      std::vector<int32_t> order(sz(k));
      for (int32_t q = 0; q < k; ++q) order[sz(q)] = q;
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return n.usage[sz(a)] < n.usage[sz(b)]; });
      MinPlusProduct mp = min_plus_product(
          static_cast<int32_t>(ku), static_cast<int32_t>(kw), order,
          [&](int32_t q, int32_t p) { return ev(e1, v, q, p) + n.cost[sz(q)]; },
          [&](int32_t q, int32_t r) { return ev(e2, v, q, r); });
      std::vector<Cost>& m = mp.m;
      const std::vector<int32_t>& arg = mp.arg;
      if (!free)
        for (int32_t a : arg)
          if (a >= 0 && !ok(a)) return;
      Elimination el = start_elimination(v, {u, w});
      el.table.resize(arg.size());
      for (size_t i = 0; i < arg.size(); ++i) el.table[i] = n.orig[sz(std::max(arg[i], 0))];
      out_.eliminated.push_back(std::move(el));
      kill(v, base_usage);
      add_edge(u, w, m);
    }
  }

  /// Recomputes memory-freedom; returns true if some live node became free.
  bool update_mem_free() {
    bool changed = false;
    if (p_.usage_limit < 0) {
      for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
        WNode& n = nodes_[sz(v)];
        if (n.alive && !n.mem_free) n.mem_free = true, changed = true, enqueue(v);
      }
      return changed;
    }
    std::vector<std::pair<int64_t, int64_t>> ev;  // (time, delta of max usage)
    for (const WNode& n : nodes_) {
      if (!n.alive || n.end <= n.start) continue;
      int64_t u = n.max_usage();
      ev.push_back({n.start, u});
      ev.push_back({n.end, -u});
    }
    for (const BaseUsage& b : out_.base) {
      ev.push_back({b.start, b.usage});
      ev.push_back({b.end, -b.usage});
    }
    std::sort(ev.begin(), ev.end());
    std::vector<int64_t> times;
    std::vector<int32_t> binding_prefix{0};  // binding segments before times[i]
    int64_t live = 0;
    for (size_t i = 0; i < ev.size();) {
      int64_t t = ev[i].first;
      while (i < ev.size() && ev[i].first == t) live += ev[i++].second;
      times.push_back(t);
      binding_prefix.push_back(binding_prefix.back() + (live > p_.usage_limit ? 1 : 0));
    }
    for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
      WNode& n = nodes_[sz(v)];
      if (!n.alive || n.mem_free) continue;
      bool free = n.end <= n.start;
      if (!free) {
        size_t lo = sz(std::lower_bound(times.begin(), times.end(), n.start) - times.begin());
        size_t hi = sz(std::lower_bound(times.begin(), times.end(), n.end) - times.begin());
        free = binding_prefix[hi] - binding_prefix[lo] == 0;
      }
      if (free) n.mem_free = true, changed = true, enqueue(v);
    }
    return changed;
  }

  void build_output() {
    out_.problem.name = p_.name;
    out_.problem.usage_limit = p_.usage_limit;
    if (out_.infeasible) return;
    std::vector<PNodeIdx> new_index(nodes_.size(), -1);
    for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
      WNode& n = nodes_[sz(v)];
      if (!n.alive) continue;
      new_index[sz(v)] = out_.problem.num_nodes();
      ProblemNode pn;
      pn.name = p_.nodes[sz(v)].name;
      pn.costs = std::move(n.cost);
      pn.usages = std::move(n.usage);
      pn.start = n.start;
      pn.end = n.end;
      out_.problem.nodes.push_back(std::move(pn));
      out_.orig_node.push_back(v);
      out_.orig_strategy.push_back(std::move(n.orig));
    }
    for (WEdge& e : edges_) {
      if (!e.alive) continue;
      PNodeIdx a = new_index[sz(e.a)], b = new_index[sz(e.b)];
      ProblemEdge pe;
      if (a < b) {
        pe.u = a, pe.v = b, pe.costs = std::move(e.m);
      } else {
        size_t ka = out_.problem.nodes[sz(a)].costs.size(), kb = out_.problem.nodes[sz(b)].costs.size();
        pe.u = b, pe.v = a;
        pe.costs.resize(e.m.size());
        for (size_t p = 0; p < ka; ++p)
          for (size_t q = 0; q < kb; ++q) pe.costs[q * ka + p] = e.m[p * kb + q];
      }
      out_.problem.edges.push_back(std::move(pe));
    }
  }

  const Problem& p_;
  ReduceOptions opt_;
  std::vector<WNode> nodes_;
  std::vector<WEdge> edges_;
  std::unordered_map<uint64_t, int32_t> edge_index_;
  std::deque<PNodeIdx> queue_;
  int64_t steps_ = 0;  ///< work-list steps, for the deadline check
  ReducedProblem out_;
};

}  // namespace reduce_impl
}  // namespace

ReducedProblem reduce(const Problem& p, const ReduceOptions& opt) { return reduce_impl::Reducer(p, opt).run(); }

ReducedProblem identity_reduction(const Problem& p) {
  ReducedProblem r;
  r.problem = p;
  r.original_nodes = p.num_nodes();
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    r.orig_node.push_back(v);
    std::vector<StrategyIdx> s(p.nodes[sz(v)].costs.size());
    for (size_t q = 0; q < s.size(); ++q) s[q] = static_cast<StrategyIdx>(q);
    r.orig_strategy.push_back(std::move(s));
  }
  return r;
}

std::vector<StrategyIdx> ReducedProblem::map_back(const std::vector<StrategyIdx>& rc) const {
  std::vector<StrategyIdx> choice(sz(original_nodes), 0);
  for (size_t i = 0; i < orig_node.size(); ++i)
    choice[sz(orig_node[i])] = orig_strategy[i][sz(rc[i])];
  for (auto it = eliminated.rbegin(); it != eliminated.rend(); ++it) {
    size_t idx = 0;
    for (size_t d = 0; d < it->deps.size(); ++d) {
      StrategyIdx pos = it->dep_pos[d][sz(choice[sz(it->deps[d])])];
      assert(pos >= 0);
      idx = idx * sz(it->dep_count[d]) + sz(std::max(pos, 0));
    }
    choice[sz(it->node)] = it->table[idx];
  }
  return choice;
}

std::vector<StrategyIdx> ReducedProblem::map_forward(const std::vector<StrategyIdx>& oc) const {
  std::vector<StrategyIdx> rc(orig_node.size());
  if (oc.size() != sz(original_nodes)) return {};
  for (size_t i = 0; i < orig_node.size(); ++i) {
    const auto& s = orig_strategy[i];
    auto it = std::find(s.begin(), s.end(), oc[sz(orig_node[i])]);
    if (it == s.end()) return {};
    rc[i] = static_cast<StrategyIdx>(it - s.begin());
  }
  return rc;
}

std::vector<MemoryRow> memory_rows(const Problem& p, const std::vector<BaseUsage>& base,
                                   bool drop_slack) {
  std::vector<MemoryRow> rows;
  if (drop_slack && p.usage_limit < 0) return rows;
  // Events: (time, kind, payload): kind 0 = node ends, 1 = node starts, 2 = base delta.
  struct Ev {
    int64_t t;
    int32_t kind;
    int64_t x;
  };
  std::vector<Ev> ev;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const ProblemNode& n = p.nodes[sz(v)];
    if (n.end <= n.start) continue;
    ev.push_back({n.start, 1, v});
    ev.push_back({n.end, 0, v});
  }
  for (const BaseUsage& b : base) {
    if (b.end <= b.start || b.usage == 0) continue;
    ev.push_back({b.start, 2, b.usage});
    ev.push_back({b.end, 2, -b.usage});
  }
  std::sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
  // Group into time steps with their net change.
  struct Step {
    size_t begin, end;
    bool added, removed;
  };
  std::vector<Step> steps;
  for (size_t i = 0; i < ev.size();) {
    size_t j = i;
    int64_t delta = 0;
    bool add = false, rem = false;
    while (j < ev.size() && ev[j].t == ev[i].t) {
      if (ev[j].kind == 2) delta += ev[j].x;
      else if (ev[j].kind == 1) add = true;
      else rem = true;
      ++j;
    }
    add = add || delta > 0;
    rem = rem || delta < 0;
    if (add || rem) steps.push_back({i, j, add, rem});
    i = j;
  }
  std::vector<PNodeIdx> live;
  std::vector<int32_t> pos(sz(p.num_nodes()), -1);
  int64_t offset = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t i = steps[s].begin; i < steps[s].end; ++i) {
      const Ev& e = ev[i];
      if (e.kind == 2) {
        offset += e.x;
      } else if (e.kind == 1) {
        pos[sz(e.x)] = static_cast<int32_t>(live.size());
        live.push_back(static_cast<PNodeIdx>(e.x));
      } else {
        int32_t at = pos[sz(e.x)];
        live[sz(at)] = live.back();
        pos[sz(live[sz(at)])] = at;
        live.pop_back();
        pos[sz(e.x)] = -1;
      }
    }
    const bool removed_next = s + 1 == steps.size() || steps[s + 1].removed;
    if (!steps[s].added || !removed_next) continue;
    if (drop_slack) {
      int64_t mx = offset;
      for (PNodeIdx v : live) {
        const auto& u = p.nodes[sz(v)].usages;
        mx += *std::max_element(u.begin(), u.end());
      }
      if (mx <= p.usage_limit) continue;
    }
    MemoryRow row;
    row.offset = offset;
    row.nodes = live;
    std::sort(row.nodes.begin(), row.nodes.end());
    rows.push_back(std::move(row));
  }
  return rows;
}

int64_t min_possible_peak(const Problem& p, const std::vector<MemoryRow>& rows) {
  int64_t best = 0;
  for (const MemoryRow& r : rows) {
    int64_t s = r.offset;
    for (PNodeIdx v : r.nodes) {
      const auto& u = p.nodes[sz(v)].usages;
      s += *std::min_element(u.begin(), u.end());
    }
    best = std::max(best, s);
  }
  return best;
}

int64_t rows_peak(const Problem& p, const std::vector<MemoryRow>& rows,
                  const std::vector<StrategyIdx>& choice) {
  int64_t best = 0;
  for (const MemoryRow& r : rows) {
    int64_t s = r.offset;
    for (PNodeIdx v : r.nodes) s += p.nodes[sz(v)].usages[sz(choice[sz(v)])];
    best = std::max(best, s);
  }
  return best;
}

}  // namespace autoshard

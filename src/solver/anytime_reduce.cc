#include "solver/anytime_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "solver/min_plus.h"

namespace autoshard {
namespace {
namespace anytime_impl {

/// Very negative baseline for segments that can never overflow.
constexpr int64_t kNeverBinds = -(int64_t{1} << 60);
/// Caps on the work (and record size) of one degree-2 elimination.
constexpr double kDeg2MaxWork = 2e7;
constexpr double kDeg2MaxTable = 4e6;
/// Dominance checks only for nodes up to this many strategies.
constexpr size_t kDominanceMaxStrategies = 1024;

struct WPiece {
  int32_t lo = 0, hi = 0;
  std::vector<int64_t> u;  // usage per current strategy
};

struct WNode {
  bool alive = true;
  std::vector<int32_t> ids;  // original strategy index per current strategy
  std::vector<Cost> unary;
  std::vector<WPiece> pieces;
  std::map<int32_t, int32_t> nbr;  // neighbour -> edge
  size_t size() const { return unary.size(); }
};

struct WEdge {
  int32_t a = 0, b = 0;
  bool alive = true;
  std::vector<Cost> m;  // |S_a| x |S_b|
};

class Reducer {
 public:
  Reducer(const Problem& p, GroupModel& out, std::vector<AnytimeReduction::Record>& records,
          std::vector<int32_t>& roots, std::vector<std::vector<int32_t>>& ids)
      : p_(p), out_(out), records_(records), roots_(roots), ids_(ids) {}

  std::string run() {
    init();
    int rounds = 0;
    for (bool changed = true; changed && !out_.infeasible; ++rounds) {
      changed = drop_safe_pieces();
      for (int32_t g = 0; g < static_cast<int32_t>(nodes_.size()) && !out_.infeasible; ++g) {
        if (!nodes_[static_cast<size_t>(g)].alive) continue;
        changed |= step(g);
      }
      if (!changed && !out_.infeasible) changed = dominance_pass();
    }
    finish();
    return fmt::format("reduced {} nodes / {} edges to {} groups / {} edges / {} pieces in {} rounds",
                       p_.num_nodes(), p_.num_edges(), out_.num_groups(), out_.edges.size(),
                       count_pieces(), rounds);
  }

 private:
  size_t count_pieces() const {
    size_t n = 0;
    for (const auto& v : out_.pieces) n += v.size();
    return n;
  }
  WNode& node(int32_t g) { return nodes_[static_cast<size_t>(g)]; }
  WEdge& edge(int32_t e) { return edges_[static_cast<size_t>(e)]; }
  /// Cost on edge e when `g` takes sg and the other end takes so.
  Cost ecost(const WEdge& e, int32_t g, size_t sg, size_t so) {
    size_t nb = node(e.b).size();
    return e.a == g ? e.m[sg * nb + so] : e.m[so * nb + sg];
  }

  void init() {
    std::vector<int64_t> bounds;
    for (const auto& n : p_.nodes)
      if (n.end > n.start) { bounds.push_back(n.start); bounds.push_back(n.end); }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    nseg_ = bounds.empty() ? 0 : static_cast<int32_t>(bounds.size()) - 1;
    base_diff_.assign(static_cast<size_t>(nseg_) + 1, 0);
    auto seg = [&](int64_t t) {
      return static_cast<int32_t>(std::lower_bound(bounds.begin(), bounds.end(), t) - bounds.begin());
    };
    nodes_.resize(p_.nodes.size());
    orig_count_.resize(p_.nodes.size());
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const ProblemNode& pn = p_.nodes[i];
      WNode& w = nodes_[i];
      orig_count_[i] = static_cast<int32_t>(pn.costs.size());
      for (size_t s = 0; s < pn.costs.size(); ++s) {
        w.ids.push_back(static_cast<int32_t>(s));
        w.unary.push_back(pn.costs[s]);
      }
      if (pn.end > pn.start) add_piece(w, WPiece{seg(pn.start), seg(pn.end), pn.usages});
    }
    for (const ProblemEdge& pe : p_.edges) add_edge(pe.u, pe.v, pe.costs);
  }

  /// Subtracts the minimum into the baseline and keeps the piece if anything is left.
  void add_piece(WNode& w, WPiece pc) {
    if (pc.hi <= pc.lo || pc.u.empty()) return;
    int64_t mn = *std::min_element(pc.u.begin(), pc.u.end());
    base_diff_[static_cast<size_t>(pc.lo)] += mn;
    base_diff_[static_cast<size_t>(pc.hi)] -= mn;
    bool any = false;
    for (auto& x : pc.u) { x -= mn; any |= x != 0; }
    if (!any) return;
    if (!w.pieces.empty() && w.pieces.back().lo == pc.lo && w.pieces.back().hi == pc.hi) {
      for (size_t s = 0; s < pc.u.size(); ++s) w.pieces.back().u[s] += pc.u[s];
      return;
    }
    w.pieces.push_back(std::move(pc));
  }

  /// Adds matrix m (|S_a| x |S_b|) to the edge a-b, creating it if needed.
  void add_edge(int32_t a, int32_t b, const std::vector<Cost>& m) {
    auto it = node(a).nbr.find(b);
    if (it == node(a).nbr.end()) {
      int32_t id = static_cast<int32_t>(edges_.size());
      edges_.push_back(WEdge{a, b, true, m});
      node(a).nbr[b] = id;
      node(b).nbr[a] = id;
      return;
    }
    WEdge& e = edge(it->second);
    if (e.a == a) {
      for (size_t k = 0; k < m.size(); ++k) e.m[k] += m[k];
    } else {
      size_t na = node(a).size(), nb = node(b).size();
      for (size_t i = 0; i < na; ++i)
        for (size_t j = 0; j < nb; ++j) e.m[j * na + i] += m[i * nb + j];
    }
  }

  void erase_edge(int32_t e) {
    WEdge& w = edge(e);
    w.alive = false;
    node(w.a).nbr.erase(w.b);
    node(w.b).nbr.erase(w.a);
    w.m.clear();
    w.m.shrink_to_fit();
  }

  void remove_strategies(int32_t g, const std::vector<char>& keep) {
    WNode& w = node(g);
    size_t n = w.size();
    std::vector<size_t> kept;
    for (size_t s = 0; s < n; ++s)
      if (keep[s]) kept.push_back(s);
    for (auto [h, e] : w.nbr) {
      WEdge& ed = edge(e);
      size_t nh = node(h).size();
      std::vector<Cost> m;
      m.reserve(kept.size() * nh);
      if (ed.a == g) {
        for (size_t s : kept)
          for (size_t t = 0; t < nh; ++t) m.push_back(ed.m[s * nh + t]);
      } else {
        for (size_t t = 0; t < nh; ++t)
          for (size_t s : kept) m.push_back(ed.m[t * n + s]);
      }
      ed.m = std::move(m);
    }
    auto pick = [&](auto& v) {
      std::remove_reference_t<decltype(v)> r;
      r.reserve(kept.size());
      for (size_t s : kept) r.push_back(v[s]);
      v = std::move(r);
    };
    pick(w.ids);
    pick(w.unary);
    std::vector<WPiece> old = std::move(w.pieces);
    w.pieces.clear();
    for (WPiece& pc : old) {
      pick(pc.u);
      add_piece(w, std::move(pc));
    }
  }

  /// One round of reductions at g.  Returns true if anything changed.
  bool step(int32_t g) {
    bool changed = prune(g);
    WNode& w = node(g);
    if (w.size() == 0) {
      out_.infeasible = true;
      return true;
    }
    if (w.size() == 1) {
      fold_fixed(g);
      return true;
    }
    if (w.pieces.empty()) {
      if (w.nbr.empty()) {
        size_t best = static_cast<size_t>(std::min_element(w.unary.begin(), w.unary.end()) - w.unary.begin());
        out_.offset += w.unary[best];
        records_.push_back({AnytimeReduction::Record::kFixed, g, -1, -1, w.ids[best], 0, {}});
        w.alive = false;
        return true;
      }
      if (w.nbr.size() == 1) {
        eliminate_leaf(g);
        return true;
      }
      if (w.nbr.size() == 2 && eliminate_deg2(g)) return true;
    }
    for (auto [h, e] : w.nbr) {
      std::vector<int32_t> f;
      if (function_of(e, g, h, f)) {
        // A bijection can go either way: move the smaller node's pieces and edges.
        std::vector<int32_t> inv(w.size(), -1);
        bool bijection = w.size() == node(h).size();
        for (size_t t = 0; t < f.size() && bijection; ++t) {
          if (inv[static_cast<size_t>(f[t])] >= 0) bijection = false;
          inv[static_cast<size_t>(f[t])] = static_cast<int32_t>(t);
        }
        auto weight = [&](const WNode& x) { return x.pieces.size() + x.nbr.size(); };
        if (bijection && weight(w) > weight(node(h))) merge_into(h, g, inv);
        else merge_into(g, h, f);
        return true;
      }
    }
    return changed;
  }

  /// Drops strategies with infinite unary cost or no finite partner on some edge.
  bool prune(int32_t g) {
    WNode& w = node(g);
    std::vector<char> keep(w.size(), 1);
    bool drop = false;
    for (size_t s = 0; s < w.size(); ++s)
      if (!std::isfinite(w.unary[s])) { keep[s] = 0; drop = true; }
    for (auto [h, e] : w.nbr) {
      const WEdge& ed = edge(e);
      size_t nh = node(h).size();
      for (size_t s = 0; s < w.size(); ++s) {
        if (!keep[s]) continue;
        bool any = false;
        for (size_t t = 0; t < nh && !any; ++t) any = std::isfinite(ecost(ed, g, s, t));
        if (!any) { keep[s] = 0; drop = true; }
      }
    }
    if (drop) remove_strategies(g, keep);
    return drop;
  }

  void fold_fixed(int32_t g) {
    WNode& w = node(g);
    std::vector<std::pair<int32_t, int32_t>> nb(w.nbr.begin(), w.nbr.end());
    for (auto [h, e] : nb) {
      WNode& hn = node(h);
      for (size_t t = 0; t < hn.size(); ++t) hn.unary[t] += ecost(edge(e), g, 0, t);
      erase_edge(e);
    }
    out_.offset += w.unary[0];
    records_.push_back({AnytimeReduction::Record::kFixed, g, -1, -1, w.ids[0], 0, {}});
    w.alive = false;  // pieces were normalised to nothing (a single strategy has no spread)
  }

  void eliminate_leaf(int32_t g) {
    WNode& w = node(g);
    auto [h, e] = *w.nbr.begin();
    WNode& hn = node(h);
    AnytimeReduction::Record r{AnytimeReduction::Record::kTable, g, h, -1, 0, 0, {}};
    r.table.assign(static_cast<size_t>(orig_count_[static_cast<size_t>(h)]), -1);
    for (size_t t = 0; t < hn.size(); ++t) {
      Cost best = kInfCost;
      size_t arg = 0;
      for (size_t s = 0; s < w.size(); ++s) {
        Cost c = w.unary[s] + ecost(edge(e), g, s, t);
        if (c < best) { best = c; arg = s; }
      }
      hn.unary[t] += best;
      r.table[static_cast<size_t>(hn.ids[t])] = w.ids[arg];
    }
    erase_edge(e);
    records_.push_back(std::move(r));
    w.alive = false;
  }

  bool eliminate_deg2(int32_t g) {
    WNode& w = node(g);
    auto it = w.nbr.begin();
    auto [a, ea] = *it++;
    auto [b, eb] = *it;
    WNode& an = node(a);
    WNode& bn = node(b);
    double work = static_cast<double>(an.size()) * static_cast<double>(bn.size()) * static_cast<double>(w.size());
    double table = static_cast<double>(orig_count_[static_cast<size_t>(a)]) * orig_count_[static_cast<size_t>(b)];
    if (work > kDeg2MaxWork || table > kDeg2MaxTable) return false;
    AnytimeReduction::Record r{AnytimeReduction::Record::kTable, g, a, b, 0, orig_count_[static_cast<size_t>(b)], {}};
    r.table.assign(static_cast<size_t>(table), -1);
    // The first minimising strategy of g in index order, as the loops here always took.
    std::vector<int32_t> order(w.size());
    for (size_t t = 0; t < w.size(); ++t) order[t] = static_cast<int32_t>(t);
    const WEdge& to_a = edge(ea);  // (clang 14 cannot capture structured bindings)
    const WEdge& to_b = edge(eb);
    MinPlusProduct mp = min_plus_product(
        static_cast<int32_t>(an.size()), static_cast<int32_t>(bn.size()), order,
        [&](int32_t t, int32_t s) { return w.unary[sz(t)] + ecost(to_a, g, sz(t), sz(s)); },
        [&](int32_t t, int32_t q) { return ecost(to_b, g, sz(t), sz(q)); });
    for (size_t s = 0; s < an.size(); ++s)
      for (size_t q = 0; q < bn.size(); ++q)
        r.table[static_cast<size_t>(an.ids[s]) * static_cast<size_t>(r.stride) + static_cast<size_t>(bn.ids[q])] =
            w.ids[sz(std::max(mp.arg[s * bn.size() + q], 0))];
    erase_edge(ea);
    erase_edge(eb);
    add_edge(a, b, mp.m);
    records_.push_back(std::move(r));
    w.alive = false;
    return true;
  }

  /// True if every strategy of h leaves exactly one finite choice at g; f[t] is that choice.
  bool function_of(int32_t e, int32_t g, int32_t h, std::vector<int32_t>& f) {
    const WEdge& ed = edge(e);
    size_t ng = node(g).size(), nh = node(h).size();
    f.assign(nh, -1);
    for (size_t t = 0; t < nh; ++t) {
      for (size_t s = 0; s < ng; ++s) {
        if (!std::isfinite(ecost(ed, g, s, t))) continue;
        if (f[t] >= 0) return false;
        f[t] = static_cast<int32_t>(s);
      }
      if (f[t] < 0) return false;
    }
    return true;
  }

  void merge_into(int32_t g, int32_t h, const std::vector<int32_t>& f) {
    WNode& w = node(g);
    WNode& hn = node(h);
    int32_t e = w.nbr.at(h);
    AnytimeReduction::Record r{AnytimeReduction::Record::kFunction, g, h, -1, 0, 0, {}};
    r.table.assign(static_cast<size_t>(orig_count_[static_cast<size_t>(h)]), -1);
    for (size_t t = 0; t < hn.size(); ++t) {
      size_t s = static_cast<size_t>(f[t]);
      hn.unary[t] += w.unary[s] + ecost(edge(e), g, s, t);
      r.table[static_cast<size_t>(hn.ids[t])] = w.ids[s];
    }
    erase_edge(e);
    for (WPiece& pc : w.pieces) {
      WPiece q{pc.lo, pc.hi, {}};
      for (size_t t = 0; t < hn.size(); ++t) q.u.push_back(pc.u[static_cast<size_t>(f[t])]);
      add_piece(hn, std::move(q));
    }
    std::vector<std::pair<int32_t, int32_t>> nb(w.nbr.begin(), w.nbr.end());
    for (auto [k, ek] : nb) {
      size_t nk = node(k).size();
      std::vector<Cost> m(hn.size() * nk);
      for (size_t t = 0; t < hn.size(); ++t)
        for (size_t q = 0; q < nk; ++q) m[t * nk + q] = ecost(edge(ek), g, static_cast<size_t>(f[t]), q);
      erase_edge(ek);
      add_edge(h, k, m);
    }
    records_.push_back(std::move(r));
    w.alive = false;
  }

  /// Drops pieces lying only in segments where the largest possible usage fits the limit.
  bool drop_safe_pieces() {
    if (nseg_ == 0) return false;
    std::vector<int64_t> diff = base_diff_;
    for (const WNode& w : nodes_) {
      if (!w.alive) continue;
      for (const WPiece& pc : w.pieces) {
        int64_t mx = *std::max_element(pc.u.begin(), pc.u.end());
        diff[static_cast<size_t>(pc.lo)] += mx;
        diff[static_cast<size_t>(pc.hi)] -= mx;
      }
    }
    unsafe_prefix_.assign(static_cast<size_t>(nseg_) + 1, 0);
    int64_t acc = 0;
    for (int32_t s = 0; s < nseg_; ++s) {
      acc += diff[static_cast<size_t>(s)];
      bool unsafe = out_.limit < 0 ? false : acc > out_.limit;
      unsafe_prefix_[static_cast<size_t>(s) + 1] = unsafe_prefix_[static_cast<size_t>(s)] + (unsafe ? 1 : 0);
    }
    bool changed = false;
    for (WNode& w : nodes_) {
      if (!w.alive) continue;
      size_t before = w.pieces.size();
      std::erase_if(w.pieces, [&](const WPiece& pc) {
        return unsafe_prefix_[static_cast<size_t>(pc.hi)] == unsafe_prefix_[static_cast<size_t>(pc.lo)];
      });
      changed |= w.pieces.size() != before;
    }
    return changed;
  }

  /// Removes strategies dominated in cost, usage and every edge row.  True if any removed.
  bool dominance_pass() {
    bool any = false;
    for (int32_t g = 0; g < static_cast<int32_t>(nodes_.size()); ++g) {
      WNode& w = node(g);
      if (!w.alive || w.size() < 2 || w.size() > kDominanceMaxStrategies) continue;
      size_t n = w.size();
      std::vector<char> keep(n, 1);
      for (size_t t = 0; t < n; ++t) {
        for (size_t d = 0; d < n && keep[t]; ++d) {
          if (d == t || !keep[d] || w.unary[d] > w.unary[t]) continue;
          if (dominates(g, d, t)) keep[t] = 0;
        }
      }
      if (std::count(keep.begin(), keep.end(), 0) > 0) {
        remove_strategies(g, keep);
        any = true;
      }
    }
    return any;
  }

  /// True if strategy d is at least as good as t everywhere (ties broken by index).
  bool dominates(int32_t g, size_t d, size_t t) {
    WNode& w = node(g);
    bool strict = w.unary[d] < w.unary[t];
    for (const WPiece& pc : w.pieces) {
      if (pc.u[d] > pc.u[t]) return false;
      strict |= pc.u[d] < pc.u[t];
    }
    for (auto [h, e] : w.nbr) {
      const WEdge& ed = edge(e);
      size_t nh = node(h).size();
      for (size_t q = 0; q < nh; ++q) {
        Cost cd = ecost(ed, g, d, q), ct = ecost(ed, g, t, q);
        if (cd > ct) return false;
        strict |= cd < ct;
      }
    }
    return strict || d < t;
  }

  void finish() {
    out_.limit = p_.usage_limit;
    if (!out_.infeasible) drop_safe_pieces();
    std::vector<int32_t> gid(nodes_.size(), -1);
    if (!out_.infeasible) {
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (!nodes_[i].alive) continue;
        gid[i] = out_.num_groups();
        roots_.push_back(static_cast<int32_t>(i));
        ids_.push_back(nodes_[i].ids);
        out_.unary.push_back(nodes_[i].unary);
        out_.pieces.emplace_back();
        for (WPiece& pc : nodes_[i].pieces)
          out_.pieces.back().push_back(GroupModel::Piece{pc.lo, pc.hi, std::move(pc.u)});
      }
      out_.adj.resize(out_.unary.size());
      for (WEdge& e : edges_) {
        if (!e.alive) continue;
        int32_t k = static_cast<int32_t>(out_.edges.size());
        GroupModel::Edge ge{gid[static_cast<size_t>(e.a)], gid[static_cast<size_t>(e.b)], std::move(e.m)};
        out_.adj[static_cast<size_t>(ge.a)].push_back({k, true});
        out_.adj[static_cast<size_t>(ge.b)].push_back({k, false});
        out_.edges.push_back(std::move(ge));
      }
    }
    out_.base.assign(static_cast<size_t>(nseg_), 0);
    int64_t acc = 0;
    for (int32_t s = 0; s < nseg_; ++s) {
      acc += base_diff_[static_cast<size_t>(s)];
      bool unsafe = unsafe_prefix_.size() > static_cast<size_t>(s) + 1 &&
                    unsafe_prefix_[static_cast<size_t>(s) + 1] != unsafe_prefix_[static_cast<size_t>(s)];
      out_.base[static_cast<size_t>(s)] = unsafe ? acc : kNeverBinds;
    }
  }

  const Problem& p_;
  GroupModel& out_;
  std::vector<AnytimeReduction::Record>& records_;
  std::vector<int32_t>& roots_;
  std::vector<std::vector<int32_t>>& ids_;
  std::vector<WNode> nodes_;
  std::vector<WEdge> edges_;
  std::vector<int32_t> orig_count_;
  std::vector<int64_t> base_diff_;
  std::vector<int32_t> unsafe_prefix_;
  int32_t nseg_ = 0;
};

}  // namespace anytime_impl
}  // namespace

AnytimeReduction::AnytimeReduction(const Problem& p) : num_nodes_(p.num_nodes()) {
  model_.limit = p.usage_limit;
  anytime_impl::Reducer r(p, model_, records_, group_root_, group_ids_);
  summary_ = r.run();
}

std::vector<StrategyIdx> AnytimeReduction::expand(const std::vector<int32_t>& group_choice) const {
  std::vector<StrategyIdx> x(static_cast<size_t>(num_nodes_), 0);
  for (size_t g = 0; g < group_root_.size(); ++g)
    x[static_cast<size_t>(group_root_[g])] = group_ids_[g][static_cast<size_t>(group_choice[g])];
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    const Record& r = *it;
    int32_t v = r.fixed;
    if (r.kind == Record::kFunction || (r.kind == Record::kTable && r.ref_b < 0)) {
      v = r.table[static_cast<size_t>(x[static_cast<size_t>(r.ref_a)])];
    } else if (r.kind == Record::kTable) {
      v = r.table[static_cast<size_t>(x[static_cast<size_t>(r.ref_a)]) * static_cast<size_t>(r.stride) +
                  static_cast<size_t>(x[static_cast<size_t>(r.ref_b)])];
    }
    x[static_cast<size_t>(r.node)] = v < 0 ? 0 : v;
  }
  return x;
}

std::vector<int32_t> AnytimeReduction::restrict(const std::vector<StrategyIdx>& choice) const {
  if (choice.size() != static_cast<size_t>(num_nodes_)) return {};
  std::vector<int32_t> g_choice(group_root_.size());
  for (size_t g = 0; g < group_root_.size(); ++g) {
    const auto& ids = group_ids_[g];
    const auto it = std::find(ids.begin(), ids.end(), choice[static_cast<size_t>(group_root_[g])]);
    if (it == ids.end()) return {};
    g_choice[g] = static_cast<int32_t>(it - ids.begin());
  }
  return g_choice;
}

}  // namespace autoshard

#include "solver/reducer_graph.h"

#include <algorithm>
#include <bit>

namespace autoshard::reduce_detail {

void WorkGraph::init() {
  for (const ProblemNode& n : p_.nodes)
    if (n.end > n.start) r_.bounds.push_back(n.start), r_.bounds.push_back(n.end);
  std::sort(r_.bounds.begin(), r_.bounds.end());
  r_.bounds.erase(std::unique(r_.bounds.begin(), r_.bounds.end()), r_.bounds.end());
  const size_t segments = r_.bounds.empty() ? 0 : r_.bounds.size() - 1;
  base_diff_.assign(segments + 1, 0);
  auto seg = [&](int64_t t) {
    return static_cast<int32_t>(std::lower_bound(r_.bounds.begin(), r_.bounds.end(), t) - r_.bounds.begin());
  };
  r_.nodes.resize(sz(p_.num_nodes()));
  for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
    const ProblemNode& n = p_.nodes[sz(v)];
    WNode& w = node(v);
    w.cost = n.costs;
    w.orig.resize(n.costs.size());
    for (size_t q = 0; q < n.costs.size(); ++q) w.orig[q] = static_cast<StrategyIdx>(q);
    if (n.end > n.start) add_piece(w, WPiece{seg(n.start), seg(n.end), n.usages});
  }
  edge_index_.reserve(p_.edges.size() * 2);
  for (const ProblemEdge& e : p_.edges) add_edge(e.u, e.v, e.costs);
}

void WorkGraph::add_piece(WNode& n, WPiece pc) {
  if (pc.hi <= pc.lo || pc.u.empty()) return;
  const int64_t mn = *std::min_element(pc.u.begin(), pc.u.end());
  add_to_base(pc.lo, pc.hi, mn);
  bool any = false;
  for (int64_t& x : pc.u) any |= (x -= mn) != 0;
  if (!any) return;
  for (size_t i = 0; i < n.pieces.size(); ++i) {
    if (n.pieces[i].lo != pc.lo || n.pieces[i].hi != pc.hi) continue;
    for (size_t q = 0; q < pc.u.size(); ++q) pc.u[q] += n.pieces[i].u[q];
    n.pieces.erase(n.pieces.begin() + static_cast<std::ptrdiff_t>(i));
    add_piece(n, std::move(pc));  // the sum's minimum may be above zero
    return;
  }
  n.pieces.push_back(std::move(pc));
}

void WorkGraph::add_edge(PNodeIdx a, PNodeIdx b, const std::vector<Cost>& m) {
  auto it = edge_index_.find(edge_key(a, b));
  if (it != edge_index_.end()) {
    WEdge& e = edge(it->second);
    if (e.a == a) {
      for (size_t i = 0; i < m.size(); ++i) e.m[i] += m[i];
    } else {  // transpose: m is |S_a| x |S_b|, e.m is |S_b| x |S_a|
      const size_t ka = sz(node(a).k()), kb = sz(node(b).k());
      for (size_t p = 0; p < ka; ++p)
        for (size_t q = 0; q < kb; ++q) e.m[q * ka + p] += m[p * kb + q];
    }
  } else {
    const auto id = static_cast<int32_t>(r_.edges.size());
    r_.edges.push_back(WEdge{true, a, b, m});
    edge_index_.emplace(edge_key(a, b), id);
    node(a).adj.push_back(id);
    node(b).adj.push_back(id);
  }
  enqueue(a);
  enqueue(b);
}

void WorkGraph::remove_edge(int32_t id) {
  WEdge& e = edge(id);
  e.alive = false;
  edge_index_.erase(edge_key(e.a, e.b));
  for (PNodeIdx x : {e.a, e.b}) {
    auto& adj = node(x).adj;
    *std::find(adj.begin(), adj.end(), id) = adj.back();
    adj.pop_back();
    enqueue(x);
  }
  e.m.clear();
  e.m.shrink_to_fit();
}

void WorkGraph::remove_strategies(PNodeIdx v, const std::vector<char>& keep) {
  WNode& n = node(v);
  for (int32_t id : n.adj) {
    WEdge& e = edge(id);
    const size_t ka = sz(node(e.a).k()), kb = sz(node(e.b).k());
    std::vector<Cost> m;
    m.reserve(e.m.size());
    for (size_t p = 0; p < ka; ++p)
      for (size_t q = 0; q < kb; ++q)
        if (e.a == v ? keep[p] : keep[q]) m.push_back(e.m[p * kb + q]);
    e.m = std::move(m);
    enqueue(other(e, v));
  }
  auto pick = [&](auto& values) {
    size_t j = 0;
    for (size_t q = 0; q < keep.size(); ++q)
      if (keep[q]) values[j++] = values[q];
    values.resize(j);
  };
  pick(n.orig);
  pick(n.cost);
  std::vector<WPiece> old = std::move(n.pieces);
  n.pieces.clear();
  for (WPiece& pc : old) {
    pick(pc.u);
    add_piece(n, std::move(pc));
  }
  enqueue(v);
}

Elimination WorkGraph::start_elimination(PNodeIdx v, std::initializer_list<PNodeIdx> deps) {
  Elimination el;
  el.node = v;
  for (PNodeIdx d : deps) {
    const WNode& dn = node(d);
    el.deps.push_back(d);
    std::vector<StrategyIdx> pos(p_.nodes[sz(d)].costs.size(), -1);
    for (int32_t i = 0; i < dn.k(); ++i) pos[sz(dn.orig[sz(i)])] = i;
    el.dep_pos.push_back(std::move(pos));
    el.dep_count.push_back(dn.k());
  }
  return el;
}

void WorkGraph::kill(PNodeIdx v) {
  WNode& n = node(v);
  while (!n.adj.empty()) remove_edge(n.adj.back());
  n.pieces.clear();
  n.alive = false;
}

void WorkGraph::compute_binding() {
  std::vector<int64_t> diff = base_diff_;
  for (const WNode& n : r_.nodes) {
    if (!n.alive) continue;
    for (const WPiece& pc : n.pieces) {
      const int64_t mx = *std::max_element(pc.u.begin(), pc.u.end());
      diff[sz(pc.lo)] += mx;
      diff[sz(pc.hi)] -= mx;
    }
  }
  const size_t segments = diff.empty() ? 0 : diff.size() - 1;
  r_.binding.assign(segments, 0);
  binding_prefix_.assign(segments + 1, 0);
  int64_t acc = 0;
  for (size_t s = 0; s < segments; ++s) {
    acc += diff[s];
    r_.binding[s] = p_.usage_limit >= 0 && acc > p_.usage_limit;
    binding_prefix_[s + 1] = binding_prefix_[s] + r_.binding[s];
  }
}

bool WorkGraph::drop_safe_pieces() {
  compute_binding();
  bool changed = false;
  for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
    WNode& n = node(v);
    if (!n.alive) continue;
    const size_t before = n.pieces.size();
    std::erase_if(n.pieces, [&](const WPiece& pc) {
      if (binding_prefix_[sz(pc.hi)] != binding_prefix_[sz(pc.lo)]) return false;
      add_to_base(pc.lo, pc.hi, *std::max_element(pc.u.begin(), pc.u.end()));
      return true;
    });
    if (n.pieces.size() != before) changed = true, enqueue(v);
  }
  return changed;
}

bool WorkGraph::remove_overflowing() {
  if (!opt_.overflow || p_.usage_limit < 0 || base_diff_.size() < 2) return false;
  const size_t segments = base_diff_.size() - 1;
  // Base per segment and a sparse table of its maxima over runs of 2^w segments.
  std::vector<std::vector<int64_t>> top(1, std::vector<int64_t>(segments));
  int64_t acc = 0;
  for (size_t s = 0; s < segments; ++s) top[0][s] = acc += base_diff_[s];
  for (size_t w = 1; (size_t{1} << w) <= segments; ++w) {
    const std::vector<int64_t>& prev = top[w - 1];
    std::vector<int64_t> row(segments - (size_t{1} << w) + 1);
    for (size_t s = 0; s < row.size(); ++s) row[s] = std::max(prev[s], prev[s + (size_t{1} << (w - 1))]);
    top.push_back(std::move(row));
  }
  auto base_max = [&](int32_t lo, int32_t hi) {
    const size_t w = static_cast<size_t>(std::bit_width(sz(hi - lo))) - 1;
    return std::max(top[w][sz(lo)], top[w][sz(hi) - (size_t{1} << w)]);
  };
  bool changed = false;
  for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
    WNode& n = node(v);
    if (!n.alive || n.pieces.empty()) continue;
    std::vector<char> keep(sz(n.k()), 1);
    bool any = false;
    for (const WPiece& pc : n.pieces) {
      const int64_t room = p_.usage_limit - base_max(pc.lo, pc.hi);
      if (room < 0) continue;  // the base alone overflows: solve() reports the memory bound
      for (size_t q = 0; q < pc.u.size(); ++q)
        if (pc.u[q] > room) keep[q] = 0, any = true;
    }
    if (!any) continue;
    changed = true;
    // A node of several pieces (merged) may overflow in one piece with each strategy.
    if (std::none_of(keep.begin(), keep.end(), [](char c) { return c != 0; })) {
      r_.infeasible = true;
      return true;
    }
    remove_strategies(v, keep);  // its new minima join the base: the table stays a lower bound
  }
  return changed;
}

}  // namespace autoshard::reduce_detail

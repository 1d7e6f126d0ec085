#include "planner/cluster.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_map>

namespace autoshard {

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  return h ^ (x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

uint64_t hash_string(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

uint64_t hash_meta(uint64_t h, const TensorMeta& m) {
  h = mix(h, static_cast<uint64_t>(m.dtype));
  h = mix(h, m.shape.size());
  for (int64_t d : m.shape) h = mix(h, static_cast<uint64_t>(d));
  return h;
}

uint64_t hash_attr(uint64_t h, const AttrValue& v) {
  h = mix(h, v.index());
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) h = mix(h, x ? 1 : 0);
        else if constexpr (std::is_same_v<T, int64_t>) h = mix(h, static_cast<uint64_t>(x));
        else if constexpr (std::is_same_v<T, double>) h = mix(h, std::hash<double>{}(x));
        else if constexpr (std::is_same_v<T, std::string>) h = mix(h, hash_string(x));
        else
          for (int64_t e : x) h = mix(h, static_cast<uint64_t>(e));
      },
      v);
  return h;
}

/// Structural signature of a node: equal signatures mean identical strategy lists and costs.
std::vector<uint64_t> signatures(const Graph& g, const BuiltProblem& bp) {
  std::vector<uint64_t> sig(static_cast<size_t>(g.size()), 0);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    uint64_t h = mix(static_cast<uint64_t>(n.kind) + 1, static_cast<uint64_t>(n.phase));
    h = mix(h, hash_string(n.op));
    for (const auto& [k, v] : n.attrs) h = hash_attr(mix(h, hash_string(k)), v);
    for (const TensorMeta& m : n.outputs) h = hash_meta(h, m);
    for (const TensorRef& r : n.inputs) h = mix(hash_meta(h, g.meta(r)), static_cast<uint64_t>(r.output));
    PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v >= 0) {
      const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(v)];
      h = mix(h, pn.costs.size());
      for (const Strategy& s : bp.strategies[static_cast<size_t>(v)])
        for (const ShardingSpec& o : s.outputs)
          for (const Placement& p : o.placements)
            h = mix(h, static_cast<uint64_t>(p.kind) * 64 + static_cast<uint64_t>(p.dim));
    }
    sig[static_cast<size_t>(i)] = h;
  }
  // An op also carries the signatures of the placeholders it reads (parameters, buffers,
  // inputs): their strategy lists reflect pins, so two layers whose weights are pinned
  // differently do not tie (a tie would force one decision on both, and the optimizer's strict
  // parameter -> update edges would make the tied problem infeasible).
  std::vector<uint64_t> refined = sig;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kOp) continue;
    uint64_t& h = refined[static_cast<size_t>(i)];
    for (const TensorRef& r : n.inputs)
      if (g.node(r.node).kind != NodeKind::kOp) h = mix(h, sig[static_cast<size_t>(r.node)]);
  }
  return refined;
}

/// Module path with every run of digits replaced by '#': "layers.3.attention.wq" ->
/// "layers.#.attention.wq".
std::string mask_digits(std::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] >= '0' && path[i] <= '9') {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += path[i];
    }
  }
  return out;
}

/// Can nodes a and b be counterparts in two repeated layers?  Structurally identical ops also
/// occur inside one layer (q/k/v projections of multi-head attention, the two RMSNorms of a
/// LLaMA block, RoPE on q and on k); tying those is a restriction that can lose the optimum.
/// When the graph records module paths, counterparts must live in different instances of the
/// same module: paths that differ, but only in their layer indices.  Graphs without module
/// paths fall back to structure alone.
bool corresponding_modules(const Graph& g, NodeIdx a, NodeIdx b) {
  const std::string& pa = g.node(a).module_path;
  const std::string& pb = g.node(b).module_path;
  if (pa.empty() && pb.empty()) return true;
  return pa != pb && mask_digits(pa) == mask_digits(pb);
}

struct UnionFind {
  std::vector<int32_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int32_t find(int32_t x) {
    while (parent[static_cast<size_t>(x)] != x) {
      parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
      x = parent[static_cast<size_t>(x)];
    }
    return x;
  }
  void unite(int32_t a, int32_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }
};

/// Recomputation nodes follow their owners: the gap (tail) nodes of two tied forward ops are
/// tied when their usage vectors agree, and the decisions of two regions of the same class
/// whose first ops are tied.  Any tie is a restriction, so cost stays exact.
void tie_recompute_nodes(const BuiltProblem& bp, const std::vector<std::pair<NodeIdx, NodeIdx>>& ties,
                         UnionFind& uf) {
  if (bp.recompute_aux.empty()) return;
  const Problem& p = bp.problem;
  // (owner, role, region class) -> node
  std::map<std::tuple<PNodeIdx, int, std::string>, PNodeIdx> aux;
  for (const auto& a : bp.recompute_aux)
    aux[{a.owner, static_cast<int>(a.role),
         bp.recompute_regions[static_cast<size_t>(a.region)].region}] = a.node;
  for (auto [a, b] : ties) {
    PNodeIdx u = bp.pnode[static_cast<size_t>(a)], v = bp.pnode[static_cast<size_t>(b)];
    if (u < 0 || v < 0) continue;
    for (auto x = aux.lower_bound({u, 0, std::string()}); x != aux.end() && std::get<0>(x->first) == u; ++x) {
      auto y = aux.find({v, std::get<1>(x->first), std::get<2>(x->first)});
      if (y == aux.end()) continue;
      const ProblemNode& nx = p.nodes[static_cast<size_t>(x->second)];
      const ProblemNode& ny = p.nodes[static_cast<size_t>(y->second)];
      if (nx.usages == ny.usages && nx.costs.size() == ny.costs.size()) uf.unite(x->second, y->second);
    }
  }
  std::map<std::pair<int32_t, std::string>, PNodeIdx> first;  // (owner class, region) -> decision
  for (const auto& r : bp.recompute_regions) {
    PNodeIdx owner = bp.pnode[static_cast<size_t>(r.first_op)];
    auto [it, inserted] = first.try_emplace({uf.find(owner), r.region}, r.decision);
    if (!inserted &&
        p.nodes[static_cast<size_t>(it->second)].costs.size() ==
            p.nodes[static_cast<size_t>(r.decision)].costs.size())
      uf.unite(it->second, r.decision);
  }
}

/// Context-parallel buffer nodes (planner/cp_memory.h) follow their attention ops as the
/// recomputation's gap nodes do: the buffer nodes of two tied ops are tied when their usage
/// vectors agree.
void tie_cp_buffer_nodes(const BuiltProblem& bp, const std::vector<std::pair<NodeIdx, NodeIdx>>& ties,
                         UnionFind& uf) {
  if (bp.cp_buffers.empty()) return;
  const Problem& p = bp.problem;
  std::map<PNodeIdx, PNodeIdx> buffer_of;  // owner -> buffer node
  for (const auto& b : bp.cp_buffers) buffer_of[b.owner] = b.node;
  for (auto [a, b] : ties) {
    PNodeIdx u = bp.pnode[static_cast<size_t>(a)], v = bp.pnode[static_cast<size_t>(b)];
    auto x = buffer_of.find(u), y = buffer_of.find(v);
    if (u < 0 || v < 0 || x == buffer_of.end() || y == buffer_of.end()) continue;
    if (p.nodes[static_cast<size_t>(x->second)].usages == p.nodes[static_cast<size_t>(y->second)].usages)
      uf.unite(x->second, y->second);
  }
}

}  // namespace

std::vector<std::pair<NodeIdx, NodeIdx>> find_layer_ties(const Graph& g, const BuiltProblem& bp) {
  const std::vector<uint64_t> sig = signatures(g, bp);
  // Pinned nodes keep their own decisions: a pin filters their strategies, which the
  // signature already reflects, so they can only tie with identically pinned nodes.
  std::vector<NodeIdx> seq;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kOp && bp.pnode[static_cast<size_t>(i)] >= 0) seq.push_back(i);
  const size_t n = seq.size();
  std::vector<char> used(n, 0);
  std::vector<std::pair<NodeIdx, NodeIdx>> ties;

  for (int round = 0; round < 4; ++round) {
    // Candidate periods: gaps between consecutive occurrences of each signature, among
    // positions not yet tied.
    std::unordered_map<uint64_t, size_t> last;
    std::map<size_t, int64_t> gap_votes;
    for (size_t i = 0; i < n; ++i) {
      if (used[i]) continue;
      uint64_t s = sig[static_cast<size_t>(seq[i])];
      if (auto it = last.find(s); it != last.end()) ++gap_votes[i - it->second];
      last[s] = i;
    }
    std::vector<std::pair<int64_t, size_t>> cands;
    for (auto [gap, votes] : gap_votes)
      if (votes >= 2 && gap >= 1) cands.push_back({votes, gap});
    std::sort(cands.rbegin(), cands.rend());
    if (cands.size() > 12) cands.resize(12);
    // Pick the period whose matching runs (of at least one full period) cover the most ops.
    size_t best_p = 0, best_cover = 0;
    for (auto [votes, p] : cands) {
      size_t cover = 0, run = 0;
      for (size_t i = 0; i + p < n; ++i) {
        bool m = !used[i] && !used[i + p] &&
                 sig[static_cast<size_t>(seq[i])] == sig[static_cast<size_t>(seq[i + p])] &&
                 corresponding_modules(g, seq[i], seq[i + p]);
        run = m ? run + 1 : 0;
        if (run == p) cover += p;
        else if (run > p) ++cover;
      }
      if (cover > best_cover) {
        best_cover = cover;
        best_p = p;
      }
    }
    if (best_p == 0 || best_cover < 2) break;
    // Tie along every run of at least one period.
    size_t run_start = 0, run = 0;
    auto flush = [&](size_t end) {
      if (run >= best_p)
        for (size_t i = run_start; i < end; ++i) {
          ties.push_back({seq[i], seq[i + best_p]});
          used[i] = 1;
          used[i + best_p] = 1;
        }
    };
    for (size_t i = 0; i + best_p < n; ++i) {
      bool m = !used[i] && !used[i + best_p] &&
               sig[static_cast<size_t>(seq[i])] == sig[static_cast<size_t>(seq[i + best_p])] &&
               corresponding_modules(g, seq[i], seq[i + best_p]);
      if (m) {
        if (run == 0) run_start = i;
        ++run;
      } else {
        flush(i);
        run = 0;
      }
    }
    flush(run_start + run);
  }

  // Placeholders (parameters, buffers, inputs) follow the ops that read them.
  std::vector<std::pair<NodeIdx, NodeIdx>> more;
  for (auto [a, b] : ties) {
    const Node& x = g.node(a);
    const Node& y = g.node(b);
    for (size_t s = 0; s < x.inputs.size() && s < y.inputs.size(); ++s) {
      NodeIdx pa = x.inputs[s].node, pb = y.inputs[s].node;
      if (pa == pb) continue;
      NodeKind ka = g.node(pa).kind, kb = g.node(pb).kind;
      if (ka == NodeKind::kOp || kb == NodeKind::kOp) continue;
      if (sig[static_cast<size_t>(pa)] == sig[static_cast<size_t>(pb)]) more.push_back({pa, pb});
    }
  }
  ties.insert(ties.end(), more.begin(), more.end());
  return ties;
}

ClusteredProblem identity_cluster(const BuiltProblem& bp) {
  ClusteredProblem cp;
  cp.problem = materialize_edges(bp);
  cp.class_of.resize(static_cast<size_t>(bp.problem.num_nodes()));
  std::iota(cp.class_of.begin(), cp.class_of.end(), 0);
  return cp;
}

ClusteredProblem cluster_problem(const Graph& g, const BuiltProblem& bp) {
  return cluster_problem(bp, find_layer_ties(g, bp));
}

ClusteredProblem cluster_problem(const BuiltProblem& bp,
                                 const std::vector<std::pair<NodeIdx, NodeIdx>>& ties) {
  const Problem& p = bp.problem;
  UnionFind uf(static_cast<size_t>(p.num_nodes()));
  for (auto [a, b] : ties) {
    PNodeIdx u = bp.pnode[static_cast<size_t>(a)], v = bp.pnode[static_cast<size_t>(b)];
    if (u < 0 || v < 0) continue;
    if (p.nodes[static_cast<size_t>(u)].costs.size() != p.nodes[static_cast<size_t>(v)].costs.size())
      continue;
    uf.unite(u, v);
  }
  tie_recompute_nodes(bp, ties, uf);
  tie_cp_buffer_nodes(bp, ties, uf);
  ClusteredProblem cp;
  cp.problem.name = p.name;
  cp.problem.usage_limit = p.usage_limit;
  cp.class_of.assign(static_cast<size_t>(p.num_nodes()), -1);
  std::vector<std::vector<PNodeIdx>> members;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    PNodeIdx root = uf.find(v);
    if (root == v) {
      cp.class_of[static_cast<size_t>(v)] = cp.problem.num_nodes();
      cp.problem.nodes.push_back(p.nodes[static_cast<size_t>(v)]);
      members.push_back({v});
    } else {
      PNodeIdx c = cp.class_of[static_cast<size_t>(root)];
      cp.class_of[static_cast<size_t>(v)] = c;
      ProblemNode& cn = cp.problem.nodes[static_cast<size_t>(c)];
      const ProblemNode& mn = p.nodes[static_cast<size_t>(v)];
      for (size_t q = 0; q < cn.costs.size(); ++q) cn.costs[q] += mn.costs[q];
      members[static_cast<size_t>(c)].push_back(v);
    }
  }
  // Memory of a class: its members have identical usage vectors (equal signatures) but live
  // at different times.  The class counts m x usage over the union of their intervals, where
  // m is the most members live at any one time point: exact when all members share one
  // interval (parameters, optimizer state), an over-estimate otherwise -- so any tied plan
  // that fits, fits for real.
  for (size_t c = 0; c < members.size(); ++c) {
    const auto& ms = members[c];
    if (ms.size() == 1) continue;
    ++cp.num_classes_tied;
    std::vector<std::pair<int64_t, int>> events;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    bool same = true;
    const ProblemNode& first = p.nodes[static_cast<size_t>(ms[0])];
    for (PNodeIdx v : ms) {
      const ProblemNode& mn = p.nodes[static_cast<size_t>(v)];
      if (mn.end <= mn.start) continue;
      same = same && mn.start == first.start && mn.end == first.end;
      lo = std::min(lo, mn.start);
      hi = std::max(hi, mn.end);
      events.push_back({mn.start, +1});
      events.push_back({mn.end, -1});
    }
    if (events.empty()) continue;
    std::sort(events.begin(), events.end());
    int live = 0, most = 0;
    for (auto [t, d] : events) {
      live += d;
      most = std::max(most, live);
    }
    ProblemNode& cn = cp.problem.nodes[c];
    cn.start = lo;
    cn.end = hi;
    for (int64_t& u : cn.usages) u *= most;
    if (!same) cp.memory_exact = false;
  }
  // Edges: summed per class pair from the shared matrices; an edge within a class adds its
  // diagonal to the class's cost.  The matrices are summed in the order of their first edge,
  // not by address: floating-point sums depend on their order, and addresses on the heap's
  // history (another thread's allocations), so an address order made equal inputs give costs
  // that differ in the last bits, and message passing then broke ties the other way.
  struct Use {
    const std::vector<Cost>* mat;
    bool flip;
    int64_t count;
  };
  struct Agg {
    std::map<std::pair<const std::vector<Cost>*, bool>, size_t> at;  ///< lookup only
    std::vector<Use> uses;                                           ///< by first edge
    void add(const std::vector<Cost>* m, bool flip) {
      auto [it, fresh] = at.try_emplace({m, flip}, uses.size());
      if (fresh) uses.push_back({m, flip, 0});
      ++uses[it->second].count;
    }
  };
  std::map<std::pair<PNodeIdx, PNodeIdx>, Agg> agg;
  for (const BuiltProblem::Edge& e : bp.edges) {
    PNodeIdx cu = cp.class_of[static_cast<size_t>(e.u)], cv = cp.class_of[static_cast<size_t>(e.v)];
    const size_t nu = p.nodes[static_cast<size_t>(e.u)].costs.size();
    const size_t nv = p.nodes[static_cast<size_t>(e.v)].costs.size();
    if (cu == cv) {
      ProblemNode& cn = cp.problem.nodes[static_cast<size_t>(cu)];
      for (size_t q = 0; q < nu && q < nv; ++q) cn.costs[q] += (*e.costs)[q * nv + q];
      continue;
    }
    bool flip = cu > cv;
    auto key = flip ? std::make_pair(cv, cu) : std::make_pair(cu, cv);
    agg[key].add(e.costs.get(), flip);
  }
  cp.problem.edges.reserve(agg.size());
  for (const auto& [key, a] : agg) {
    const size_t nu = cp.problem.nodes[static_cast<size_t>(key.first)].costs.size();
    const size_t nv = cp.problem.nodes[static_cast<size_t>(key.second)].costs.size();
    ProblemEdge ne;
    ne.u = key.first;
    ne.v = key.second;
    ne.costs.assign(nu * nv, 0);
    for (const Use& u : a.uses) {
      const std::vector<Cost>& mat = *u.mat;
      const double k = static_cast<double>(u.count);
      for (size_t x = 0; x < nu; ++x)
        for (size_t y = 0; y < nv; ++y) {
          Cost c = u.flip ? mat[y * nu + x] : mat[x * nv + y];
          if (c != 0) ne.costs[x * nv + y] += k * c;
        }
    }
    cp.problem.edges.push_back(std::move(ne));
  }
  return cp;
}

std::vector<StrategyIdx> ClusteredProblem::expand(const std::vector<StrategyIdx>& c) const {
  std::vector<StrategyIdx> full(class_of.size());
  for (size_t v = 0; v < class_of.size(); ++v) full[v] = c[static_cast<size_t>(class_of[v])];
  return full;
}

std::vector<StrategyIdx> ClusteredProblem::restrict(const std::vector<StrategyIdx>& full) const {
  std::vector<StrategyIdx> c(static_cast<size_t>(problem.num_nodes()), 0);
  std::vector<char> set(c.size(), 0);
  for (size_t v = 0; v < class_of.size(); ++v) {
    size_t k = static_cast<size_t>(class_of[v]);
    if (!set[k]) {
      c[k] = full[v];
      set[k] = 1;
    }
  }
  return c;
}

}  // namespace autoshard

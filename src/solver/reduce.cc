#include "solver/reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

#include "solver/reducer.h"

namespace autoshard {

namespace {

/// The survivors' original indices (none when the reductions proved infeasibility) and the
/// eliminations, moved out of `r`.
void fill_map(const Problem& p, reduce_detail::Reduced& r, ReductionMap& map) {
  map.original_nodes = p.num_nodes();
  map.eliminated = std::move(r.eliminated);
  if (r.infeasible) return;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    if (!r.nodes[sz(v)].alive) continue;
    map.orig_node.push_back(v);
    map.orig_strategy.push_back(std::move(r.nodes[sz(v)].orig));
  }
}

/// Index of each live node among the live nodes (-1 for removed ones).
std::vector<int32_t> live_index(const reduce_detail::Reduced& r) {
  std::vector<int32_t> index(r.nodes.size(), -1);
  int32_t next = 0;
  for (size_t v = 0; v < r.nodes.size(); ++v)
    if (r.nodes[v].alive) index[v] = next++;
  return index;
}

}  // namespace

ReducedProblem reduce(const Problem& p, const ReduceOptions& opt) {
  reduce_detail::Reduced r = reduce_detail::run_reductions(p, opt, /*single_interval=*/true);
  ReducedProblem out;
  out.problem.name = p.name;
  out.problem.usage_limit = p.usage_limit;
  out.infeasible = r.infeasible;
  out.constant_cost = r.constant_cost;
  fill_map(p, r, out);
  if (r.infeasible) return out;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    reduce_detail::WNode& n = r.nodes[sz(v)];
    if (!n.alive) continue;
    assert(n.pieces.size() <= 1);
    ProblemNode pn;
    pn.name = p.nodes[sz(v)].name;
    pn.costs = std::move(n.cost);
    if (n.pieces.empty()) {  // memory-free: its usage is all in the base
      pn.usages.assign(pn.costs.size(), 0);
    } else {
      pn.usages = std::move(n.pieces[0].u);
      pn.start = r.bounds[sz(n.pieces[0].lo)];
      pn.end = r.bounds[sz(n.pieces[0].hi)];
    }
    out.problem.nodes.push_back(std::move(pn));
  }
  const std::vector<int32_t> index = live_index(r);
  for (reduce_detail::WEdge& e : r.edges) {
    if (!e.alive) continue;
    const PNodeIdx a = index[sz(e.a)], b = index[sz(e.b)];
    ProblemEdge pe;
    if (a < b) {
      pe.u = a, pe.v = b, pe.costs = std::move(e.m);
    } else {
      const size_t ka = out.problem.nodes[sz(a)].costs.size(), kb = out.problem.nodes[sz(b)].costs.size();
      pe.u = b, pe.v = a;
      pe.costs.resize(e.m.size());
      for (size_t i = 0; i < ka; ++i)
        for (size_t j = 0; j < kb; ++j) pe.costs[j * ka + i] = e.m[i * kb + j];
    }
    out.problem.edges.push_back(std::move(pe));
  }
  for (size_t s = 0; s < r.base.size(); ++s) {
    if (r.base[s] == 0) continue;
    if (!out.base.empty() && out.base.back().end == r.bounds[s] && out.base.back().usage == r.base[s]) {
      out.base.back().end = r.bounds[s + 1];
    } else {
      out.base.push_back({r.bounds[s], r.bounds[s + 1], r.base[s]});
    }
  }
  return out;
}

GroupReduction::GroupReduction(const Problem& p, const ReduceOptions& opt) {
  reduce_detail::Reduced r = reduce_detail::run_reductions(p, opt, /*single_interval=*/false);
  model_.limit = p.usage_limit;
  model_.offset = r.constant_cost;
  model_.infeasible = r.infeasible;
  fill_map(p, r, map_);
  model_.base.resize(r.base.size());
  for (size_t s = 0; s < r.base.size(); ++s) model_.base[s] = r.binding[s] ? r.base[s] : GroupModel::kNeverBinds;
  size_t pieces = 0;
  if (!r.infeasible) {
    for (reduce_detail::WNode& n : r.nodes) {
      if (!n.alive) continue;
      model_.unary.push_back(std::move(n.cost));
      model_.pieces.emplace_back();
      for (reduce_detail::WPiece& pc : n.pieces)
        model_.pieces.back().push_back(GroupModel::Piece{pc.lo, pc.hi, std::move(pc.u)});
      pieces += n.pieces.size();
    }
    model_.adj.resize(model_.unary.size());
    const std::vector<int32_t> index = live_index(r);
    for (reduce_detail::WEdge& e : r.edges) {
      if (!e.alive) continue;
      const auto id = static_cast<int32_t>(model_.edges.size());
      GroupModel::Edge ge{index[sz(e.a)], index[sz(e.b)], std::move(e.m)};
      model_.adj[sz(ge.a)].push_back({id, true});
      model_.adj[sz(ge.b)].push_back({id, false});
      model_.edges.push_back(std::move(ge));
    }
  }
  summary_ = fmt::format("reduced {} nodes / {} edges to {} groups / {} edges / {} pieces in {} rounds",
                         p.num_nodes(), p.num_edges(), model_.num_groups(), model_.edges.size(), pieces,
                         r.rounds);
}

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

std::vector<StrategyIdx> ReductionMap::map_back(const std::vector<StrategyIdx>& rc) const {
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

std::vector<StrategyIdx> ReductionMap::map_forward(const std::vector<StrategyIdx>& oc) const {
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

}  // namespace autoshard

#include "problem/problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace autoshard {

std::string Problem::validate() const {
  for (PNodeIdx i = 0; i < num_nodes(); ++i) {
    const ProblemNode& n = nodes[static_cast<size_t>(i)];
    if (n.costs.empty()) return fmt::format("node {}: no strategies", i);
    if (n.usages.size() != n.costs.size())
      return fmt::format("node {}: {} costs but {} usages", i, n.costs.size(), n.usages.size());
    if (n.end < n.start) return fmt::format("node {}: interval [{}, {}) is reversed", i, n.start, n.end);
  }
  for (EdgeIdx k = 0; k < num_edges(); ++k) {
    const ProblemEdge& e = edges[static_cast<size_t>(k)];
    if (e.u < 0 || e.u >= num_nodes() || e.v < 0 || e.v >= num_nodes())
      return fmt::format("edge {}: node index out of range", k);
    if (e.u == e.v) return fmt::format("edge {}: self loop on node {}", k, e.u);
    size_t want = nodes[static_cast<size_t>(e.u)].costs.size() *
                  nodes[static_cast<size_t>(e.v)].costs.size();
    if (e.costs.size() != want)
      return fmt::format("edge {}: {} costs, expected {}", k, e.costs.size(), want);
  }
  return {};
}

Cost evaluate_cost(const Problem& p, const std::vector<StrategyIdx>& choice) {
  Cost total = 0;
  for (PNodeIdx i = 0; i < p.num_nodes(); ++i)
    total += p.nodes[static_cast<size_t>(i)].costs[static_cast<size_t>(choice[static_cast<size_t>(i)])];
  for (const ProblemEdge& e : p.edges)
    total += p.edge_cost(e, choice[static_cast<size_t>(e.u)], choice[static_cast<size_t>(e.v)]);
  return total;
}

int64_t peak_of_usages(const Problem& p, const std::vector<int64_t>& usage, int64_t horizon) {
  // Sweep over interval endpoints: +usage at start, -usage at end.
  std::map<int64_t, int64_t> delta;
  for (PNodeIdx i = 0; i < p.num_nodes(); ++i) {
    const ProblemNode& n = p.nodes[static_cast<size_t>(i)];
    const int64_t u = usage[static_cast<size_t>(i)];
    if (n.end <= n.start || n.start >= horizon || u == 0) continue;
    delta[n.start] += u;
    delta[std::min(n.end, horizon)] -= u;
  }
  int64_t live = 0, peak = 0;
  for (const auto& [t, d] : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

int64_t peak_usage(const Problem& p, const std::vector<StrategyIdx>& choice, int64_t horizon) {
  std::vector<int64_t> usage(static_cast<size_t>(p.num_nodes()));
  for (size_t i = 0; i < usage.size(); ++i)
    usage[i] = p.nodes[i].usages[static_cast<size_t>(choice[i])];
  return peak_of_usages(p, usage, horizon);
}

std::vector<StrategyIdx> least_usage_choice(const Problem& p) {
  std::vector<StrategyIdx> c(sz(p.num_nodes()), 0);
  for (size_t i = 0; i < c.size(); ++i) {
    const ProblemNode& n = p.nodes[i];
    int64_t best = std::numeric_limits<int64_t>::max();
    for (size_t s = 0; s < n.usages.size(); ++s)
      if (n.costs[s] < kInfCost && n.usages[s] < best) best = n.usages[s], c[i] = static_cast<StrategyIdx>(s);
  }
  return c;
}

int64_t alpa_variable_count(const Problem& p) {
  int64_t n = 0;
  for (const auto& x : p.nodes) n += static_cast<int64_t>(x.costs.size());
  for (const auto& e : p.edges) n += static_cast<int64_t>(e.costs.size());
  return n;
}

}  // namespace autoshard

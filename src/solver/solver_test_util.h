#pragma once
/// Helpers shared by the solver tests: random small problems, brute force, and a tiny IOPDDL
/// loader (independent of src/problem/iopddl so that solver tests do not depend on it).
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "problem/problem.h"
#include "solver/memory_rows.h"

namespace autoshard::testing {

struct RandomOptions {
  int min_nodes = 4, max_nodes = 9;
  int max_strategies = 4;
  double inf_node_prob = 0.08;
  double inf_edge_prob = 0.08;
  bool limit = true;  ///< pick a usage limit (sometimes infeasible)
  /// Share of edges with one finite entry per row of the second end (its strategy then fixes
  /// the first end's: the merge rule's case, as the planner's tied layer classes make it).
  double function_edge_prob = 0;
};

inline Problem random_problem(uint32_t seed, const RandomOptions& o = {}) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto coin = [&](double pr) { return std::uniform_real_distribution<double>(0, 1)(rng) < pr; };
  Problem p;
  const int n = uni(o.min_nodes, o.max_nodes);
  const int style = uni(0, 3);  // 0: random graph, 1: tree, 2: chain, 3: dense
  for (int v = 0; v < n; ++v) {
    ProblemNode nd;
    const int k = uni(1, o.max_strategies);
    const bool const_usage = coin(0.25);
    const int cu = uni(0, 6);
    for (int s = 0; s < k; ++s) {
      nd.costs.push_back(coin(o.inf_node_prob) ? kInfCost : uni(0, 20));
      nd.usages.push_back(const_usage ? cu : uni(0, 8));
    }
    nd.start = uni(0, 8);
    nd.end = coin(0.1) ? nd.start : nd.start + uni(1, 6);
    p.nodes.push_back(nd);
  }
  auto add_edge = [&](int u, int v) {
    if (u == v) return;
    ProblemEdge e;
    e.u = u, e.v = v;
    const size_t ku = p.nodes[static_cast<size_t>(u)].costs.size(), kv = p.nodes[static_cast<size_t>(v)].costs.size();
    if (o.function_edge_prob > 0 && coin(o.function_edge_prob)) {
      e.costs.assign(ku * kv, kInfCost);
      for (size_t b = 0; b < kv; ++b) e.costs[static_cast<size_t>(uni(0, static_cast<int>(ku) - 1)) * kv + b] = uni(0, 15);
      p.edges.push_back(e);
      return;
    }
    const int kind = uni(0, 4);
    for (size_t a = 0; a < ku; ++a)
      for (size_t b = 0; b < kv; ++b) {
        Cost c;
        if (kind == 0) c = static_cast<Cost>(a * 3 + b * 5);            // additive
        else if (kind == 1) c = 0;                                       // zero
        else c = coin(o.inf_edge_prob) ? kInfCost : uni(0, 15);
        e.costs.push_back(c);
      }
    p.edges.push_back(e);
  };
  if (style == 1 || style == 2) {
    for (int v = 1; v < n; ++v) add_edge(style == 2 ? v - 1 : uni(0, v - 1), v);
    if (coin(0.3)) add_edge(uni(0, n - 1), uni(0, n - 1));  // maybe parallel / a cycle
  } else {
    const int m = style == 3 ? n * 2 : uni(0, n + 2);
    for (int i = 0; i < m; ++i) add_edge(uni(0, n - 1), uni(0, n - 1));
  }
  if (coin(0.2) && !p.edges.empty()) {  // explicit parallel edge
    ProblemEdge e = p.edges[0];
    for (Cost& c : e.costs) c = c < kInfCost ? c + uni(0, 3) : c;
    p.edges.push_back(e);
  }
  if (coin(0.2) && !p.edges.empty()) {  // reversed parallel edge
    const ProblemEdge& e0 = p.edges[0];
    ProblemEdge e;
    e.u = e0.v, e.v = e0.u;
    const size_t ku = p.nodes[static_cast<size_t>(e.u)].costs.size(), kv = p.nodes[static_cast<size_t>(e.v)].costs.size();
    for (size_t a = 0; a < ku * kv; ++a) e.costs.push_back(uni(0, 9));
    p.edges.push_back(e);
  }
  if (o.limit && coin(0.75)) {
    std::vector<StrategyIdx> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
    for (int v = 0; v < n; ++v) {
      const auto& u = p.nodes[static_cast<size_t>(v)].usages;
      lo[static_cast<size_t>(v)] = static_cast<StrategyIdx>(std::min_element(u.begin(), u.end()) - u.begin());
      hi[static_cast<size_t>(v)] = static_cast<StrategyIdx>(std::max_element(u.begin(), u.end()) - u.begin());
    }
    const int64_t a = peak_usage(p, lo), b = peak_usage(p, hi);
    p.usage_limit = std::max<int64_t>(0, a + (b - a) * uni(-2, 10) / 10);
  }
  return p;
}

struct Brute {
  bool feasible = false;
  Cost cost = kInfCost;
  std::vector<StrategyIdx> choice;
  int64_t min_peak = -1;  ///< smallest peak over assignments without forbidden choices/pairs
};

/// Exhaustive search.  `base` adds constant usage (for reduced problems).
inline Brute brute_force(const Problem& p, const std::vector<BaseUsage>& base = {}) {
  Problem q = p;
  for (const BaseUsage& b : base) {
    ProblemNode n;
    n.costs = {0};
    n.usages = {b.usage};
    n.start = b.start;
    n.end = b.end;
    q.nodes.push_back(n);
  }
  Brute r;
  const size_t n = static_cast<size_t>(p.num_nodes());
  std::vector<StrategyIdx> c(q.nodes.size(), 0);
  for (;;) {
    const Cost cost = evaluate_cost(q, c);
    if (cost < kInfCost) {
      const int64_t peak = peak_usage(q, c);
      if (r.min_peak < 0 || peak < r.min_peak) r.min_peak = peak;
      if ((q.usage_limit < 0 || peak <= q.usage_limit) && cost < r.cost) {
        r.feasible = true;
        r.cost = cost;
        r.choice.assign(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n));
      }
    }
    size_t i = 0;
    while (i < n && ++c[i] == q.nodes[i].num_strategies()) c[i++] = 0;
    if (i == n) break;
  }
  return r;
}

/// Planner-like problem: a long chain of layers with short side branches, one hub joined to
/// every 10th node, short live intervals.  `tight`: every node's usage varies and the limit
/// binds almost everywhere; otherwise only every 50th node's usage varies.
inline Problem planner_like(int n, bool tight, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Problem p;
  for (int v = 0; v < n; ++v) {
    ProblemNode nd;
    const int k = uni(2, 8);
    for (int s = 0; s < k; ++s) {
      nd.costs.push_back(uni(0, 100));
      nd.usages.push_back(tight || v % 50 == 0 ? uni(1, 9) : 4);
    }
    nd.start = v;
    nd.end = v + uni(1, 5);
    p.nodes.push_back(nd);
  }
  auto edge = [&](int u, int v) {
    ProblemEdge e{u, v, {}};
    for (size_t a = 0; a < p.nodes[static_cast<size_t>(u)].costs.size(); ++a)
      for (size_t b = 0; b < p.nodes[static_cast<size_t>(v)].costs.size(); ++b) e.costs.push_back(uni(0, 50));
    p.edges.push_back(e);
  };
  for (int v = 1; v < n; ++v) edge(v % 7 == 0 ? v - 3 : v - 1, v);
  for (int v = 10; v < n; v += 10) edge(0, v);
  p.usage_limit = tight ? 30 : 26;
  return p;
}

inline std::string read_maybe_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return out;
}

/// Minimal IOPDDL loader: costs >= 1e17 are forbidden (+inf).
inline Problem load_iopddl(const std::string& path) {
  auto j = nlohmann::json::parse(read_maybe_gz(path))["problem"];
  auto cost = [](const nlohmann::json& x) {
    double d = x.get<double>();
    return d >= 1e17 ? kInfCost : d;
  };
  Problem p;
  if (j.contains("name")) p.name = j["name"].get<std::string>();
  const auto& nodes = j["nodes"];
  for (size_t i = 0; i < nodes["costs"].size(); ++i) {
    ProblemNode n;
    for (const auto& c : nodes["costs"][i]) n.costs.push_back(cost(c));
    for (const auto& u : nodes["usages"][i]) n.usages.push_back(u.get<int64_t>());
    n.start = nodes["intervals"][i][0].get<int64_t>();
    n.end = nodes["intervals"][i][1].get<int64_t>();
    p.nodes.push_back(std::move(n));
  }
  const auto& edges = j["edges"];
  for (size_t i = 0; i < edges["nodes"].size(); ++i) {
    ProblemEdge e;
    e.u = edges["nodes"][i][0].get<PNodeIdx>();
    e.v = edges["nodes"][i][1].get<PNodeIdx>();
    for (const auto& c : edges["costs"][i]) e.costs.push_back(cost(c));
    p.edges.push_back(std::move(e));
  }
  p.usage_limit = j.contains("usage_limit") ? j["usage_limit"].get<int64_t>() : -1;
  return p;
}

/// tests/fixtures: the IOPDDL problems the tests use are copied there from ../shared/iopddl so
/// that the tests travel with the repository.
inline std::string fixture_dir() { return std::string(AUTOSHARD_SOURCE_DIR) + "/tests/fixtures"; }

}  // namespace autoshard::testing

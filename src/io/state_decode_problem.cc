/// Reading side of io/state_codec.h for the built problem (see io/state_decoder.h): the
/// Problem proper, the edges with their origins, the node maps, the strategy lists and the
/// recomputation and op-communication tables, each checked against the graph and each other.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "io/state_decoder.h"
#include "planner/cp_memory.h"
#include "planner/recompute.h"

namespace autoshard {

namespace {

/// The nodes of the Problem proper: costs, usages and live intervals.
void decode_problem_nodes(const Decoder& d, const pb::Problem& xp, Problem& p) {
  const int N = xp.nodes_size();
  p.nodes.resize(static_cast<size_t>(N));
  int64_t usage_total = 0;
  for (int i = 0; i < N; ++i) {
    const pb::ProblemNode& xn = xp.nodes(i);
    auto where = [&] { return fmt::format("problem.problem.nodes[{}] ('{}')", i, xn.name()); };
    ProblemNode& n = p.nodes[static_cast<size_t>(i)];
    n.name = xn.name();
    if (xn.costs_size() == 0) d.fail(where(), "no strategies");
    if (xn.usages_size() != xn.costs_size()) d.fail(where(), fmt::format("{} costs but {} usages", xn.costs_size(), xn.usages_size()));
    n.costs.assign(xn.costs().begin(), xn.costs().end());
    n.usages.assign(xn.usages().begin(), xn.usages().end());
    int64_t most = 0;
    for (size_t k = 0; k < n.costs.size(); ++k) {
      if (std::isnan(n.costs[k])) d.fail(fmt::format("{}.costs[{}]", where(), k), "NaN cost");
      if (n.usages[k] < 0 || n.usages[k] > Decoder::kMaxUsage) d.fail(fmt::format("{}.usages[{}]", where(), k), fmt::format("usage {} out of range", n.usages[k]));
      most = std::max(most, n.usages[k]);
    }
    usage_total += most;
    if (usage_total > std::numeric_limits<int64_t>::max() / 4) d.fail(where(), "usages too large in total");
    n.start = xn.start();
    n.end = xn.end();
    if (n.start < 0 || n.end < n.start || n.end > Decoder::kMaxTime) d.fail(where(), fmt::format("bad interval [{}, {})", n.start, n.end));
  }
}

/// An edge (u, v) with a matrix of `size` costs must join two distinct nodes of p and fit them.
void check_edge(const Decoder& d, const Problem& p, int32_t u, int32_t v, size_t size, const std::string& where) {
  const int N = static_cast<int>(p.nodes.size());
  if (u < 0 || u >= N || v < 0 || v >= N) d.fail(where, fmt::format("endpoints ({}, {}) out of range (problem has {} nodes)", u, v, N));
  if (u == v) d.fail(where, fmt::format("self loop on node {}", u));
  size_t want = p.nodes[static_cast<size_t>(u)].costs.size() * p.nodes[static_cast<size_t>(v)].costs.size();
  if (size != want) d.fail(where, fmt::format("matrix of {} costs between nodes with {} and {} strategies", size,
                                              p.nodes[static_cast<size_t>(u)].costs.size(), p.nodes[static_cast<size_t>(v)].costs.size()));
}

/// The Problem proper's own edges (each with its matrix inline).
void decode_problem_edges(const Decoder& d, const pb::Problem& xp, Problem& p) {
  if (xp.edge_v_size() != xp.edge_u_size() || xp.edge_costs_size() != xp.edge_u_size())
    d.fail("problem.problem.edge_u", "edge columns of different lengths");
  for (int k = 0; k < xp.edge_u_size(); ++k) {
    check_edge(d, p, xp.edge_u(k), xp.edge_v(k), static_cast<size_t>(xp.edge_costs(k).costs_size()), fmt::format("problem.problem.edges[{}]", k));
    p.edges.push_back({xp.edge_u(k), xp.edge_v(k), std::vector<Cost>(xp.edge_costs(k).costs().begin(), xp.edge_costs(k).costs().end())});
  }
}

/// The built problem's edges: shared matrices, each edge naming one, and where each came from.
void decode_built_edges(const Decoder& d, const pb::BuiltProblem& x, const Graph& g, BuiltProblem& bp) {
  std::vector<std::shared_ptr<const std::vector<Cost>>> mats;
  mats.reserve(static_cast<size_t>(x.matrices_size()));
  for (int k = 0; k < x.matrices_size(); ++k) {
    const auto& c = x.matrices(k).costs();
    for (int j = 0; j < c.size(); ++j)
      if (std::isnan(c.Get(j))) d.fail(fmt::format("problem.matrices[{}][{}]", k, j), "NaN cost");
    mats.push_back(std::make_shared<const std::vector<Cost>>(c.begin(), c.end()));
  }
  const int E = x.edge_u_size();
  if (x.edge_v_size() != E || x.edge_matrix_size() != E || x.origin_consumer_size() != E || x.origin_slot_size() != E ||
      x.origin_producer_node_size() != E || x.origin_producer_output_size() != E)
    d.fail("problem.edge_u", "edge columns of different lengths");
  bp.edges.reserve(static_cast<size_t>(E));
  bp.edge_origin.reserve(static_cast<size_t>(E));
  for (int k = 0; k < E; ++k) {
    const uint32_t m = x.edge_matrix(k);
    if (m >= mats.size()) d.fail(fmt::format("problem.edge_matrix[{}]", k), fmt::format("matrix {} of {}", m, mats.size()));
    check_edge(d, bp.problem, x.edge_u(k), x.edge_v(k), mats[m]->size(), fmt::format("problem.edges[{}]", k));
    bp.edges.push_back({x.edge_u(k), x.edge_v(k), mats[m]});
    BuiltProblem::EdgeOrigin o{x.origin_consumer(k), x.origin_slot(k), {x.origin_producer_node(k), x.origin_producer_output(k)}};
    if (o.consumer < 0 || o.consumer >= g.size()) d.fail(fmt::format("problem.origin_consumer[{}]", k), fmt::format("node {} out of range", o.consumer));
    if (o.slot >= static_cast<int32_t>(g.node(o.consumer).inputs.size()))
      d.fail(fmt::format("problem.origin_slot[{}]", k), fmt::format("slot {} of '{}'", o.slot, g.node(o.consumer).name));
    if (o.producer.node != kNoNode &&
        (o.producer.node < 0 || o.producer.node >= g.size() || o.producer.output < 0 ||
         o.producer.output >= static_cast<int32_t>(g.node(o.producer.node).outputs.size())))
      d.fail(fmt::format("problem.origin_producer_node[{}]", k), fmt::format("bad tensor (node {}, output {})", o.producer.node, o.producer.output));
    bp.edge_origin.push_back(o);
  }
}

/// graph_node (problem node -> graph node) and pnode (back), each the inverse of the other.
void decode_node_maps(const Decoder& d, const pb::BuiltProblem& x, const Graph& g, BuiltProblem& bp) {
  const int N = bp.problem.num_nodes();
  if (x.graph_node_size() != N) d.fail("problem.graph_node", fmt::format("{} entries for {} problem nodes", x.graph_node_size(), N));
  if (x.pnode_size() != g.size()) d.fail("problem.pnode", fmt::format("{} entries for {} graph nodes", x.pnode_size(), g.size()));
  for (int v = 0; v < N; ++v) {
    NodeIdx gi = x.graph_node(v);
    if (gi < 0 || gi >= g.size()) d.fail(fmt::format("problem.graph_node[{}]", v), fmt::format("graph node {} out of range", gi));
    bp.graph_node.push_back(gi);
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    PNodeIdx v = x.pnode(i);
    if (v < -1 || v >= N || (v >= 0 && bp.graph_node[static_cast<size_t>(v)] != i))
      d.fail(fmt::format("problem.pnode[{}] ('{}')", i, g.node(i).name), fmt::format("problem node {} does not map back to it", v));
    if (v < 0 && g.node(i).kind != NodeKind::kOutput)
      d.fail(fmt::format("problem.pnode[{}] ('{}')", i, g.node(i).name), "only output nodes may be left out");
    bp.pnode.push_back(v);
  }
}

/// Each problem node's strategy list.  A list stored once is decoded once per distinct set of
/// tensor metas of the nodes using it (its specs default to the node's metas), and those nodes
/// share the decoded list in memory as a freshly built problem does: decoding it once per node
/// was most of the load time (llama3-8b 8x8: 9,675 nodes, a few hundred lists).
void decode_strategy_lists(const Decoder& d, const pb::BuiltProblem& x, const Graph& g, const Mesh& mesh,
                           BuiltProblem& bp) {
  const Problem& p = bp.problem;
  const int N = p.num_nodes();
  if (x.node_strategy_list_size() != N) d.fail("problem.node_strategy_list", fmt::format("{} entries for {} problem nodes", x.node_strategy_list_size(), N));
  bp.strategies.resize(static_cast<size_t>(N));
  struct Decoded {
    std::vector<TensorMeta> metas;
    StrategyList list;
  };
  std::vector<std::vector<Decoded>> decoded(static_cast<size_t>(x.strategy_lists_size()));
  std::vector<TensorMeta> metas;
  for (int v = 0; v < N; ++v) {
    uint32_t l = x.node_strategy_list(v);
    if (l >= static_cast<uint32_t>(x.strategy_lists_size())) d.fail(fmt::format("problem.node_strategy_list[{}]", v), fmt::format("list {} of {}", l, x.strategy_lists_size()));
    const NodeIdx gi = bp.graph_node[static_cast<size_t>(v)];
    metas.clear();
    if (gi >= 0 && gi < g.size()) {
      const Node& node = g.node(gi);
      metas.insert(metas.end(), node.outputs.begin(), node.outputs.end());
      for (const TensorRef& in : node.inputs) metas.push_back(g.meta(in));
    }
    std::vector<Decoded>& seen = decoded[l];
    auto hit = std::find_if(seen.begin(), seen.end(), [&](const Decoded& dd) { return dd.metas == metas; });
    const std::string where = fmt::format("problem.strategy_lists[{}] (problem node {})", l, v);
    if (hit == seen.end()) {
      seen.push_back({metas, d.strategies(x.strategy_lists(static_cast<int>(l)), g, gi, mesh.ndim(), where)});
      hit = seen.end() - 1;
    }
    if (hit->list.size() != p.nodes[static_cast<size_t>(v)].costs.size())
      d.fail(where, fmt::format("{} strategies but {} costs", hit->list.size(), p.nodes[static_cast<size_t>(v)].costs.size()));
    bp.strategies[static_cast<size_t>(v)] = hit->list;
  }
}

/// Strategies of problem node v.
size_t strategy_count(const BuiltProblem& bp, PNodeIdx v) { return bp.problem.nodes[static_cast<size_t>(v)].costs.size(); }

/// Recomputation regions: one mode per strategy of the region's decision node.
void decode_recompute_regions(const Decoder& d, const pb::BuiltProblem& x, const Graph& g, BuiltProblem& bp) {
  const int N = bp.problem.num_nodes();
  for (int k = 0; k < x.recompute_regions_size(); ++k) {
    const pb::RecomputeRegion& xr = x.recompute_regions(k);
    const std::string where = fmt::format("problem.recompute_regions[{}]", k);
    BuiltProblem::RecomputeRegion r;
    r.layer = xr.layer();
    r.region = xr.region();
    r.decision = xr.decision();
    r.first_op = xr.first_op();
    if (r.decision < 0 || r.decision >= N) d.fail(where + ".decision", fmt::format("problem node {} out of range", r.decision));
    if (r.first_op < 0 || r.first_op >= g.size()) d.fail(where + ".first_op", fmt::format("graph node {} out of range", r.first_op));
    for (int j = 0; j < xr.modes_size(); ++j) {
      if (xr.modes(j) > static_cast<uint32_t>(RecomputePolicy::kFull) &&
          xr.modes(j) != static_cast<uint32_t>(RecomputePolicy::kSelectiveOp))
        d.fail(fmt::format("{}.modes[{}]", where, j), fmt::format("unknown mode {}", xr.modes(j)));
      r.modes.push_back(static_cast<RecomputePolicy>(xr.modes(j)));
    }
    if (r.modes.size() != strategy_count(bp, r.decision))
      d.fail(where, fmt::format("{} modes but the decision node has {} strategies", r.modes.size(), strategy_count(bp, r.decision)));
    bp.recompute_regions.push_back(std::move(r));
  }
}

/// Per-strategy communication of the ops that carry their own (one value per strategy).
void decode_op_comm(const Decoder& d, const pb::BuiltProblem& x, BuiltProblem& bp) {
  const int N = bp.problem.num_nodes();
  for (int k = 0; k < x.op_comm_size(); ++k) {
    const pb::OpComm& xo = x.op_comm(k);
    const std::string where = fmt::format("problem.op_comm[{}]", k);
    if (xo.node() >= static_cast<uint32_t>(N)) d.fail(where, fmt::format("problem node {} out of range", xo.node()));
    if (static_cast<size_t>(xo.us_size()) != strategy_count(bp, static_cast<PNodeIdx>(xo.node())))
      d.fail(where, fmt::format("{} values for {} strategies", xo.us_size(), strategy_count(bp, static_cast<PNodeIdx>(xo.node()))));
    bp.set_op_comm(static_cast<PNodeIdx>(xo.node()),
                   std::make_shared<const std::vector<double>>(xo.us().begin(), xo.us().end()));
  }
}

/// The recomputation's auxiliary nodes, each tied to an owner node and a region.
void decode_recompute_aux(const Decoder& d, const pb::BuiltProblem& x, BuiltProblem& bp) {
  const int N = bp.problem.num_nodes();
  for (int k = 0; k < x.recompute_aux_size(); ++k) {
    const pb::RecomputeAux& xa = x.recompute_aux(k);
    const std::string where = fmt::format("problem.recompute_aux[{}]", k);
    BuiltProblem::RecomputeAux a;
    a.node = xa.node();
    a.owner = xa.owner();
    a.region = xa.region();
    if (xa.role() > static_cast<uint32_t>(BuiltProblem::RecomputeAux::kKeep)) d.fail(where + ".role", fmt::format("unknown role {}", xa.role()));
    a.role = static_cast<BuiltProblem::RecomputeAux::Role>(xa.role());
    if (a.node < 0 || a.node >= N || a.owner < 0 || a.owner >= N) d.fail(where, "problem node out of range");
    if (a.region < 0 || a.region >= static_cast<int32_t>(bp.recompute_regions.size())) d.fail(where + ".region", fmt::format("region {} out of range", a.region));
    // Every role has one strategy per (mode of its region, owner strategy): recompute.cc add_aux.
    const size_t want = bp.recompute_regions[static_cast<size_t>(a.region)].modes.size() * strategy_count(bp, a.owner);
    if (strategy_count(bp, a.node) != want) d.fail(where, fmt::format("{} strategies, expected {}", strategy_count(bp, a.node), want));
    bp.recompute_aux.push_back(a);
  }
}

}  // namespace

BuiltProblem Decoder::problem(const pb::BuiltProblem& x, const Graph& g, const Mesh& mesh) const {
  BuiltProblem bp;
  const pb::Problem& xp = x.problem();
  Problem& p = bp.problem;
  p.name = xp.name();
  p.usage_limit = xp.usage_limit();
  if (p.usage_limit < -1) fail("problem.problem.usage_limit", fmt::format("{} is not a limit", p.usage_limit));
  decode_problem_nodes(*this, xp, p);
  decode_problem_edges(*this, xp, p);
  decode_built_edges(*this, x, g, bp);
  decode_node_maps(*this, x, g, bp);
  decode_strategy_lists(*this, x, g, mesh, bp);
  for (int k = 0; k < x.fallback_ops_size(); ++k) bp.fallback_ops.push_back(x.fallback_ops(k));
  bp.memory_limit = x.memory_limit();
  if (bp.memory_limit < 0) fail("problem.memory_limit", "negative");
  bp.has_optimizer = x.has_optimizer();
  decode_recompute_regions(*this, x, g, bp);
  decode_op_comm(*this, x, bp);
  decode_recompute_aux(*this, x, bp);
  // Derived from the graph, as build_problem derives it (not stored).
  if (!bp.recompute_regions.empty()) bp.selective_saved = selective_saves(g);
  bp.cp_buffers = cp_buffers_from_edges(g, bp);
  return bp;
}

}  // namespace autoshard

#include "planner/problem_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "cost/compute.h"
#include "cost/memory.h"
#include "cost/redistribute.h"
#include "planner/cp_cost.h"
#include "planner/cp_memory.h"
#include "planner/edge_matrix_cache.h"
#include "planner/inflight_memory.h"
#include "planner/recipes.h"
#include "planner/recompute.h"
#include "planner/twin_views.h"
#include "strategy/shard_orders.h"

namespace autoshard {

namespace {

/// Everything a node's strategies, compute costs and usages depend on: kind, op, attributes,
/// output metas and input metas (not its name, phase or position).  Corresponding nodes of
/// repeated layers share one signature, so their strategies and costs are built once.
std::string node_signature(const Graph& g, const Node& x) {
  std::string k;
  auto put = [&k](int64_t v) { k.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto put_str = [&](std::string_view v) {
    put(static_cast<int64_t>(v.size()));
    k.append(v);
  };
  auto put_meta = [&](const TensorMeta& m) {
    put(static_cast<int64_t>(m.dtype));
    put(m.rank());
    for (int64_t d : m.shape) put(d);
  };
  put(static_cast<int64_t>(x.kind));
  put_str(x.op);
  put(static_cast<int64_t>(x.attrs.size()));
  for (const auto& [name, v] : x.attrs) {
    put_str(name);
    put(static_cast<int64_t>(v.index()));
    std::visit(
        [&](const auto& a) {
          using A = std::decay_t<decltype(a)>;
          if constexpr (std::is_same_v<A, std::string>) {
            put_str(a);
          } else if constexpr (std::is_same_v<A, std::vector<int64_t>>) {
            put(static_cast<int64_t>(a.size()));
            for (int64_t d : a) put(d);
          } else if constexpr (std::is_same_v<A, double>) {
            int64_t bits;
            std::memcpy(&bits, &a, sizeof bits);
            put(bits);
          } else {
            put(static_cast<int64_t>(a));
          }
        },
        v);
  }
  put(static_cast<int64_t>(x.outputs.size()));
  for (const TensorMeta& m : x.outputs) put_meta(m);
  put(static_cast<int64_t>(x.inputs.size()));
  for (const TensorRef& r : x.inputs) put_meta(g.meta(r));
  return k;
}

/// What build_problem derives from a node signature: its strategies (after filtering), their
/// compute costs and usages, and the interned spec lists of its outputs and inputs (filled on
/// first use by an edge).
struct NodeTemplate {
  StrategyList strategies;
  std::vector<Cost> costs;
  std::vector<int64_t> usages;
  std::shared_ptr<const std::vector<double>> op_comm;  ///< null: no op-internal communication
  bool fallback = false;
  std::vector<int32_t> output_list;  ///< per output: interned id, -1 until needed
  std::vector<int32_t> input_list;   ///< per input slot: interned id, -1 until needed
};

bool matches_pin(const Strategy& s, const Constraint& c) {
  if (s.outputs.empty() || s.outputs[0].placements != c.output) return false;
  if (c.inputs) {
    if (c.inputs->size() != s.inputs.size()) return false;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      if (s.inputs[i].placements != (*c.inputs)[i]) return false;
  }
  return true;
}

bool fully_replicated(const Strategy& s) {
  for (const auto& o : s.outputs)
    if (!o.is_replicated()) return false;
  for (const auto& i : s.inputs)
    if (!i.is_replicated()) return false;
  return true;
}

}  // namespace

/// PlannerOptions::optimizer_cost_scale: the optimizer ops' costs and the matrices of the edges
/// into them (and of grad agreements, slot -1) times `scale`; with `params_once`
/// (PlannerOptions::params_gathered_once) also the entries of the edges out of the parameters
/// that redistribute over the FSDP dims only (their tp placement kept): what FSDP gathers once
/// and keeps.  A redistribution over tp, or out of a view, runs at each use: priced once, a
/// whole-weight gather would look free.  Shared matrices are copied once.
static void scale_once_per_step(const Graph& g, const Mesh& mesh, double scale, bool params_once, BuiltProblem& bp) {
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const Node& x = g.node(bp.graph_node[static_cast<size_t>(v)]);
    if (x.kind == NodeKind::kOp && x.phase == Phase::kOptimizer)
      for (Cost& c : bp.problem.nodes[static_cast<size_t>(v)].costs) c *= scale;
  }
  const MeshDimIdx tp = tensor_parallel_dim(mesh);
  std::map<const std::vector<Cost>*, std::shared_ptr<const std::vector<Cost>>> scaled, gathers;
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& o = bp.edge_origin[k];
    auto& e = bp.edges[k];
    const bool once = o.slot == -1 || g.node(o.consumer).phase == Phase::kOptimizer;
    if (once) {
      auto [it, fresh] = scaled.try_emplace(e.costs.get());
      if (fresh) {
        std::vector<Cost> c = *e.costs;
        for (Cost& x : c) x *= scale;  // infinite (forbidden) pairs stay infinite
        it->second = std::make_shared<const std::vector<Cost>>(std::move(c));
      }
      e.costs = it->second;
    } else if (params_once && g.node(o.producer.node).kind == NodeKind::kParameter) {
      auto [it, fresh] = gathers.try_emplace(e.costs.get());
      if (fresh) {
        const StrategyList& su = bp.strategies[static_cast<size_t>(e.u)];
        const StrategyList& sv = bp.strategies[static_cast<size_t>(e.v)];
        std::vector<Cost> c = *e.costs;
        for (size_t i = 0; i < su.size(); ++i) {
          const ShardingSpec& have = su[i].outputs.at(static_cast<size_t>(o.producer.output));
          for (size_t j = 0; j < sv.size(); ++j) {
            const ShardingSpec& read = sv[j].inputs.at(static_cast<size_t>(o.slot));
            if (tp < 0 || have.placements[static_cast<size_t>(tp)] == read.placements[static_cast<size_t>(tp)])
              c[i * sv.size() + j] *= scale;
          }
        }
        it->second = std::make_shared<const std::vector<Cost>>(std::move(c));
      }
      e.costs = it->second;
    }
  }
}

namespace {

/// One build_problem call: its inputs, the problem so far and the tables its stages share
/// (nodes first, then the edges between them, then what is added on top).
struct ProblemBuild {
  const Graph& g;
  const Mesh& mesh;
  const PlannerOptions& opt;
  BuiltProblem& bp;
  Problem& prob;
  std::map<NodeIdx, std::vector<const Constraint*>> pins;  ///< pins by node
  std::vector<const Constraint*> param_memory;
  // ---- node stage
  StrategyOptions sopt, sopt_plain;
  std::vector<char> chain;  ///< per graph node: on a parameter's chain
  std::set<std::string> fallback;
  std::vector<char> alias;
  std::vector<std::pair<int64_t, int64_t>> intervals;
  int64_t total_strategies = 0;
  /// Unpinned nodes with equal signatures share one template (index per problem node, -1 for
  /// pinned ones, which are built on their own).
  std::unordered_map<std::string, int32_t> template_of_signature;
  std::vector<NodeTemplate> templates;
  std::vector<int32_t> template_of;  // per problem node
  // ---- edge stage
  EdgeMatrixCache cache;
  std::map<std::pair<PNodeIdx, int32_t>, int32_t> out_ids;

  ProblemBuild(const Graph& g_, const Mesh& mesh_, const PlannerOptions& opt_, BuiltProblem& bp_)
      : g(g_), mesh(mesh_), opt(opt_), bp(bp_), prob(bp_.problem), cache(mesh_, opt_.comm_model, opt_.overlap_discount) {}

  void collect_constraints(const std::vector<Constraint>& constraints);
  void prepare_nodes();
  void add_strategies(size_t n);
  void add_nodes();
  ProblemNode interval_node(NodeIdx i) const;
  void add_from_template(NodeIdx i, int32_t tmpl);
  std::vector<Strategy> kept_strategies(NodeIdx i, NodeStrategies& ns);
  void add_costed(NodeIdx i, std::vector<Strategy> kept, bool fallback_op, int32_t tmpl);
  void push_node(NodeIdx i, ProblemNode pn, StrategyList list, int32_t tmpl);
  int32_t interned(PNodeIdx p, int32_t k, bool output);
  int32_t out_id(PNodeIdx p, int32_t k);
  void add_edges();
  void add_use_edges(NodeIdx i, PNodeIdx v, std::set<NodeIdx>& optimizer_consumed);
  void add_grad_agreements(const std::set<NodeIdx>& optimizer_consumed);
  void add_output_costs();
  void add_parameter_memory(const Constraint& c, int64_t& t_extra);
  void add_shadows(const Constraint& c, int side, double scale, int64_t t_extra);
};

void ProblemBuild::collect_constraints(const std::vector<Constraint>& constraints) {
  for (const Constraint& c : constraints) {
    if (c.kind == Constraint::Kind::kParameterMemory) {
      param_memory.push_back(&c);
      continue;
    }
    auto idx = g.find(c.node);
    if (!idx)
      throw std::runtime_error(fmt::format("constraint '{}': no node named '{}'", c.name, c.node));
    pins[*idx].push_back(&c);
  }
}

/// Strategy options, parameter chains and live intervals: what every node's build reads.
void ProblemBuild::prepare_nodes() {
  sopt.require_divisible = opt.require_divisible;
  sopt.context_parallel = opt.context_parallel;
  sopt.shard_orders = opt.shard_orders;
  // The sequence split of context parallelism kept through the linear layers' views.
  if (opt.context_parallel) sopt.nested_view_dims = nested_view_dims(mesh);
  // Ordered variants on the parameters' chains only (strategy/shard_orders.h).
  chain = opt.shard_orders ? parameter_chain_nodes(g) : std::vector<char>(static_cast<size_t>(g.size()), 0);
  sopt_plain = sopt;
  sopt_plain.shard_orders = false;
  // Views alias their base only without recomputation (see live_intervals).
  const bool views_alias =
      opt.recompute == RecomputePolicy::kNone || opt.recompute == RecomputePolicy::kIfNeeded;
  alias = view_aliases(g, views_alias);
  intervals = live_intervals(g, alias);
}

/// Refuses a problem beyond kMaxStrategiesTotal at once instead of spending minutes and
/// gigabytes on it (4-D meshes: a matmul alone has thousands of strategies).
void ProblemBuild::add_strategies(size_t n) {
  total_strategies += static_cast<int64_t>(n);
  if (total_strategies > kMaxStrategiesTotal)
    throw std::runtime_error(fmt::format(
        "problem too large: more than {} sharding strategies over the graph's {} nodes on a {}-D "
        "mesh (use a mesh with fewer dims, e.g. fold two of {}, or pin nodes)",
        kMaxStrategiesTotal, g.size(), mesh.ndim(), mesh.describe()));
}

void ProblemBuild::add_nodes() {
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind == NodeKind::kOutput) continue;
    const bool pinned = pins.count(i) > 0;
    int32_t tmpl = -1;
    if (!pinned) {
      auto [it, inserted] = template_of_signature.try_emplace(
          node_signature(g, x) + (chain[static_cast<size_t>(i)] ? "|chain" : ""),
          static_cast<int32_t>(templates.size()));
      tmpl = it->second;
      if (!inserted) {
        add_from_template(i, tmpl);
        continue;
      }
    }
    NodeStrategies ns = enumerate_strategies(g, i, mesh, chain[static_cast<size_t>(i)] ? sopt : sopt_plain);
    if (ns.fallback) fallback.insert(x.op);
    add_costed(i, kept_strategies(i, ns), ns.fallback, tmpl);
  }
  bp.fallback_ops.assign(fallback.begin(), fallback.end());
}

ProblemNode ProblemBuild::interval_node(NodeIdx i) const {
  ProblemNode pn;
  pn.name = g.node(i).name;
  pn.start = intervals[static_cast<size_t>(i)].first;
  pn.end = intervals[static_cast<size_t>(i)].second;
  return pn;
}

/// A node whose signature was seen: the template's strategies, costs and usages.
void ProblemBuild::add_from_template(NodeIdx i, int32_t tmpl) {
  const NodeTemplate& t = templates[static_cast<size_t>(tmpl)];
  ProblemNode pn = interval_node(i);
  pn.costs = t.costs;
  pn.usages = t.usages;
  bp.set_op_comm(prob.num_nodes(), t.op_comm);
  if (t.fallback) fallback.insert(g.node(i).op);
  push_node(i, std::move(pn), t.strategies, tmpl);
}

/// The node's strategies that match its pins, within the per-node limit, without dominated
/// context-parallel kinds (and without fully replicated ones when asked and others remain).
std::vector<Strategy> ProblemBuild::kept_strategies(NodeIdx i, NodeStrategies& ns) {
  const Node& x = g.node(i);
  std::vector<Strategy> kept;
  kept.reserve(ns.strategies.size());
  for (Strategy& s : ns.strategies) {
    bool ok = true;
    if (auto it = pins.find(i); it != pins.end())
      for (const Constraint* c : it->second) ok = ok && matches_pin(s, *c);
    if (ok) kept.push_back(std::move(s));
  }
  if (kept.empty()) {
    std::string avail;
    for (const Strategy& s : ns.strategies)
      if (!s.outputs.empty()) avail += (avail.empty() ? "" : ", ") + s.outputs[0].to_string();
    throw std::runtime_error(fmt::format(
        "constraint '{}': node '{}' has no strategy with those placements (outputs available: "
        "{})",
        pins[i].front()->name, x.name, avail));
  }
  // Edge matrices are |S_u| x |S_v| doubles: past this many strategies one matrix would
  // need more than 512 MiB, which no real plan does (issue 14: a bound, not an OOM).
  if (kept.size() > kMaxStrategiesPerNode)
    throw std::runtime_error(fmt::format(
        "node '{}': {} sharding strategies on a {}-D mesh exceed the limit of {} (use a mesh "
        "with fewer dims or pin the node)",
        x.name, kept.size(), mesh.ndim(), kMaxStrategiesPerNode));
  drop_dominated_cp_kinds(x, kept, mesh, opt.comm_model);
  if (opt.skip_fully_replicated && kept.size() > 1) {
    std::vector<Strategy> sharded;
    for (Strategy& s : kept)
      if (!fully_replicated(s)) sharded.push_back(s);
    if (!sharded.empty()) kept = std::move(sharded);
  }
  return kept;
}

/// Costs and usages of each kept strategy; a template of them when the node has a signature.
void ProblemBuild::add_costed(NodeIdx i, std::vector<Strategy> kept, bool fallback_op, int32_t tmpl) {
  const Node& x = g.node(i);
  const bool param_state_on_params = !bp.has_optimizer;
  ProblemNode pn = interval_node(i);
  pn.costs.reserve(kept.size());
  pn.usages.reserve(kept.size());
  std::vector<double> op_comm;  // filled only when some strategy communicates inside the op
  for (const Strategy& s : kept) {
    const NodeCost nc = node_cost(x, s, mesh, opt.comm_model);
    const Cost c = nc.total_us();
    if (nc.op_comm_us > 0 && op_comm.empty()) op_comm.assign(pn.costs.size(), 0.0);
    if (!op_comm.empty()) op_comm.push_back(nc.op_comm_us);
    int64_t bytes = 0;
    if (x.kind == NodeKind::kParameter && param_state_on_params)
      bytes = parameter_state_bytes(s.outputs.at(0), mesh, opt.optimizer);
    else if (alias[static_cast<size_t>(i)])
      bytes = 0;  // a view: its base holds the bytes (live_intervals)
    else
      for (const ShardingSpec& o : s.outputs) bytes += o.local_bytes(mesh);
    pn.costs.push_back(c);
    pn.usages.push_back(bytes);
  }
  StrategyList list(std::move(kept));
  std::shared_ptr<const std::vector<double>> comm;
  if (!op_comm.empty()) comm = std::make_shared<const std::vector<double>>(std::move(op_comm));
  bp.set_op_comm(prob.num_nodes(), comm);
  if (tmpl >= 0) {
    NodeTemplate t;
    t.strategies = list;
    t.costs = pn.costs;
    t.usages = pn.usages;
    t.op_comm = comm;
    t.fallback = fallback_op;
    t.output_list.assign(x.outputs.size(), -1);
    t.input_list.assign(x.inputs.size(), -1);
    templates.push_back(std::move(t));
  }
  push_node(i, std::move(pn), std::move(list), tmpl);
}

void ProblemBuild::push_node(NodeIdx i, ProblemNode pn, StrategyList list, int32_t tmpl) {
  add_strategies(list.size());
  bp.pnode[static_cast<size_t>(i)] = prob.num_nodes();
  bp.graph_node.push_back(i);
  bp.strategies.push_back(std::move(list));
  prob.nodes.push_back(std::move(pn));
  template_of.push_back(tmpl);
}

/// Spec lists are interned once per template (nodes of one template have equal lists).
int32_t ProblemBuild::interned(PNodeIdx p, int32_t k, bool output) {
  const int32_t t = template_of[static_cast<size_t>(p)];
  int32_t* slot = nullptr;
  if (t >= 0) {
    NodeTemplate& nt = templates[static_cast<size_t>(t)];
    slot = &(output ? nt.output_list : nt.input_list).at(static_cast<size_t>(k));
    if (*slot >= 0) return *slot;
  }
  std::vector<ShardingSpec> v;
  for (const Strategy& s : bp.strategies[static_cast<size_t>(p)])
    v.push_back((output ? s.outputs : s.inputs).at(static_cast<size_t>(k)));
  const int32_t id = cache.intern(std::move(v));
  if (slot) *slot = id;
  return id;
}

int32_t ProblemBuild::out_id(PNodeIdx p, int32_t k) {
  auto [it, ins] = out_ids.try_emplace({p, k}, 0);
  if (ins) it->second = interned(p, k, true);
  return it->second;
}

/// Edges: one per tensor use (a twin view is tied to its twin instead).
void ProblemBuild::add_edges() {
  std::set<NodeIdx> optimizer_consumed;  // tensors read by an optimizer op
  const std::vector<PNodeIdx> twin = twin_views(g, bp.pnode, template_of);
  TwinTies twin_ties;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0) continue;
    if (const PNodeIdx a = twin[static_cast<size_t>(i)]; a >= 0) {
      bp.edges.push_back({a, v, twin_ties.diagonal(prob.nodes[static_cast<size_t>(v)].costs.size())});
      bp.edge_origin.push_back({i, kTwinSlot, x.inputs[0]});
      continue;
    }
    add_use_edges(i, v, optimizer_consumed);
  }
  add_grad_agreements(optimizer_consumed);
}

void ProblemBuild::add_use_edges(NodeIdx i, PNodeIdx v, std::set<NodeIdx>& optimizer_consumed) {
  const Node& x = g.node(i);
  for (int32_t s = 0; s < static_cast<int32_t>(x.inputs.size()); ++s) {
    const TensorRef& r = x.inputs[static_cast<size_t>(s)];
    PNodeIdx u = bp.pnode[static_cast<size_t>(r.node)];
    if (u < 0) continue;
    const Node& src = g.node(r.node);
    // Persistent state read by the optimizer update is stored in the layout it is updated in.
    bool strict = x.phase == Phase::kOptimizer &&
                  (src.kind == NodeKind::kParameter || src.kind == NodeKind::kBuffer);
    if (x.phase == Phase::kOptimizer) optimizer_consumed.insert(r.node);
    // --overlap: a parameter's redistribution can be prefetched behind compute.
    const bool prefetchable = opt.overlap && !strict && src.kind == NodeKind::kParameter;
    bp.edges.push_back(
        {u, v, cache.matrix(out_id(u, r.output), interned(v, s, false), strict, prefetchable)});
    bp.edge_origin.push_back({i, s, r});
  }
}

/// Gradients that no optimizer op consumes must still end up laid out like their parameter
/// (that is where DDP's all-reduce / FSDP's reduce-scatter is paid).
void ProblemBuild::add_grad_agreements(const std::set<NodeIdx>& optimizer_consumed) {
  for (const GradPair& gp : g.grad_pairs) {
    if (optimizer_consumed.count(gp.grad.node)) continue;
    PNodeIdx u = bp.pnode[static_cast<size_t>(gp.grad.node)];
    PNodeIdx v = bp.pnode[static_cast<size_t>(gp.param)];
    if (u < 0 || v < 0 || u == v) continue;
    std::vector<ShardingSpec> targets;
    for (const Strategy& s : bp.strategies[static_cast<size_t>(v)]) {
      ShardingSpec t = s.outputs.at(0);
      t.meta = g.meta(gp.grad);
      targets.push_back(std::move(t));
    }
    bp.edges.push_back(
        {u, v, cache.matrix(out_id(u, gp.grad.output), cache.intern(std::move(targets)), false)});
    bp.edge_origin.push_back({gp.param, -1, gp.grad});
  }
}

void ProblemBuild::add_output_costs() {
  for (const PlannerOptions::OutputCost& oc : opt.output_costs) {
    auto idx = g.find(oc.node);
    if (!idx || bp.pnode[static_cast<size_t>(*idx)] < 0)
      throw std::runtime_error(fmt::format("output cost: no node named '{}'", oc.node));
    const PNodeIdx v = bp.pnode[static_cast<size_t>(*idx)];
    auto& costs = prob.nodes[static_cast<size_t>(v)].costs;
    const StrategyList& strats = bp.strategies[static_cast<size_t>(v)];
    for (size_t q = 0; q < costs.size(); ++q)
      costs[q] += oc.latency_us + oc.us_per_byte * static_cast<double>(strats[q].outputs.at(static_cast<size_t>(oc.output)).local_bytes(mesh));
  }
}

/// Parameter memory constraint: Sum over parameters of local bytes in [low, high] x total.
/// Each becomes a "shadow" copy of every parameter node, tied to it by a zero-cost diagonal
/// edge, live only at a private time point past the schedule (t_extra, advanced per side),
/// whose usages are scaled so that the shared usage limit expresses the bound.
void ProblemBuild::add_parameter_memory(const Constraint& c, int64_t& t_extra) {
  if (c.low < 0 || c.high < c.low)
    throw std::runtime_error(fmt::format("constraint '{}': need 0 <= low <= high", c.name));
  double total = 0;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kParameter) total += static_cast<double>(g.node(i).out().bytes());
  if (total <= 0) return;
  if (prob.usage_limit < 0) {
    // No device limit: pick one no schedule point can reach, so only the shadows bind.
    int64_t sum = 0;
    for (const ProblemNode& pn : prob.nodes)
      sum += *std::max_element(pn.usages.begin(), pn.usages.end());
    prob.usage_limit = std::max<int64_t>(sum, 1) * 2;
  }
  const double L = static_cast<double>(prob.usage_limit);
  for (int side = 0; side < 2; ++side) {
    // side 0: Sum local <= high * total.  side 1: Sum (full - local) <= (1 - low) * total.
    double bound = side == 0 ? c.high * total : (1 - c.low) * total;
    if (side == 0 && c.high >= 1) continue;
    if (side == 1 && c.low <= 0) continue;
    double scale = bound > 0 ? L / bound : L * 2;  // bound 0: any positive usage overflows
    add_shadows(c, side, scale, t_extra);
    ++t_extra;
  }
}

/// One side's shadow of every parameter node, live at [t_extra, t_extra + 1).
void ProblemBuild::add_shadows(const Constraint& c, int side, double scale, int64_t t_extra) {
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (g.node(i).kind != NodeKind::kParameter) continue;
    PNodeIdx p = bp.pnode[static_cast<size_t>(i)];
    const auto& strats = bp.strategies[static_cast<size_t>(p)];
    ProblemNode shadow;
    shadow.name = fmt::format("{}#{}", g.node(i).name, c.name);
    shadow.start = t_extra;
    shadow.end = t_extra + 1;
    double full = static_cast<double>(g.node(i).out().bytes());
    for (const Strategy& s : strats) {
      double local = static_cast<double>(s.outputs.at(0).local_bytes(mesh));
      double amount = side == 0 ? local : full - local;
      shadow.costs.push_back(0);
      shadow.usages.push_back(static_cast<int64_t>(std::floor(amount * scale)));
    }
    PNodeIdx sp = prob.num_nodes();
    prob.nodes.push_back(std::move(shadow));
    bp.graph_node.push_back(i);
    // `strats` refers into bp.strategies: take its size before push_back may reallocate.
    const size_t k = strats.size();
    StrategyList copy = strats;  // shared, not copied
    bp.strategies.push_back(std::move(copy));
    std::vector<Cost> tie(k * k, kInfCost);
    for (size_t a = 0; a < k; ++a) tie[a * k + a] = 0;
    bp.edges.push_back({p, sp, std::make_shared<const std::vector<Cost>>(std::move(tie))});
    bp.edge_origin.push_back({i, kMemoryTieSlot, TensorRef{i, 0}});
  }
}

}  // namespace

BuiltProblem build_problem(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const std::vector<Constraint>& constraints) {
  BuiltProblem bp;
  Problem& prob = bp.problem;
  prob.name = g.name;
  bp.pnode.assign(static_cast<size_t>(g.size()), -1);
  for (const Node& x : g.nodes)
    if (x.phase == Phase::kOptimizer && x.kind == NodeKind::kOp) bp.has_optimizer = true;
  ProblemBuild b(g, mesh, opt, bp);
  b.collect_constraints(constraints);
  b.prepare_nodes();
  b.add_nodes();
  b.add_edges();
  if (opt.optimizer_cost_scale != 1.0)
    scale_once_per_step(g, mesh, opt.optimizer_cost_scale, opt.params_gathered_once, bp);
  if (opt.params_gathered_once) add_gathered_usages(g, mesh, bp);
  b.add_output_costs();
  add_recomputation(g, opt, bp);
  if (opt.inflight_microbatches != 1.0) scale_inflight_usages(g, opt.inflight_microbatches, bp);
  // Transient, so never scaled by the microbatches in flight: one op runs at a time.
  add_cp_buffer_nodes(g, mesh, bp);
  if (opt.boundary_memory_price > 0) price_boundary_usage(g, mesh, opt.boundary_memory_price, bp);

  // Memory limit.
  int64_t limit = opt.memory_limit_bytes < 0 ? mesh.hardware().memory_bytes
                                             : opt.memory_limit_bytes;
  bp.memory_limit = limit;
  prob.usage_limit = limit > 0 ? limit : -1;
  int64_t t_extra = g.size() + 1;
  for (const Constraint* c : b.param_memory) b.add_parameter_memory(*c, t_extra);
  return bp;
}

Problem materialize_edges(const BuiltProblem& bp) {
  Problem p = bp.problem;
  p.edges.reserve(bp.edges.size());
  for (const BuiltProblem::Edge& e : bp.edges) p.edges.push_back({e.u, e.v, *e.costs});
  return p;
}

Cost evaluate_cost(const BuiltProblem& bp, const std::vector<StrategyIdx>& choice) {
  Cost total = 0;
  for (PNodeIdx i = 0; i < bp.problem.num_nodes(); ++i)
    total += bp.problem.nodes[static_cast<size_t>(i)].costs[static_cast<size_t>(choice[static_cast<size_t>(i)])];
  for (const BuiltProblem::Edge& e : bp.edges) {
    size_t nv = bp.problem.nodes[static_cast<size_t>(e.v)].costs.size();
    total += (*e.costs)[static_cast<size_t>(choice[static_cast<size_t>(e.u)]) * nv +
                        static_cast<size_t>(choice[static_cast<size_t>(e.v)])];
  }
  return total;
}

}  // namespace autoshard

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
#include "planner/inflight_memory.h"
#include "planner/recipes.h"
#include "planner/recompute.h"
#include "planner/twin_views.h"
#include "strategy/shard_orders.h"

namespace autoshard {

std::vector<char> view_aliases(const Graph& g, bool views_alias) {
  std::vector<char> alias(static_cast<size_t>(g.size()), 0);
  std::vector<NodeIdx> base(static_cast<size_t>(g.size()));
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    base[static_cast<size_t>(i)] = i;
    if (x.kind != NodeKind::kOp || !is_alias_op(x.op) || x.inputs.empty()) continue;
    const NodeIdx b = base[static_cast<size_t>(x.inputs[0].node)];
    const NodeKind k = g.node(b).kind;
    if (views_alias || k == NodeKind::kParameter || k == NodeKind::kBuffer) {
      alias[static_cast<size_t>(i)] = 1;
      base[static_cast<size_t>(i)] = b;
    }
  }
  return alias;
}

std::vector<std::pair<int64_t, int64_t>> live_intervals(const Graph& g, bool views_alias) {
  return live_intervals(g, view_aliases(g, views_alias));
}

std::vector<std::pair<int64_t, int64_t>> live_intervals(const Graph& g, const std::vector<char>& alias) {
  const int64_t n = g.size();
  std::vector<std::pair<int64_t, int64_t>> iv(static_cast<size_t>(n));
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    // Parameters, buffers (optimizer state) persist across steps: live for the whole step.
    if (x.kind == NodeKind::kParameter || x.kind == NodeKind::kBuffer)
      iv[static_cast<size_t>(i)] = {0, n};
    else
      iv[static_cast<size_t>(i)] = {i, i + 1};
  }
  // A view keeps the storage it aliases alive: each use of a view extends its base tensor
  // (the first input of the chain of views), and the view itself holds no bytes.
  std::vector<NodeIdx> base(static_cast<size_t>(n));
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    base[static_cast<size_t>(i)] = i;
    if (alias[static_cast<size_t>(i)]) base[static_cast<size_t>(i)] = base[static_cast<size_t>(x.inputs[0].node)];
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    // Uses by the graph's output node do not extend liveness: the outputs are the loss and the
    // gradients, whose memory is accounted with the parameter state.
    if (x.kind == NodeKind::kOutput) continue;
    for (const TensorRef& r : x.inputs) {
      for (NodeIdx t : {r.node, base[static_cast<size_t>(r.node)]}) {
        auto& [s, e] = iv[static_cast<size_t>(t)];
        e = std::max<int64_t>(e, i + 1);
      }
    }
  }
  return iv;
}

namespace {

/// Interns lists of sharding specs so that identical edge matrices (repeated layers have the
/// same shapes and strategies) are computed once.
struct SpecListHash {
  size_t operator()(const std::vector<ShardingSpec>& v) const {
    size_t h = v.size();
    auto mix = [&h](uint64_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    for (const ShardingSpec& s : v) {
      for (const Placement& p : s.placements)
        mix(static_cast<uint64_t>(p.kind) * 131 + static_cast<uint64_t>(p.dim) * 7 +
            static_cast<uint64_t>(p.reduce));
      for (int64_t d : s.meta.shape) mix(static_cast<uint64_t>(d));
      mix(static_cast<uint64_t>(s.meta.dtype));
    }
    return h;
  }
};

class EdgeMatrixCache {
 public:
  EdgeMatrixCache(const Mesh& mesh, CommModel model, double discount = 1)
      : mesh_(mesh), model_(model), discount_(discount) {}

  int32_t intern(std::vector<ShardingSpec> specs) {
    auto [it, inserted] = ids_.try_emplace(std::move(specs), static_cast<int32_t>(lists_.size()));
    if (inserted) lists_.push_back(&it->first);
    return it->second;
  }

  /// Row-major |from| x |to| matrix of redistribution times; `strict` forbids any change.
  /// `discounted`: times scaled by the discount (PlannerOptions::overlap).
  std::shared_ptr<const std::vector<Cost>> matrix(int32_t from, int32_t to, bool strict,
                                                  bool discounted = false) {
    uint64_t key = (static_cast<uint64_t>(from) << 34) | (static_cast<uint64_t>(to) << 2) |
                   (discounted ? 2u : 0u) |
                   (strict ? 1u : 0u);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const auto& a = *lists_[static_cast<size_t>(from)];
    const auto& b = *lists_[static_cast<size_t>(to)];
    // Many strategies of a node share one output (or input) spec: each distinct pair of specs
    // is costed once (on 3-D meshes this was most of the problem build).
    std::vector<size_t> ua, ub;
    const std::vector<size_t> ia = distinct(a, ua), ib = distinct(b, ub);
    std::vector<Cost> u(ua.size() * ub.size());
    for (size_t x = 0; x < ua.size(); ++x)
      for (size_t y = 0; y < ub.size(); ++y) {
        const ShardingSpec& f = a[ua[x]];
        const ShardingSpec& t = b[ub[y]];
        u[x * ub.size() + y] = strict ? (f.placements == t.placements ? 0.0 : kInfCost)
                                      : redistribute_cost_us(f, t, mesh_, model_) *
                                            (discounted ? discount_ : 1.0);
      }
    std::vector<Cost> m(a.size() * b.size());
    for (size_t p = 0; p < a.size(); ++p)
      for (size_t q = 0; q < b.size(); ++q) m[p * b.size() + q] = u[ia[p] * ub.size() + ib[q]];
    auto shared = std::make_shared<const std::vector<Cost>>(std::move(m));
    cache_.emplace(key, shared);
    return shared;
  }

 private:
  /// Index of each spec among the distinct ones, which `first` receives (first positions).
  static std::vector<size_t> distinct(const std::vector<ShardingSpec>& v, std::vector<size_t>& first) {
    std::vector<size_t> idx(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      size_t k = 0;
      while (k < first.size() && !(v[first[k]] == v[i])) ++k;
      if (k == first.size()) first.push_back(i);
      idx[i] = k;
    }
    return idx;
  }

  const Mesh& mesh_;
  CommModel model_;
  double discount_ = 1;
  std::unordered_map<std::vector<ShardingSpec>, int32_t, SpecListHash> ids_;
  std::vector<const std::vector<ShardingSpec>*> lists_;
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<Cost>>> cache_;
};

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

BuiltProblem build_problem(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const std::vector<Constraint>& constraints) {
  BuiltProblem bp;
  Problem& prob = bp.problem;
  prob.name = g.name;
  bp.pnode.assign(static_cast<size_t>(g.size()), -1);
  for (const Node& x : g.nodes)
    if (x.phase == Phase::kOptimizer && x.kind == NodeKind::kOp) bp.has_optimizer = true;

  // Pins by node.
  std::map<NodeIdx, std::vector<const Constraint*>> pins;
  std::vector<const Constraint*> param_memory;
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

  // Strategies per node.
  StrategyOptions sopt;
  sopt.require_divisible = opt.require_divisible;
  sopt.context_parallel = opt.context_parallel;
  sopt.shard_orders = opt.shard_orders;
  // Ordered variants on the parameters' chains only (strategy/shard_orders.h).
  const std::vector<char> chain =
      opt.shard_orders ? parameter_chain_nodes(g) : std::vector<char>(static_cast<size_t>(g.size()), 0);
  StrategyOptions sopt_plain = sopt;
  sopt_plain.shard_orders = false;
  std::set<std::string> fallback;
  // Views alias their base only without recomputation (see live_intervals).
  const bool views_alias =
      opt.recompute == RecomputePolicy::kNone || opt.recompute == RecomputePolicy::kIfNeeded;
  const std::vector<char> alias = view_aliases(g, views_alias);
  const auto intervals = live_intervals(g, alias);
  const bool param_state_on_params = !bp.has_optimizer;
  // Refuse a problem beyond kMaxStrategiesTotal at once instead of spending minutes and
  // gigabytes on it (4-D meshes: a matmul alone has thousands of strategies).
  int64_t total_strategies = 0;
  auto add_strategies = [&](size_t n) {
    total_strategies += static_cast<int64_t>(n);
    if (total_strategies > kMaxStrategiesTotal)
      throw std::runtime_error(fmt::format(
          "problem too large: more than {} sharding strategies over the graph's {} nodes on a {}-D "
          "mesh (use a mesh with fewer dims, e.g. fold two of {}, or pin nodes)",
          kMaxStrategiesTotal, g.size(), mesh.ndim(), mesh.describe()));
  };
  // Unpinned nodes with equal signatures share one template (index per problem node, -1 for
  // pinned ones, which are built on their own).
  std::unordered_map<std::string, int32_t> template_of_signature;
  std::vector<NodeTemplate> templates;
  std::vector<int32_t> template_of;  // per problem node
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
        const NodeTemplate& t = templates[static_cast<size_t>(tmpl)];
        ProblemNode pn;
        pn.name = x.name;
        pn.start = intervals[static_cast<size_t>(i)].first;
        pn.end = intervals[static_cast<size_t>(i)].second;
        pn.costs = t.costs;
        pn.usages = t.usages;
        bp.set_op_comm(prob.num_nodes(), t.op_comm);
        if (t.fallback) fallback.insert(x.op);
        add_strategies(t.strategies.size());
        bp.pnode[static_cast<size_t>(i)] = prob.num_nodes();
        bp.graph_node.push_back(i);
        bp.strategies.push_back(t.strategies);
        prob.nodes.push_back(std::move(pn));
        template_of.push_back(tmpl);
        continue;
      }
    }
    NodeStrategies ns = enumerate_strategies(g, i, mesh, chain[static_cast<size_t>(i)] ? sopt : sopt_plain);
    if (ns.fallback) fallback.insert(x.op);
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
    ProblemNode pn;
    pn.name = x.name;
    pn.start = intervals[static_cast<size_t>(i)].first;
    pn.end = intervals[static_cast<size_t>(i)].second;
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
      t.fallback = ns.fallback;
      t.output_list.assign(x.outputs.size(), -1);
      t.input_list.assign(x.inputs.size(), -1);
      templates.push_back(std::move(t));
    }
    add_strategies(list.size());
    bp.pnode[static_cast<size_t>(i)] = prob.num_nodes();
    bp.graph_node.push_back(i);
    bp.strategies.push_back(std::move(list));
    prob.nodes.push_back(std::move(pn));
    template_of.push_back(tmpl);
  }
  bp.fallback_ops.assign(fallback.begin(), fallback.end());

  // Edges: one per tensor use.
  EdgeMatrixCache cache(mesh, opt.comm_model, opt.overlap_discount);
  // Spec lists are interned once per template (nodes of one template have equal lists).
  auto interned = [&](PNodeIdx p, int32_t k, bool output) {
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
  };
  auto output_list = [&](PNodeIdx p, int32_t k) { return interned(p, k, true); };
  auto input_list = [&](PNodeIdx p, int32_t slot) { return interned(p, slot, false); };
  std::map<std::pair<PNodeIdx, int32_t>, int32_t> out_ids;
  auto out_id = [&](PNodeIdx p, int32_t k) {
    auto [it, ins] = out_ids.try_emplace({p, k}, 0);
    if (ins) it->second = output_list(p, k);
    return it->second;
  };
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
          {u, v, cache.matrix(out_id(u, r.output), input_list(v, s), strict, prefetchable)});
      bp.edge_origin.push_back({i, s, r});
    }
  }
  // Gradients that no optimizer op consumes must still end up laid out like their parameter
  // (that is where DDP's all-reduce / FSDP's reduce-scatter is paid).
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
  if (opt.optimizer_cost_scale != 1.0)
    scale_once_per_step(g, mesh, opt.optimizer_cost_scale, opt.params_gathered_once, bp);
  if (opt.params_gathered_once) add_gathered_usages(g, mesh, bp);
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

  // Parameter memory constraints: Sum over parameters of local bytes in [low, high] x total.
  // Each becomes a "shadow" copy of every parameter node, tied to it by a zero-cost diagonal
  // edge, live only at a private time point past the schedule, whose usages are scaled so that
  // the shared usage limit expresses the bound.
  int64_t t_extra = g.size() + 1;
  for (const Constraint* c : param_memory) {
    if (c->low < 0 || c->high < c->low)
      throw std::runtime_error(fmt::format("constraint '{}': need 0 <= low <= high", c->name));
    double total = 0;
    for (NodeIdx i = 0; i < g.size(); ++i)
      if (g.node(i).kind == NodeKind::kParameter) total += static_cast<double>(g.node(i).out().bytes());
    if (total <= 0) continue;
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
      double bound = side == 0 ? c->high * total : (1 - c->low) * total;
      if (side == 0 && c->high >= 1) continue;
      if (side == 1 && c->low <= 0) continue;
      double scale = bound > 0 ? L / bound : L * 2;  // bound 0: any positive usage overflows
      for (NodeIdx i = 0; i < g.size(); ++i) {
        if (g.node(i).kind != NodeKind::kParameter) continue;
        PNodeIdx p = bp.pnode[static_cast<size_t>(i)];
        const auto& strats = bp.strategies[static_cast<size_t>(p)];
        ProblemNode shadow;
        shadow.name = fmt::format("{}#{}", g.node(i).name, c->name);
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
      ++t_extra;
    }
  }
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

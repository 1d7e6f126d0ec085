#include "strategy/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "strategy/moe_rules.h"
#include "strategy/rule.h"
#include "strategy/shard_orders.h"

namespace autoshard {

std::string Strategy::name() const {
  std::string s;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i) s += ", ";
    s += outputs[i].to_string();
  }
  if (!inputs.empty()) {
    s += outputs.empty() ? "<- " : " <- ";
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i) s += ", ";
      s += inputs[i].to_string();
    }
  }
  if (cp.active())
    s += fmt::format(" | cp:{}@{}{}", cp_kind_name(cp.kind), cp.mesh_dim, cp.load_balance ? " lb" : "");
  return s;
}

OpName parse_op_name(std::string_view op) {
  for (std::string_view prefix : {"torch.ops.aten.", "aten::", "aten."})
    if (op.starts_with(prefix)) {
      op.remove_prefix(prefix.size());
      break;
    }
  OpName r;
  size_t dot = op.find('.');
  r.base = std::string(op.substr(0, dot));
  if (dot != std::string_view::npos) r.overload = std::string(op.substr(dot + 1));
  if (r.overload == "default") r.overload.clear();
  // "add_" / "_fused_adam_" are in-place; "_to_copy" and "__and__" are not.
  if (r.base.size() > 1 && r.base.back() == '_' && r.base[r.base.size() - 2] != '_') {
    r.base.pop_back();
    r.inplace = true;
  }
  return r;
}

int32_t OpContext::norm_dim(int64_t d, int64_t rank) const {
  int64_t r = rank == 0 ? 1 : rank;  // a 0-d tensor accepts dim 0 / -1
  if (d < -r || d >= r) fail(fmt::format("dim {} out of range for rank {}", d, rank));
  return static_cast<int32_t>(d < 0 ? d + r : d);
}

int32_t OpContext::dim_attr(std::string_view key, int64_t fallback, int64_t rank) const {
  return norm_dim(node.attr_int(key, fallback), rank);
}

void OpContext::fail(std::string_view why) const {
  throw std::invalid_argument(fmt::format("node '{}' ({}): {}", node.name, node.op, why));
}

Placement map_broadcast(const Placement& p, const TensorMeta& out, const TensorMeta& in) {
  if (!p.is_shard()) return p;
  int64_t d = p.dim - (out.rank() - in.rank());
  if (d < 0 || d >= in.rank()) return Placement::replicate();
  if (in.shape[static_cast<size_t>(d)] == 1 && out.shape[static_cast<size_t>(p.dim)] != 1)
    return Placement::replicate();
  return Placement::shard(static_cast<int32_t>(d));
}

Placement shard_if(const TensorMeta& m, int32_t d) {
  if (d < 0 || d >= m.rank() || m.shape[static_cast<size_t>(d)] <= 1) return Placement::replicate();
  return Placement::shard(d);
}

int64_t shards_of(const std::vector<Placement>& p, int32_t d, const Mesh& mesh) {
  int64_t n = 1;
  for (size_t m = 0; m < p.size(); ++m)
    if (p[m].is_shard(d)) n *= mesh.size(static_cast<MeshDimIdx>(m));
  return n;
}

std::vector<Row> replicate_or_shard_rows(const TensorMeta& m) {
  std::vector<Row> rows{{Placement::replicate()}};
  for (int32_t d = 0; d < m.rank(); ++d) rows.push_back({Placement::shard(d)});
  return rows;
}

void register_placeholder_rules(RuleTable& t) {
  // Creation ops without tensor inputs behave like placeholders: any R / S(d) layout can be
  // materialized locally.  With tensor inputs (e.g. full.out) they fall back to replication.
  auto creation = [](const OpContext& c) {
    RuleResult r;
    if (c.n_in() != 0 || c.n_out() != 1) {
      r.rows.push_back(c.replicated());
      return r;
    }
    r.rows = replicate_or_shard_rows(c.out(0));
    return r;
  };
  for (const char* op : {"arange", "zeros", "ones", "full", "empty", "empty_strided",
                         "scalar_tensor", "rand", "randn", "randint"})
    t[op] = creation;
}

namespace {

const RuleTable& rule_table() {
  static const RuleTable table = [] {
    RuleTable t;
    register_placeholder_rules(t);
    register_einsum_rules(t);
    register_pointwise_rules(t);
    register_reduction_rules(t);
    register_norm_rules(t);
    register_view_rules(t);
    register_nn_rules(t);
    register_attention_rules(t);
    register_index_rules(t);
    register_moe_rules(t);
    register_complex_rules(t);
    return t;
  }();
  return table;
}

const RuleFn* find_rule(const OpName& name) {
  const RuleTable& t = rule_table();
  std::string base = name.base;
  if (name.inplace) {
    // An in-place op registered under its own name ("copy_") wins over the base name.
    if (auto it = t.find(base + "_"); it != t.end()) return &it->second;
  }
  if (!name.overload.empty())
    if (auto it = t.find(base + "." + name.overload); it != t.end()) return &it->second;
  if (auto it = t.find(base); it != t.end()) return &it->second;
  return nullptr;
}

ShardingSpec spec(std::vector<Placement> p, const TensorMeta& m) { return {std::move(p), m}; }

/// All-replicated strategy for a node (its outputs and inputs).
Strategy replicated_strategy(const Graph& g, const Node& node, const Mesh& mesh) {
  Strategy s;
  std::vector<Placement> r(static_cast<size_t>(mesh.ndim()), Placement::replicate());
  for (const auto& m : node.outputs) s.outputs.push_back(spec(r, m));
  for (const auto& ref : node.inputs) s.inputs.push_back(spec(r, g.meta(ref)));
  return s;
}

/// Marks `s` context parallel when the combination `idx` (a row per mesh dim) uses a CP row;
/// false (rejected) when it uses CP rows on more than one mesh dim: one sequence split is what
/// the ring / all-gather cost model and the runtime's context_parallel know.
bool set_cp(const RuleResult& rr, const std::vector<size_t>& idx, Strategy& s) {
  for (size_t m = 0; m < idx.size(); ++m) {
    const std::optional<CpKind>& k = rr.row_cp.at(idx[m]);
    if (!k) continue;
    if (s.cp.active()) return false;
    s.cp = ContextParallel{static_cast<int32_t>(m), *k, rr.cp_load_balance};
  }
  return true;
}

/// The Cartesian product of `rows` over the mesh dims, deduplicated and checked.
std::vector<Strategy> expand(const OpContext& c, const RuleResult& rr) {
  const size_t width = c.n_out() + c.n_in();
  for (const Row& row : rr.rows)
    if (row.size() != width)
      c.fail(fmt::format("internal: rule row has {} placements, expected {}", row.size(), width));
  const int32_t nd = c.mesh.ndim();
  std::vector<Strategy> out;
  if (rr.rows.empty()) return out;
  // rows^nd candidates: bounded before enumerating, so a mesh with many dims costs a clear
  // error instead of minutes and gigabytes (issue 14).
  uint64_t combos = 1;
  for (int32_t m = 0; m < nd; ++m) {
    combos *= rr.rows.size();
    if (combos > kMaxCandidateStrategies)
      c.fail(fmt::format("{} candidate strategies per mesh dim on a {}-D mesh exceed the limit of "
                         "{} combinations (use a mesh with fewer dims)",
                         rr.rows.size(), nd, kMaxCandidateStrategies));
  }
  std::set<std::string> seen;
  std::vector<size_t> idx(static_cast<size_t>(nd), 0);
  while (true) {
    Combo combo(width, std::vector<Placement>(static_cast<size_t>(nd)));
    for (int32_t m = 0; m < nd; ++m)
      for (size_t t = 0; t < width; ++t)
        combo[t][static_cast<size_t>(m)] = rr.rows[idx[static_cast<size_t>(m)]][t];
    Strategy s;
    bool ok = true;
    for (size_t t = 0; t < width && ok; ++t) {
      const TensorMeta& meta = t < c.n_out() ? c.out(t) : c.in[t - c.n_out()];
      // Empty tensors (absent outputs such as a masked-off grad_bias, shape [0]) hold nothing:
      // they are replicated whatever the row says.
      if (meta.numel() == 0)
        std::fill(combo[t].begin(), combo[t].end(), Placement::replicate());
      ShardingSpec sp = spec(combo[t], meta);
      ok = sp.valid(c.mesh, c.opt.require_divisible);
      (t < c.n_out() ? s.outputs : s.inputs).push_back(std::move(sp));
    }
    if (ok && rr.accept) ok = rr.accept(combo);
    if (ok && !rr.row_cp.empty()) ok = set_cp(rr, idx, s);
    if (ok && seen.insert(s.name()).second) out.push_back(std::move(s));
    // Next index, last mesh dim fastest (itertools.product order).
    int32_t m = nd - 1;
    while (m >= 0 && ++idx[static_cast<size_t>(m)] == rr.rows.size()) idx[static_cast<size_t>(m--)] = 0;
    if (m < 0) break;
  }
  return out;
}

}  // namespace

std::vector<std::string> covered_ops() {
  std::vector<std::string> r;
  for (const auto& [k, v] : rule_table()) r.push_back(k);
  return r;
}

bool has_rule(std::string_view op) { return find_rule(parse_op_name(op)) != nullptr; }

NodeStrategies enumerate_strategies(const Graph& g, NodeIdx n, const Mesh& mesh,
                                    const StrategyOptions& opt) {
  const Node& node = g.node(n);
  NodeStrategies ns;
  OpContext c{g, node, mesh, opt, parse_op_name(node.op), {}};
  for (const auto& ref : node.inputs) c.in.push_back(g.meta(ref));

  switch (node.kind) {
    case NodeKind::kOutput:
      ns.strategies.push_back(replicated_strategy(g, node, mesh));
      ns.any_input = true;
      return ns;
    case NodeKind::kInput:
    case NodeKind::kParameter:
    case NodeKind::kBuffer: {
      // Every combination of R / S(d) per mesh dim; no Partial for real data.
      RuleResult rr;
      if (node.outputs.size() == 1 && node.inputs.empty()) {
        rr.rows = replicate_or_shard_rows(node.out(0));
      } else {
        rr.rows.push_back(c.replicated());
      }
      ns.strategies = expand(c, rr);
      if (opt.shard_orders && keeps_layout(g, node))
        add_shard_order_variants(mesh, opt.require_divisible, ns.strategies);
      return ns;
    }
    case NodeKind::kOp: break;
  }

  const RuleFn* rule = find_rule(c.op);
  if (rule == nullptr) {
    ns.strategies.push_back(replicated_strategy(g, node, mesh));
    ns.fallback = true;
    return ns;
  }
  try {
    RuleResult rr = (*rule)(c);
    ns.strategies = expand(c, rr);
  } catch (const std::invalid_argument&) {
    throw;  // already names the node
  } catch (const std::out_of_range& e) {
    c.fail(fmt::format("unexpected tensors or attrs ({})", e.what()));
  }
  if (ns.strategies.empty()) ns.strategies.push_back(replicated_strategy(g, node, mesh));
  if (opt.shard_orders && keeps_layout(g, node))
    add_shard_order_variants(mesh, opt.require_divisible, ns.strategies);
  return ns;
}

}  // namespace autoshard

#include "planner/recompute.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

namespace autoshard {

std::string_view recompute_policy_name(RecomputePolicy p) {
  switch (p) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kSelectiveOp: return "selective-op";
    case RecomputePolicy::kFull: return "full";
    case RecomputePolicy::kAuto: return "auto";
    case RecomputePolicy::kIfNeeded: return "if-needed";
  }
  return "?";
}

std::optional<RecomputePolicy> parse_recompute_policy(std::string_view s) {
  if (s == "none") return RecomputePolicy::kNone;
  if (s == "selective") return RecomputePolicy::kSelective;
  if (s == "selective-op") return RecomputePolicy::kSelectiveOp;
  if (s == "full") return RecomputePolicy::kFull;
  if (s == "auto") return RecomputePolicy::kAuto;
  if (s == "if-needed") return RecomputePolicy::kIfNeeded;
  return std::nullopt;
}

RecomputePolicy parse_recompute_policy_or_throw(std::string_view s, std::string_view option) {
  if (std::optional<RecomputePolicy> p = parse_recompute_policy(s)) return *p;
  throw std::invalid_argument(fmt::format("{}: expected none, selective, selective-op, full, auto or if-needed, got '{}'", option, s));
}

namespace {

/// Splits "layers.3.attention.wq" into the layer prefix "layers.3" and the component after
/// it ("attention"); false when the path has no layer index.
bool split_layer(const std::string& path, std::string& layer, std::string& component) {
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] >= '0' && path[i] <= '9' && (i == 0 || path[i - 1] == '.')) {
      size_t j = i;
      while (j < path.size() && path[j] >= '0' && path[j] <= '9') ++j;
      if (j == path.size() || path[j] == '.') {
        layer = path.substr(0, j);
        component = j < path.size() ? path.substr(j + 1) : std::string();
        if (size_t dot = component.find('.'); dot != std::string::npos) component.resize(dot);
        return true;
      }
    }
    ++i;
  }
  return false;
}

enum class RegionKind { kNone, kNorm, kAttention, kMlp };

RegionKind classify(const std::string& c) {
  auto has = [&](const char* w) { return c.find(w) != std::string::npos; };
  if (has("attn") || has("attention")) return RegionKind::kAttention;
  if (has("mlp") || has("ffn") || has("feed_forward")) return RegionKind::kMlp;
  if (has("norm") || c.rfind("ln", 0) == 0) return RegionKind::kNorm;
  return RegionKind::kNone;
}

/// A linear layer's matmul: torchtitan's policy counts `aten.mm` calls (ours: its forms).
bool linear_matmul(const std::string& op) {
  return op == "mm" || op == "addmm" || op == "matmul" || op == "linear";
}

/// Ops whose outputs torchtitan's op-level save list keeps: matmuls and the attention kernels.
bool in_save_list(const std::string& op) {
  return linear_matmul(op) || op == "bmm" || op == "baddbmm" || op.find("attention") != std::string::npos;
}

/// `saved`: the node's SelectiveSave flags.
bool executes(RecomputePolicy m, char saved) {
  switch (m) {
    case RecomputePolicy::kFull: return true;
    case RecomputePolicy::kSelective: return (saved & kSavedBySaveList) == 0;
    case RecomputePolicy::kSelectiveOp: return (saved & kSavedByOpPolicy) == 0;
    default: return false;
  }
}

std::shared_ptr<const std::vector<Cost>> tie_matrix(size_t rows, size_t cols,
                                                    const std::function<bool(size_t, size_t)>& ok) {
  std::vector<Cost> m(rows * cols, kInfCost);
  for (size_t a = 0; a < rows; ++a)
    for (size_t b = 0; b < cols; ++b)
      if (ok(a, b)) m[a * cols + b] = 0;
  return std::make_shared<const std::vector<Cost>>(std::move(m));
}

}  // namespace

void add_recomputation(const Graph& g, const PlannerOptions& opt, BuiltProblem& bp) {
  // kIfNeeded reaches the builder only as planned without recomputation (the optimizer builds
  // with kAuto once memory binds).
  if (opt.recompute == RecomputePolicy::kNone || opt.recompute == RecomputePolicy::kIfNeeded) return;
  std::vector<RecomputePolicy> modes;
  if (opt.recompute == RecomputePolicy::kAuto)
    modes = {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull};
  else
    modes = {opt.recompute};
  const size_t R = modes.size();
  Problem& prob = bp.problem;

  // Regions: forward ops grouped by (layer, activation class); a norm joins the region that
  // follows it in the same layer.
  const size_t n = static_cast<size_t>(g.size());
  std::vector<int32_t> region_of(n, -1);
  std::map<std::pair<std::string, RegionKind>, int32_t> index;
  std::vector<std::pair<NodeIdx, std::string>> pending_norm;  // (node, layer)
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.phase != Phase::kForward || bp.pnode[static_cast<size_t>(i)] < 0)
      continue;
    std::string layer, comp;
    if (!split_layer(x.module_path, layer, comp)) continue;
    RegionKind k = classify(comp);
    if (k == RegionKind::kNorm) {
      pending_norm.push_back({i, layer});
      continue;
    }
    if (k == RegionKind::kNone) continue;
    auto [it, inserted] = index.try_emplace({layer, k}, static_cast<int32_t>(bp.recompute_regions.size()));
    if (inserted) {
      BuiltProblem::RecomputeRegion r;
      r.layer = layer;
      r.region = k == RegionKind::kAttention ? "attention" : "mlp";
      r.modes = modes;
      bp.recompute_regions.push_back(std::move(r));
    }
    for (auto [p, pl] : pending_norm)
      if (pl == layer) region_of[static_cast<size_t>(p)] = it->second;
    pending_norm.clear();
    region_of[static_cast<size_t>(i)] = it->second;
  }
  if (bp.recompute_regions.empty()) return;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    int32_t r = region_of[static_cast<size_t>(i)];
    if (r >= 0 && bp.recompute_regions[static_cast<size_t>(r)].first_op == kNoNode)
      bp.recompute_regions[static_cast<size_t>(r)].first_op = i;
  }

  // Uses of every forward op: end of its forward uses, first backward use, read outside its
  // region.
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> fwd_end(n), bwd_first(n, kNever);
  std::vector<char> escapes(n, 0);
  for (NodeIdx i = 0; i < g.size(); ++i) fwd_end[static_cast<size_t>(i)] = i + 1;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    for (const TensorRef& r : x.inputs) {
      const size_t u = static_cast<size_t>(r.node);
      if (region_of[u] < 0) continue;
      if (x.kind == NodeKind::kOutput || x.phase == Phase::kOptimizer) {
        escapes[u] = 1;
      } else if (x.phase == Phase::kForward) {
        fwd_end[u] = std::max<int64_t>(fwd_end[u], i + 1);
        if (region_of[static_cast<size_t>(i)] != region_of[u]) escapes[u] = 1;
      } else {
        bwd_first[u] = std::min<int64_t>(bwd_first[u], i);
      }
    }
  }
  std::vector<int64_t> region_back(bp.recompute_regions.size(), kNever);
  // The recomputation runs when the backward first reads a tensor the region saved (not one
  // it hands to later ops, which their consumers save).
  for (size_t i = 0; i < n; ++i)
    if (region_of[i] >= 0 && !escapes[i])
      region_back[static_cast<size_t>(region_of[i])] =
          std::min(region_back[static_cast<size_t>(region_of[i])], bwd_first[i]);
  bp.selective_saved = selective_saves(g);
  const std::vector<char>& saved_op = bp.selective_saved;
  auto exec = [&](size_t i, size_t m) { return executes(modes[m], saved_op[i]); };
  std::vector<char> active(bp.recompute_regions.size(), 1);

  // A region is recomputable only if the backward reads a tensor it saved.
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r)
    if (region_back[r] == kNever) {
      bp.recompute_regions[r].modes = {RecomputePolicy::kNone};
      active[r] = 0;
    }

  // Per region op and mode: needed = kept (not re-executed) but read by a re-executed op of
  // its region, so it must stay live until the recomputation.
  std::vector<unsigned> needed(n, 0);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t r = region_of[static_cast<size_t>(i)];
    if (r < 0 || !active[static_cast<size_t>(r)]) continue;
    for (size_t m = 0; m < R; ++m) {
      if (!exec(static_cast<size_t>(i), m)) continue;
      for (const TensorRef& in : g.node(i).inputs) {
        const size_t u = static_cast<size_t>(in.node);
        if (region_of[u] == r && !exec(u, m)) needed[u] |= 1u << m;
      }
    }
  }

  // Incoming activation edges per consumer graph node (built before any aux edge).
  std::vector<std::vector<size_t>> in_edges(n);
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& o = bp.edge_origin[k];
    if (o.slot < 0 || o.consumer == kNoNode || region_of[static_cast<size_t>(o.consumer)] < 0) continue;
    NodeKind pk = g.node(o.producer.node).kind;
    if (pk == NodeKind::kParameter || pk == NodeKind::kBuffer) continue;
    in_edges[static_cast<size_t>(o.consumer)].push_back(k);
  }

  // Decision nodes.
  for (auto& r : bp.recompute_regions) {
    const size_t rm = r.modes.size();
    ProblemNode d;
    d.name = fmt::format("{}.{}#recompute", r.layer, r.region);
    d.costs.assign(rm, 0);
    d.usages.assign(rm, 0);
    r.decision = prob.num_nodes();
    prob.nodes.push_back(std::move(d));
    bp.graph_node.push_back(r.first_op);
    bp.strategies.push_back(std::vector<Strategy>(rm));
  }

  // Shared matrices (repeated layers reuse them).
  std::map<size_t, std::shared_ptr<const std::vector<Cost>>> owner_ties, decision_ties;
  std::map<std::pair<const std::vector<Cost>*, unsigned>, std::shared_ptr<const std::vector<Cost>>> comm;
  auto add_edge = [&](PNodeIdx u, PNodeIdx v, std::shared_ptr<const std::vector<Cost>> m,
                      NodeIdx consumer, int32_t slot, TensorRef producer) {
    bp.edges.push_back({u, v, std::move(m)});
    bp.edge_origin.push_back({consumer, slot, producer});
  };
  // An aux node with strategies (m, q), m-major, tied to its owner and its region's decision.
  auto add_aux = [&](NodeIdx i, PNodeIdx owner, int32_t r, ProblemNode node,
                     BuiltProblem::RecomputeAux::Role role) {
    const size_t S = prob.nodes[static_cast<size_t>(owner)].costs.size();
    const auto& strats = bp.strategies[static_cast<size_t>(owner)];
    std::vector<Strategy> aux_strats;
    aux_strats.reserve(R * S);
    for (size_t m = 0; m < R; ++m) aux_strats.insert(aux_strats.end(), strats.begin(), strats.end());
    const PNodeIdx pa = prob.num_nodes();
    prob.nodes.push_back(std::move(node));
    bp.graph_node.push_back(i);
    bp.strategies.push_back(std::move(aux_strats));
    bp.recompute_aux.push_back({pa, owner, r, role});
    auto& ot = owner_ties[S];
    if (!ot) ot = tie_matrix(S, R * S, [S](size_t a, size_t b) { return b % S == a; });
    add_edge(owner, pa, ot, i, -2, TensorRef{i, 0});
    auto& dt = decision_ties[S];
    if (!dt) dt = tie_matrix(R, R * S, [S](size_t a, size_t b) { return b / S == a; });
    add_edge(bp.recompute_regions[static_cast<size_t>(r)].decision, pa, dt, i, -2, TensorRef{i, 0});
    return pa;
  };

  for (NodeIdx i = 0; i < g.size(); ++i) {
    const size_t ui = static_cast<size_t>(i);
    const int32_t r = region_of[ui];
    if (r < 0 || !active[static_cast<size_t>(r)]) continue;
    const PNodeIdx pv = bp.pnode[ui];
    const int64_t back = region_back[static_cast<size_t>(r)];
    const bool bwd_read = bwd_first[ui] != kNever;
    const bool freeable = bwd_read && !escapes[ui] && fwd_end[ui] <= back;
    unsigned exec_mask = 0, free_mask = 0;
    for (size_t m = 0; m < R; ++m) {
      if (exec(ui, m)) exec_mask |= 1u << m;
      if (freeable && exec(ui, m)) free_mask |= 1u << m;
    }
    const unsigned need_mask = bwd_read ? 0u : needed[ui];
    if (exec_mask == 0 && need_mask == 0) continue;
    const ProblemNode owner = prob.nodes[static_cast<size_t>(pv)];  // copy: nodes grow below
    const size_t S = owner.costs.size();
    // Does the tensor live past its forward uses, and in which modes?
    const bool split = free_mask != 0 || need_mask != 0;
    auto live_in_gap = [&](size_t m) {
      if (free_mask) return !(free_mask >> m & 1);
      return (need_mask >> m & 1) != 0;
    };

    ProblemNode gap;
    gap.name = owner.name + "#recompute";
    if (split) {
      gap.start = fwd_end[ui];
      gap.end = back;
    }
    for (size_t m = 0; m < R; ++m)
      for (size_t q = 0; q < S; ++q) {
        gap.costs.push_back((exec_mask >> m & 1) ? owner.costs[q] : 0);
        gap.usages.push_back(split && live_in_gap(m) ? owner.usages[q] : 0);
      }
    const PNodeIdx pg = add_aux(i, pv, r, std::move(gap), BuiltProblem::RecomputeAux::kGap);
    for (size_t k : in_edges[ui]) {
      const BuiltProblem::Edge e = bp.edges[k];
      const TensorRef producer = bp.edge_origin[k].producer;
      auto& cm = comm[{e.costs.get(), exec_mask}];
      if (!cm) {
        const size_t su = prob.nodes[static_cast<size_t>(e.u)].costs.size();
        std::vector<Cost> x(su * R * S, 0);
        for (size_t a = 0; a < su; ++a)
          for (size_t m = 0; m < R; ++m)
            if (exec_mask >> m & 1)
              for (size_t q = 0; q < S; ++q) x[a * R * S + m * S + q] = (*e.costs)[a * S + q];
        cm = std::make_shared<const std::vector<Cost>>(std::move(x));
      }
      add_edge(e.u, pg, cm, i, kRecomputeSlot, producer);
    }

    if (split) {
      // Back for the backward (kept or recomputed), or kept for the recomputation only.
      ProblemNode tail;
      tail.name = owner.name + "#recomputed";
      tail.start = back;
      tail.end = free_mask ? owner.end : back + 1;
      for (size_t m = 0; m < R; ++m)
        for (size_t q = 0; q < S; ++q) {
          tail.costs.push_back(0);
          tail.usages.push_back(free_mask || (need_mask >> m & 1) ? owner.usages[q] : 0);
        }
      add_aux(i, pv, r, std::move(tail), BuiltProblem::RecomputeAux::kTail);
      if (free_mask) prob.nodes[static_cast<size_t>(pv)].end = fwd_end[ui];
    }
  }

  // Inputs from outside a region (the layer input, the residual stream) that a mode
  // re-executes a reader of must live until the recomputation: a keep node per (region,
  // input), live [end, b + 1) where they would otherwise die.
  std::map<std::pair<int32_t, NodeIdx>, unsigned> outside;  // (region, producer) -> modes
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t r = region_of[static_cast<size_t>(i)];
    if (r < 0 || !active[static_cast<size_t>(r)]) continue;
    for (const TensorRef& in : g.node(i).inputs) {
      const size_t u = static_cast<size_t>(in.node);
      const NodeKind k = g.node(in.node).kind;
      if (region_of[u] == r || k == NodeKind::kParameter || k == NodeKind::kBuffer || bp.pnode[u] < 0)
        continue;
      for (size_t m = 0; m < R; ++m)
        if (exec(static_cast<size_t>(i), m)) outside[{r, in.node}] |= 1u << m;
    }
  }
  // Whole-layer recomputation (the policy `full` for every region): torch's checkpoint of a
  // whole transformer block (torchtitan's full AC wraps each TransformerBlock,
  // torchtitan/models/llama3/infra/parallelize.py apply_ac, torch.utils.checkpoint) saves
  // the block's input alone and re-runs the whole block forward at its backward, so a tensor
  // made inside the layer outside any region (the residual h = x + attention(x) between the
  // two regions) is recomputed, not kept: it is live only during the recomputation.  Its op
  // (an elementwise add, ~0.1 % of a layer's recomputation) is not charged again, as the
  // simulator replays the regions' ops only (simulate.cc recompute_schedule).  Its inputs
  // must come back too: made by a region of the same layer, or an input that another region
  // of the layer keeps for its own recomputation (the layer input).
  const bool whole_layer = modes.size() == 1 && modes[0] == RecomputePolicy::kFull;
  auto layer_of = [&](NodeIdx u, std::string& layer) {
    std::string comp;
    return g.node(u).kind == NodeKind::kOp && g.node(u).phase == Phase::kForward &&
           split_layer(g.node(u).module_path, layer, comp) && classify(comp) == RegionKind::kNone;
  };
  auto recomputed_in_layer = [&](int32_t r, NodeIdx u) {
    std::string layer;
    if (!whole_layer || region_of[static_cast<size_t>(u)] >= 0 || !layer_of(u, layer) ||
        layer != bp.recompute_regions[static_cast<size_t>(r)].layer)
      return false;
    for (const TensorRef& in : g.node(u).inputs) {
      const size_t w = static_cast<size_t>(in.node);
      const NodeKind k = g.node(in.node).kind;
      if (k == NodeKind::kParameter || k == NodeKind::kBuffer) continue;
      if (region_of[w] >= 0 && bp.recompute_regions[static_cast<size_t>(region_of[w])].layer == layer) continue;
      bool kept = false;
      for (const auto& [key2, mask2] : outside)
        kept = kept || (key2.second == in.node && key2.first != r &&
                        bp.recompute_regions[static_cast<size_t>(key2.first)].layer == layer);
      if (!kept) return false;
    }
    return true;
  };
  for (const auto& [key, mask] : outside) {
    const auto [r, u] = key;
    const PNodeIdx pu = bp.pnode[static_cast<size_t>(u)];
    const ProblemNode owner = prob.nodes[static_cast<size_t>(pu)];
    const int64_t back = region_back[static_cast<size_t>(r)];
    if (owner.end > back) continue;  // still live (e.g. read by the backward)
    const bool again = recomputed_in_layer(r, u);
    ProblemNode keep;
    keep.name = owner.name + (again ? "#recomputed" : "#kept");
    keep.start = again ? back : owner.end;
    keep.end = back + 1;
    const size_t S = owner.costs.size();
    for (size_t m = 0; m < R; ++m)
      for (size_t q = 0; q < S; ++q) {
        keep.costs.push_back(0);
        keep.usages.push_back((mask >> m & 1) ? owner.usages[q] : 0);
      }
    add_aux(u, pu, r, std::move(keep), BuiltProblem::RecomputeAux::kKeep);
  }
}

std::vector<char> selective_saves(const Graph& g) {
  std::vector<char> saved(static_cast<size_t>(g.size()), 0);
  std::map<std::string, int32_t> matmuls;  // per layer: linear matmuls seen in the forward
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp) continue;
    if (!in_save_list(x.op)) continue;
    char& flags = saved[static_cast<size_t>(i)];
    flags = kSavedBySaveList | kSavedByOpPolicy;
    std::string layer, comp;
    if (x.phase == Phase::kForward && linear_matmul(x.op) && split_layer(x.module_path, layer, comp) &&
        ++matmuls[layer] % 2 == 0)
      flags = kSavedBySaveList;
  }
  return saved;
}

bool recompute_executes(RecomputePolicy m, const BuiltProblem& bp, NodeIdx v) {
  return executes(m, bp.selective_saved.at(static_cast<size_t>(v)));
}

std::vector<std::pair<std::string, std::string>> layer_recompute(
    const BuiltProblem& bp, const std::vector<StrategyIdx>& choice) {
  std::vector<std::pair<std::string, std::string>> out;
  std::map<std::string, size_t> at;
  std::vector<std::pair<int, int>> counts;  // (kept, full) regions, total via size
  std::vector<int> total;
  for (const auto& r : bp.recompute_regions) {
    auto [it, ins] = at.try_emplace(r.layer, out.size());
    if (ins) {
      out.push_back({r.layer, ""});
      counts.push_back({0, 0});
      total.push_back(0);
    }
    const StrategyIdx k = choice.at(static_cast<size_t>(r.decision));
    const RecomputePolicy m = r.modes.at(static_cast<size_t>(k));
    if (m == RecomputePolicy::kNone) ++counts[it->second].first;
    if (m == RecomputePolicy::kFull) ++counts[it->second].second;
    ++total[it->second];
  }
  for (size_t l = 0; l < out.size(); ++l)
    out[l].second = counts[l].first == total[l] ? "none"
                    : counts[l].second == total[l] ? "full"
                                                   : "selective";
  return out;
}

std::vector<std::string> recomputed_nodes(const Graph& g, const BuiltProblem& bp,
                                          const std::vector<StrategyIdx>& choice) {
  std::vector<NodeIdx> nodes;
  for (const auto& a : bp.recompute_aux) {
    // A layer-level tensor whole-layer recomputation makes again (add_recomputation: its keep
    // node renamed "#recomputed", live only at the recomputation): the runtime must re-execute
    // it rather than save it (python/autoshard/partition.py saves what no listed node makes).
    if (a.role == BuiltProblem::RecomputeAux::kKeep &&
        bp.problem.nodes.at(static_cast<size_t>(a.node)).name.ends_with("#recomputed")) {
      nodes.push_back(bp.graph_node.at(static_cast<size_t>(a.owner)));
      continue;
    }
    if (a.role != BuiltProblem::RecomputeAux::kGap) continue;
    const auto& r = bp.recompute_regions.at(static_cast<size_t>(a.region));
    const RecomputePolicy m = r.modes.at(static_cast<size_t>(choice.at(static_cast<size_t>(r.decision))));
    const NodeIdx v = bp.graph_node.at(static_cast<size_t>(a.owner));
    if (recompute_executes(m, bp, v)) nodes.push_back(v);
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<std::string> names;
  names.reserve(nodes.size());
  for (NodeIdx v : nodes) names.push_back(g.node(v).name);
  return names;
}

RecomputeCost recompute_cost(const BuiltProblem& bp, const std::vector<StrategyIdx>& choice) {
  RecomputeCost c;
  for (const auto& a : bp.recompute_aux)
    if (a.role == BuiltProblem::RecomputeAux::kGap)
      c.compute_us += bp.problem.nodes[static_cast<size_t>(a.node)].costs[static_cast<size_t>(
        choice[static_cast<size_t>(a.node)])];
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    if (bp.edge_origin[k].slot != kRecomputeSlot) continue;
    const auto& e = bp.edges[k];
    const size_t nv = bp.problem.nodes[static_cast<size_t>(e.v)].costs.size();
    c.comm_us += (*e.costs)[static_cast<size_t>(choice[static_cast<size_t>(e.u)]) * nv +
                            static_cast<size_t>(choice[static_cast<size_t>(e.v)])];
  }
  return c;
}

namespace {

/// Classes of `class_of` that keep_all_activations collapses: the recomputation nodes of
/// regions that may keep, with the strategy index of "keep" (decision) or the owner class
/// and keep's mode index (aux).
struct Collapsed {
  std::map<PNodeIdx, StrategyIdx> decision;                     // class -> keep index
  std::map<PNodeIdx, std::pair<PNodeIdx, StrategyIdx>> aux;     // class -> (owner class, keep)
};

Collapsed collapsed_classes(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of) {
  Collapsed c;
  auto keep_index = [](const BuiltProblem::RecomputeRegion& r) {
    auto it = std::find(r.modes.begin(), r.modes.end(), RecomputePolicy::kNone);
    return it == r.modes.end() ? -1 : static_cast<StrategyIdx>(it - r.modes.begin());
  };
  for (const auto& r : bp.recompute_regions)
    if (StrategyIdx k = keep_index(r); k >= 0) c.decision[class_of.at(static_cast<size_t>(r.decision))] = k;
  for (const auto& a : bp.recompute_aux) {
    StrategyIdx k = keep_index(bp.recompute_regions.at(static_cast<size_t>(a.region)));
    if (k >= 0)
      c.aux[class_of.at(static_cast<size_t>(a.node))] = {class_of.at(static_cast<size_t>(a.owner)), k};
  }
  return c;
}

}  // namespace

void keep_all_activations(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of, Problem& p) {
  const Collapsed c = collapsed_classes(bp, class_of);
  if (c.decision.empty() && c.aux.empty()) return;
  std::vector<char> gone(p.nodes.size(), 0);
  for (const auto& [k, v] : c.decision) gone[static_cast<size_t>(k)] = 1;
  for (const auto& [k, v] : c.aux) gone[static_cast<size_t>(k)] = 1;
  for (size_t v = 0; v < p.nodes.size(); ++v)
    if (gone[v]) {
      p.nodes[v].costs = {0};
      p.nodes[v].usages = {0};
    }
  // Under keep every recomputation node costs nothing and so does every edge it has.
  for (ProblemEdge& e : p.edges)
    if (gone[static_cast<size_t>(e.u)] || gone[static_cast<size_t>(e.v)])
      e.costs.assign(p.nodes[static_cast<size_t>(e.u)].costs.size() *
                         p.nodes[static_cast<size_t>(e.v)].costs.size(),
                     0);
}

bool forbid_recomputation(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of, Problem& p) {
  const Collapsed c = collapsed_classes(bp, class_of);
  for (const auto& [k, keep] : c.decision) {
    std::vector<Cost>& costs = p.nodes.at(static_cast<size_t>(k)).costs;
    for (size_t s = 0; s < costs.size(); ++s)
      if (static_cast<StrategyIdx>(s) != keep) costs[s] = kInfCost;
  }
  return !c.decision.empty();
}

void lift_kept_choice(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                      const Problem& full, std::vector<StrategyIdx>& choice) {
  if (choice.empty()) return;
  const Collapsed c = collapsed_classes(bp, class_of);
  for (const auto& [k, keep] : c.decision) choice.at(static_cast<size_t>(k)) = keep;
  for (const auto& [k, oc] : c.aux) {
    const StrategyIdx s = full.nodes.at(static_cast<size_t>(oc.first)).num_strategies();
    choice.at(static_cast<size_t>(k)) = oc.second * s + choice.at(static_cast<size_t>(oc.first));
  }
}

void lower_kept_choice(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                       std::vector<StrategyIdx>& choice) {
  if (choice.empty()) return;
  const Collapsed c = collapsed_classes(bp, class_of);
  for (const auto& [k, keep] : c.decision) choice.at(static_cast<size_t>(k)) = 0;
  for (const auto& [k, oc] : c.aux) choice.at(static_cast<size_t>(k)) = 0;
}

void set_recomputed_nodes(const Graph& g, const BuiltProblem& bp, const std::vector<std::string>& names,
                          std::vector<StrategyIdx>& choice) {
  const std::set<std::string> redone(names.begin(), names.end());
  std::vector<std::vector<const BuiltProblem::RecomputeAux*>> gaps(bp.recompute_regions.size());
  for (const auto& a : bp.recompute_aux)
    if (a.role == BuiltProblem::RecomputeAux::kGap) gaps.at(static_cast<size_t>(a.region)).push_back(&a);
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r) {
    const auto& reg = bp.recompute_regions[r];
    auto fits = [&](RecomputePolicy m) {
      for (const auto* a : gaps[r]) {
        const NodeIdx v = bp.graph_node[static_cast<size_t>(a->owner)];
        if (recompute_executes(m, bp, v) != (redone.count(g.node(v).name) > 0)) return false;
      }
      return true;
    };
    size_t k = 0;
    while (k < reg.modes.size() && !fits(reg.modes[k])) ++k;
    if (k == reg.modes.size())
      throw std::runtime_error(fmt::format("the recomputed nodes fit no mode of {}.{}", reg.layer, reg.region));
    choice.at(static_cast<size_t>(reg.decision)) = static_cast<StrategyIdx>(k);
  }
  for (const auto& a : bp.recompute_aux) {
    const StrategyIdx q = choice.at(static_cast<size_t>(a.owner));
    if (q < 0) continue;
    const StrategyIdx m = choice[static_cast<size_t>(bp.recompute_regions[static_cast<size_t>(a.region)].decision)];
    choice[static_cast<size_t>(a.node)] = m * bp.problem.nodes[static_cast<size_t>(a.owner)].num_strategies() + q;
  }
}

void complete_recompute_choice(const BuiltProblem& bp, std::vector<StrategyIdx>& choice) {
  for (const auto& r : bp.recompute_regions) {
    StrategyIdx& d = choice.at(static_cast<size_t>(r.decision));
    if (d >= 0) continue;
    auto keep = std::find(r.modes.begin(), r.modes.end(), RecomputePolicy::kNone);
    d = keep == r.modes.end() ? 0 : static_cast<StrategyIdx>(keep - r.modes.begin());
  }
  for (const auto& a : bp.recompute_aux) {
    StrategyIdx& x = choice.at(static_cast<size_t>(a.node));
    const StrategyIdx q = choice.at(static_cast<size_t>(a.owner));
    if (x >= 0 || q < 0) continue;
    const StrategyIdx m = choice.at(static_cast<size_t>(
        bp.recompute_regions[static_cast<size_t>(a.region)].decision));
    x = m * bp.problem.nodes[static_cast<size_t>(a.owner)].num_strategies() + q;
  }
}

}  // namespace autoshard

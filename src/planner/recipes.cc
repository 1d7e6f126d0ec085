#include "planner/recipes.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "cost/compute.h"
#include "ir/file_util.h"
#include "planner/clock.h"
#include "planner/experts.h"
#include "planner/parallel_for.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

/// A recipe's pin of `n`'s output placements, named `prefix` + the node's name.
Constraint recipe_pin(const char* prefix, const Node& n, std::vector<Placement> p) {
  Constraint c;
  c.kind = Constraint::Kind::kPin;
  c.node = n.name;
  c.output = std::move(p);
  c.name = prefix + n.name;
  return c;
}

const std::vector<Recipe> kAll = {Recipe::kAlpa,     Recipe::kDdp,    Recipe::kFsdp,
                                  Recipe::kMegatron, Recipe::kFsdpTp, Recipe::kHsdp};

/// Ops through which a parameter is still "the weight" on its way to a linear: aliases, casts
/// (mixed precision) and copies.  Transposes flip nn.Linear's [out, in] convention.
bool is_weight_alias(std::string_view op) {
  static const std::vector<std::string_view> k = {
      "t",     "transpose", "permute", "view",   "_unsafe_view", "reshape", "_reshape_alias",
      "clone", "_to_copy",  "to",      "contiguous", "alias",   "detach",  "lift_fresh_copy",
      "expand", "numpy_T"};
  return std::find(k.begin(), k.end(), op) != k.end();
}

bool swaps_2d(const Node& n) {
  std::string_view op = aten_packet(n.op);
  if (op == "t" || op == "numpy_T") return true;
  if (op == "transpose") {
    auto d0 = n.attr_int("dim0", 0), d1 = n.attr_int("dim1", 1);
    return d0 != d1;
  }
  if (op == "permute") {
    auto dims = n.attr_ints("dims");
    return dims.size() == 2 && dims[0] == 1 && dims[1] == 0;
  }
  return false;
}

bool is_linear_op(std::string_view op) {
  return op == "mm" || op == "addmm" || op == "matmul" || op == "bmm" || op == "linear";
}

std::vector<Placement> replicated(const Mesh& mesh) {
  return std::vector<Placement>(static_cast<size_t>(mesh.ndim()), Placement::replicate());
}

bool valid(const std::vector<Placement>& p, const TensorMeta& m, const Mesh& mesh, bool div) {
  ShardingSpec s;
  s.placements = p;
  s.meta = m;
  return s.valid(mesh, div);
}

std::string dims_list(const Mesh& mesh, const std::vector<MeshDimIdx>& dims) {
  std::vector<std::string> names;
  for (MeshDimIdx d : dims) names.push_back(mesh.dim(d).name);
  return fmt::format("{}", fmt::join(names, ","));
}

/// Which mesh dims carry data parallelism (the batch is split on them) under the recipe.
std::vector<MeshDimIdx> batch_dims(Recipe r, const Mesh& mesh) {
  std::vector<MeshDimIdx> dims;
  const MeshDimIdx tp = tensor_parallel_dim(mesh);
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d)
    if (!((r == Recipe::kMegatron || r == Recipe::kFsdpTp || r == Recipe::kCpFsdp) && d == tp) &&
        !(r == Recipe::kCpFsdp && d == context_parallel_dim(mesh)))
      dims.push_back(d);
  return dims;
}

/// CP x FSDP: every attention ([b, h, s, d] output, SDPA or its backward) context parallel
/// over `cp`, its batch over the data dims and heads over tp.  A recipe constraint: it is what
/// the recipe is.  Graphs with the math decomposition of attention have no such node: only
/// their inputs pin the sequence split.
void pin_cp_attention(const Graph& g, const Mesh& mesh, const std::vector<MeshDimIdx>& data,
                      MeshDimIdx cp, MeshDimIdx tp, RecipePins& out) {
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kOp || !aten_packet(n.op).starts_with("_scaled_dot_product") ||
        n.outputs.empty() || n.out().rank() != 4)
      continue;
    std::vector<Placement> p = replicated(mesh);
    for (MeshDimIdx d : data) p[static_cast<size_t>(d)] = Placement::shard(0);
    if (tp >= 0) p[static_cast<size_t>(tp)] = Placement::shard(1);
    p[static_cast<size_t>(cp)] = Placement::shard(2);
    if (!valid(p, n.out(), mesh, false)) {
      out.notes.push_back(fmt::format("attention '{}' does not split over cp x data x tp: left free", n.name));
      continue;
    }
    out.constraints.push_back(recipe_pin("recipe:", n, std::move(p)));
  }
}

/// Whether `n` carries the residual stream: an add at a layer's own level (module path
/// "layers.3": the residual adds of a block, recompute.h).  The embedding is left free: its
/// vocab-parallel output is Partial over tp until the edge after it scatters it.
bool residual_stream(const Node& n) {
  if (n.kind != NodeKind::kOp || n.phase != Phase::kForward || n.outputs.empty() || n.out().rank() != 3) return false;
  const std::string_view op = aten_packet(n.op);
  const size_t dot = n.module_path.rfind('.');
  const std::string_view last = dot == std::string::npos ? std::string_view(n.module_path)
                                                         : std::string_view(n.module_path).substr(dot + 1);
  return op == "add" && !last.empty() && std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// CP x FSDP: the residual stream [b, s, h] split on its sequence over `cp` (and over tp with
/// tensor parallelism: torchtitan's sequence parallelism between blocks), its batch over the
/// data dims.  torchtitan's context parallelism shards the inputs' sequence before the model
/// (torch's context_parallel(buffers=[inputs, labels, freqs_cis], buffer_seq_dims=[1, 1, 0]),
/// torchtitan/train.py) and every op but attention runs on its rank's chunk, so the blocks'
/// inputs, which full recomputation keeps for the backward, are split over cp: without the pin
/// a plan without a memory limit may gather them over cp (cp times the kept activations).  Use
/// constraints, dropped if the graph cannot take them.
void pin_cp_residual(const Graph& g, const Mesh& mesh, const std::vector<MeshDimIdx>& data, MeshDimIdx cp,
                     MeshDimIdx tp, bool require_divisible, RecipePins& out) {
  for (const Node& n : g.nodes) {
    if (!residual_stream(n)) continue;
    std::vector<Placement> p = replicated(mesh);
    for (MeshDimIdx d : data) p[static_cast<size_t>(d)] = Placement::shard(0);
    p[static_cast<size_t>(cp)] = Placement::shard(1);
    if (tp >= 0) p[static_cast<size_t>(tp)] = Placement::shard(1);
    if (!valid(p, n.out(), mesh, require_divisible) && tp >= 0) p[static_cast<size_t>(tp)] = Placement::replicate();
    if (!valid(p, n.out(), mesh, require_divisible)) continue;
    out.use_constraints.push_back(recipe_pin("recipe-use:", n, std::move(p)));
  }
}

}  // namespace

std::string_view recipe_name(Recipe r) {
  switch (r) {
    case Recipe::kAlpa: return "alpa";
    case Recipe::kDdp: return "ddp";
    case Recipe::kFsdp: return "fsdp";
    case Recipe::kMegatron: return "megatron";
    case Recipe::kFsdpTp: return "fsdp+tp";
    case Recipe::kHsdp: return "hsdp";
    case Recipe::kEp: return "ep";
    case Recipe::kCpFsdp: return "cp+fsdp";
  }
  return "?";
}

std::optional<Recipe> parse_recipe(std::string_view s) {
  for (Recipe r : kAll)
    if (s == recipe_name(r)) return r;
  if (s == "ep" || s == "expert" || s == "ep+fsdp" || s == "fsdp+ep") return Recipe::kEp;
  if (s == "cp+fsdp" || s == "fsdp+cp" || s == "cp") return Recipe::kCpFsdp;
  if (s == "optimal" || s == "optimum") return Recipe::kAlpa;
  if (s == "zero3") return Recipe::kFsdp;
  if (s == "tp") return Recipe::kMegatron;
  if (s == "fsdp_tp" || s == "fsdp-tp" || s == "2d") return Recipe::kFsdpTp;
  return std::nullopt;
}

const std::vector<Recipe>& all_recipes() { return kAll; }

std::vector<Recipe> recipes_for(const Graph& g, const Mesh& mesh) {
  std::vector<Recipe> r = kAll;
  if (expert_analysis(g).n_params > 0) r.push_back(Recipe::kEp);
  if (context_parallel_dim(mesh) >= 0) r.push_back(Recipe::kCpFsdp);
  return r;
}

MeshDimIdx context_parallel_dim(const Mesh& mesh) {
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d)
    if (mesh.dim(d).name == "cp" || mesh.dim(d).name == "context") return d;
  return -1;
}

std::vector<MeshDimIdx> nested_view_dims(const Mesh& mesh) {
  const MeshDimIdx cp = context_parallel_dim(mesh);
  return cp >= 0 ? std::vector<MeshDimIdx>{cp} : std::vector<MeshDimIdx>{};
}

std::string recipe_help() {
  return "alpa (the optimum), ddp (parameters replicated, batch split on every dim), fsdp "
         "(ZeRO-3: parameters sharded on every dim, gathered for use), megatron (TP column/row "
         "on the tp dim, DP on the others), fsdp+tp (TP on tp, FSDP on the others), hsdp "
         "(replicate over the outer dims, shard over the last), ep (Mixture of Experts: experts split "
         "on the ep dim, tokens moved by all-to-all, FSDP for the rest), cp+fsdp (torchtitan's "
         "context parallelism: sequence split on the cp dim, FSDP over cp and the data dims, TP on "
         "tp if any)";
}

MeshDimIdx tensor_parallel_dim(const Mesh& mesh) {
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) {
    const std::string& n = mesh.dim(d).name;
    if (n == "tp" || n == "tensor" || n == "mp" || n == "model") return d;
  }
  return -1;
}

std::string_view tp_role_name(TpRole r) {
  switch (r) {
    case TpRole::kReplicated: return "replicated";
    case TpRole::kColumn: return "column";
    case TpRole::kRow: return "row";
    case TpRole::kVocab: return "vocab";
    case TpRole::kColumnBias: return "column bias";
  }
  return "?";
}

std::vector<TpLayout> tensor_parallel_layout(const Graph& g) {
  return tensor_parallel_analysis(g).params;
}

TpAnalysis tensor_parallel_analysis(const Graph& g) {
  TpAnalysis res;
  std::vector<TpLayout>& layout = res.params;
  layout.resize(static_cast<size_t>(g.size()));
  std::vector<char> assigned(static_cast<size_t>(g.size()), 0);
  // Per node: the parameter it is an alias of (through views and casts) and how many 2-D
  // transposes lie in between.
  struct Alias {
    NodeIdx param = kNoNode;
    int swaps = 0;
  };
  std::vector<Alias> alias(static_cast<size_t>(g.size()));
  // Per node: its output carries features split by a column-parallel linear.
  std::vector<char> split(static_cast<size_t>(g.size()), 0);
  auto set_role = [&](NodeIdx p, TpLayout l) {
    if (assigned[static_cast<size_t>(p)]) return;  // the first (forward) use decides
    assigned[static_cast<size_t>(p)] = 1;
    layout[static_cast<size_t>(p)] = l;
  };
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind == NodeKind::kParameter) {
      alias[static_cast<size_t>(i)] = {i, 0};
      continue;
    }
    if (n.kind != NodeKind::kOp || n.phase != Phase::kForward) continue;
    const std::string_view op = aten_packet(n.op);
    auto alias_of = [&](size_t slot) -> const Alias& {
      return alias[static_cast<size_t>(n.inputs[slot].node)];
    };
    if (is_weight_alias(op) && !n.inputs.empty() && alias_of(0).param != kNoNode) {
      Alias a = alias_of(0);
      if (swaps_2d(n)) ++a.swaps;
      alias[static_cast<size_t>(i)] = a;
      continue;
    }
    if (op == "embedding" && !n.inputs.empty() && alias_of(0).param != kNoNode) {
      set_role(alias_of(0).param, {TpRole::kVocab, 0});
      continue;  // the looked-up rows are whole: not split
    }
    if (is_linear_op(op)) {
      // Operands: linear(x, w[out,in], b); mm/matmul/bmm(a, b); addmm(bias, a, b).
      const size_t first = op == "addmm" ? 1 : 0;
      std::optional<size_t> wslot;
      for (size_t s = first; s < std::min(n.inputs.size(), first + 2); ++s)
        if (alias_of(s).param != kNoNode && g.node(alias_of(s).param).out().rank() == 2) wslot = s;
      if (wslot) {
        bool act_split = false;
        for (size_t s = first; s < std::min(n.inputs.size(), first + 2); ++s)
          if (s != *wslot && split[static_cast<size_t>(n.inputs[s].node)]) act_split = true;
        const Alias& w = alias_of(*wslot);
        // Output-feature dim of the parameter: nn.Linear's [out, in] is read transposed by
        // x @ w.t(); linear() reads it as is; a weight on the left (w @ x) has out rows.
        int32_t out_dim;
        if (op == "linear") out_dim = w.swaps % 2 == 0 ? 0 : 1;
        else if (*wslot == first + 1) out_dim = w.swaps % 2 == 1 ? 0 : 1;
        else out_dim = w.swaps % 2 == 0 ? 0 : 1;
        const TpRole role = act_split ? TpRole::kRow : TpRole::kColumn;
        set_role(w.param, {role, role == TpRole::kColumn ? out_dim : 1 - out_dim});
        std::optional<size_t> bslot;
        if (op == "addmm") bslot = 0;
        if (op == "linear" && n.inputs.size() > 2) bslot = 2;
        if (bslot && alias_of(*bslot).param != kNoNode) {
          const NodeIdx b = alias_of(*bslot).param;
          if (role == TpRole::kColumn)
            set_role(b, {TpRole::kColumnBias, static_cast<int32_t>(g.node(b).out().rank() - 1)});
          else
            set_role(b, {TpRole::kReplicated, -1});
        }
        split[static_cast<size_t>(i)] = role == TpRole::kColumn;
        res.linears.push_back({i, w.param, role});
        continue;
      }
    }
    for (const TensorRef& in : n.inputs)
      if (split[static_cast<size_t>(in.node)]) split[static_cast<size_t>(i)] = 1;
  }
  return res;
}

namespace {

/// FSDP2 over TP (torchtitan): FSDP shards the local TP shard, so when both split one tensor
/// dim (a column-parallel weight, dim 0), tp cuts first and FSDP's mesh dims cut each tp
/// shard: `_S(0,tp)S(0)` on (dp, tp), not DTensor's default dp-first order.  Unchanged when the
/// order would leave an empty shard.
std::vector<Placement> tp_cuts_first(std::vector<Placement> p, MeshDimIdx tp, const TensorMeta& m,
                                     const Mesh& mesh, bool require_divisible) {
  if (tp < 0 || !p[static_cast<size_t>(tp)].is_shard()) return p;
  std::optional<ShardOrder> order = decode_shard_order(p, mesh);
  if (!order) return p;
  for (ShardOrderEntry& e : *order) {
    auto it = std::find(e.mesh_dims.begin(), e.mesh_dims.end(), static_cast<int32_t>(tp));
    if (it != e.mesh_dims.end()) std::rotate(e.mesh_dims.begin(), it, it + 1);
  }
  std::vector<Placement> q = encode_shard_order(p, *order, mesh);
  return valid(q, m, mesh, require_divisible) ? q : p;
}

}  // namespace

bool recipe_uses_shard_orders(Recipe r, const Mesh& mesh) {
  const MeshDimIdx tp = tensor_parallel_dim(mesh);
  if (tp < 0 || mesh.ndim() < 2) return false;
  return r == Recipe::kFsdpTp || r == Recipe::kCpFsdp;
}

RecipePins recipe_pins(Recipe r, const Graph& g, const Mesh& mesh, bool require_divisible,
                       bool shard_orders) {
  RecipePins out;
  if (r == Recipe::kAlpa) return out;
  const std::string name(recipe_name(r));
  const MeshDimIdx tp = tensor_parallel_dim(mesh);
  const MeshDimIdx cp = context_parallel_dim(mesh);
  if (r == Recipe::kCpFsdp && cp < 0) {
    out.not_applicable = fmt::format(
        "cp+fsdp needs a context-parallel mesh dim named cp (mesh {} has none; e.g. --mesh-dims "
        "dp,cp)",
        mesh.describe());
    return out;
  }
  if ((r == Recipe::kMegatron || r == Recipe::kFsdpTp) && tp < 0) {
    out.not_applicable = fmt::format(
        "{} needs a tensor-parallel mesh dim named tp (mesh {} has none; e.g. --mesh-dims dp,tp)",
        name, mesh.describe());
    return out;
  }
  if (r == Recipe::kFsdpTp && mesh.ndim() < 2) {
    out.not_applicable = fmt::format("fsdp+tp needs a data-parallel mesh dim besides tp (mesh {})",
                                     mesh.describe());
    return out;
  }
  if (r == Recipe::kHsdp && mesh.ndim() < 2) {
    out.not_applicable = fmt::format(
        "hsdp needs a mesh of at least 2 dims (replicate across nodes, shard within); mesh {} "
        "is 1-D: use fsdp or ddp",
        mesh.describe());
    return out;
  }
  // Expert parallelism: the mesh dim the experts split over, and where the experts are.
  const bool expert_parallel = r == Recipe::kEp;
  ExpertAnalysis experts;
  MeshDimIdx ep = -1;
  if (expert_parallel) {
    experts = expert_analysis(g);
    ep = expert_parallel_dim(mesh);
    if (ep < 0) ep = static_cast<MeshDimIdx>(mesh.ndim() - 1);
    if (experts.n_params == 0) {
      out.not_applicable =
          "ep: the graph has no stacked expert weights (a rank-3 parameter read by a grouped or "
          "batched matmul)";
      return out;
    }
    if (experts.batched.empty()) {
      out.not_applicable = fmt::format(
          "ep: the {} expert matmuls group token rows jaggedly (2-D x 3-D _grouped_mm over "
          "tokens sorted by expert): experts split only with a capacity-padded [E, C, D] "
          "dispatch (docs/moe.md)",
          experts.jagged);
      return out;
    }
  }
  const std::vector<MeshDimIdx> data = batch_dims(r, mesh);
  int64_t data_ranks = 1;
  for (MeshDimIdx d : data) data_ranks *= mesh.size(d);

  const bool tensor_parallel =
      r == Recipe::kMegatron || r == Recipe::kFsdpTp || (r == Recipe::kCpFsdp && tp >= 0);
  const TpAnalysis tpa = tensor_parallel_analysis(g);
  const std::vector<TpLayout>& tpl = tpa.params;
  if (tensor_parallel) {
    if (std::none_of(tpl.begin(), tpl.end(), [](const TpLayout& l) {
          return l.role == TpRole::kColumn || l.role == TpRole::kRow;
        })) {
      out.not_applicable =
          fmt::format("{}: the graph has no linear layer whose weight tensor parallelism could split", name);
      return out;
    }
  }

  auto pin = [&](const Node& n, std::vector<Placement> p) {
    out.constraints.push_back(recipe_pin("recipe:", n, std::move(p)));
  };

  // The batch: every input split on its first dim over the data-parallel dims.
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kInput || n.outputs.empty() || n.out().rank() == 0) continue;
    std::vector<Placement> p = replicated(mesh);
    for (MeshDimIdx d : data) p[static_cast<size_t>(d)] = Placement::shard(0);
    // Context parallelism: tokens and labels [batch, seq] split on the sequence too.
    if (r == Recipe::kCpFsdp && n.out().rank() >= 2) p[static_cast<size_t>(cp)] = Placement::shard(1);
    if (!valid(p, n.out(), mesh, require_divisible)) {
      out.not_applicable = fmt::format(
          "{}: input '{}' (batch {}) does not split over the {} data-parallel devices of mesh "
          "dims {}",
          name, n.name, n.out().shape[0], data_ranks, dims_list(mesh, data));
      out.constraints.clear();
      return out;
    }
    pin(n, std::move(p));
  }

  // Parameters.
  int kept_whole = 0, tp_kept = 0;
  std::vector<std::optional<std::vector<Placement>>> param_p(static_cast<size_t>(g.size()));
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kParameter) continue;
    const TensorMeta& m = n.out();
    std::vector<Placement> p = replicated(mesh);
    if (tensor_parallel && tpl[static_cast<size_t>(i)].dim >= 0) {
      p[static_cast<size_t>(tp)] = Placement::shard(tpl[static_cast<size_t>(i)].dim);
      if (!valid(p, m, mesh, require_divisible)) {
        p[static_cast<size_t>(tp)] = Placement::replicate();
        ++tp_kept;
      }
    }
    std::vector<MeshDimIdx> shard_on;  // FSDP-style storage sharding
    if (r == Recipe::kFsdp || r == Recipe::kFsdpTp || r == Recipe::kEp) shard_on = data;
    if (r == Recipe::kCpFsdp) {  // FSDP over dp_shard x cp (torchtitan's dp_shard_cp)
      shard_on = data;
      shard_on.push_back(cp);
    }
    if (r == Recipe::kHsdp) shard_on = {static_cast<MeshDimIdx>(mesh.ndim() - 1)};
    int32_t first_dim = 0;
    if (expert_parallel && experts.expert_param[static_cast<size_t>(i)]) {
      // The experts split over ep; FSDP shards the rest of the weight over the other dims.
      p[static_cast<size_t>(ep)] = Placement::shard(0);
      if (!valid(p, m, mesh, require_divisible)) {
        out.not_applicable = fmt::format("ep: the {} experts of '{}' do not split over the {} "
                                         "devices of mesh dim {}",
                                         m.shape[0], n.name, mesh.size(ep), mesh.dim(ep).name);
        out.constraints.clear();
        return out;
      }
      shard_on.erase(std::remove(shard_on.begin(), shard_on.end(), ep), shard_on.end());
      first_dim = 1;
    }
    bool whole = false;
    for (MeshDimIdx d : shard_on) {
      // FSDP shards dim 0 (FSDP2's choice); a dim too small for the shards falls back to the
      // next dim, and a tensor too small for any to replication on that mesh dim.
      bool placed = false;
      for (int32_t td = first_dim; td < m.rank() && !placed; ++td) {
        p[static_cast<size_t>(d)] = Placement::shard(td);
        placed = valid(p, m, mesh, require_divisible);
      }
      if (!placed) {
        p[static_cast<size_t>(d)] = Placement::replicate();
        whole = true;
      }
    }
    if (whole) ++kept_whole;
    if (shard_orders && recipe_uses_shard_orders(r, mesh))
      p = tp_cuts_first(std::move(p), tp, m, mesh, require_divisible);
    pin(n, p);
    param_p[static_cast<size_t>(i)] = std::move(p);
  }
  // Optimizer state and update follow their parameter (DDP keeps them replicated; FSDP
  // shards them like the parameter).
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kOp || aten_packet(n.op) != "_fused_adam" || n.inputs.empty()) continue;
    const auto& p = param_p[static_cast<size_t>(n.inputs[0].node)];
    if (!p) continue;
    for (size_t s = 2; s < n.inputs.size(); ++s) {
      const Node& st = g.node(n.inputs[s].node);
      if (st.kind == NodeKind::kBuffer && st.out().shape == g.node(n.inputs[0].node).out().shape)
        pin(st, *p);
    }
    pin(n, *p);
  }
  // How the forward linears use their weights: batch-split outputs on the data-parallel
  // dims; on tp, column outputs split on their features and row outputs partial (reduced by
  // the edge that follows: an all-reduce, or a reduce-scatter into sequence parallelism).
  for (const TpAnalysis::Linear& l : tpa.linears) {
    const Node& n = g.node(l.node);
    std::vector<Placement> p = replicated(mesh);
    for (MeshDimIdx d : data) p[static_cast<size_t>(d)] = Placement::shard(0);
    // The sequence dim of [batch, seq, features] (or of the flattened rows) over cp.
    if (r == Recipe::kCpFsdp) p[static_cast<size_t>(cp)] = Placement::shard(n.out().rank() >= 3 ? 1 : 0);
    if (tensor_parallel)
      p[static_cast<size_t>(tp)] = l.role == TpRole::kColumn
                                       ? Placement::shard(static_cast<int32_t>(n.out().rank() - 1))
                                       : Placement::partial();
    if (!valid(p, n.out(), mesh, require_divisible)) continue;
    out.use_constraints.push_back(recipe_pin("recipe-use:", n, std::move(p)));
  }
  // The batched expert matmuls run on their experts' devices: output [E, M, N] split on E over
  // ep (the tokens arrive by all-to-all) and on M (batch rows x capacity) over the others.
  for (NodeIdx i : experts.batched) {
    const Node& n = g.node(i);
    std::vector<Placement> p = replicated(mesh);
    p[static_cast<size_t>(ep)] = Placement::shard(0);
    for (MeshDimIdx d : data) {
      if (d == ep) continue;
      p[static_cast<size_t>(d)] = Placement::shard(1);
      if (!valid(p, n.out(), mesh, require_divisible)) p[static_cast<size_t>(d)] = Placement::replicate();
    }
    if (!valid(p, n.out(), mesh, require_divisible)) continue;
    out.use_constraints.push_back(recipe_pin("recipe-use:", n, std::move(p)));
  }
  if (r == Recipe::kCpFsdp) {
    pin_cp_attention(g, mesh, data, cp, tp, out);
    pin_cp_residual(g, mesh, data, cp, tensor_parallel ? tp : -1, require_divisible, out);
  }
  if (kept_whole > 0)
    out.notes.push_back(fmt::format("{} parameters too small to shard stay replicated on some dims",
                                    kept_whole));
  if (tp_kept > 0)
    out.notes.push_back(fmt::format("{} parameters do not split over tp and stay replicated there",
                                    tp_kept));
  return out;
}

namespace {

/// plan_recipe_from; `over_budget`: a recipe whose best realization does not fit is solved
/// again without the limit (RecipeResult::fits).
RecipeResult plan_recipe_impl(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                              const std::vector<Constraint>& constraints, const RecipeInspect& inspect,
                              const Plan* start, bool over_budget) {
  RecipeResult res;
  res.recipe = r;
  const auto t0 = std::chrono::steady_clock::now();
  // FSDP2-over-TP recipes need the ordered strategies for their layout (recipe_pins).
  PlannerOptions o = opt;
  o.shard_orders = opt.shard_orders || recipe_uses_shard_orders(r, mesh);
  try {
    RecipePins pins = recipe_pins(r, g, mesh, o.require_divisible, o.shard_orders);
    res.notes = pins.notes;
    res.not_applicable = pins.not_applicable;
    if (res.not_applicable.empty()) {
      ShardingOptimizer so(g, mesh, o);
      for (const Constraint& c : constraints) so.add_constraint(c);
      for (const Constraint& c : pins.constraints) so.add_constraint(c);
      for (const Constraint& c : pins.use_constraints) so.add_constraint(c);
      if (start) {
        // A recipe's plan is one assignment of the unpinned problem: starting there, the
        // optimum's search can only improve on it, even when its time limit stops the proof.
        std::vector<std::optional<Strategy>> wanted(static_cast<size_t>(g.size()));
        for (NodeIdx i = 0; i < g.size() && i < static_cast<NodeIdx>(start->nodes.size()); ++i)
          if (const auto& np = start->nodes[static_cast<size_t>(i)]) wanted[static_cast<size_t>(i)] = np->chosen;
        std::vector<StrategyIdx> choice = so.match_strategies(wanted);
        if (std::none_of(choice.begin(), choice.end(), [](StrategyIdx q) { return q < 0; }))
          so.set_warm_start(std::move(choice));
      }
      Plan plan;
      try {
        plan = so.get_solution();
      } catch (const std::runtime_error& e) {
        if (pins.use_constraints.empty()) throw;
        // Some linear cannot produce the recipe's output layout (an unusual graph): keep the
        // parameter pins and let the solver choose how the weights are used.
        for (const Constraint& c : pins.use_constraints) so.remove_constraint(c.name);
        res.notes.push_back(fmt::format("the linears' outputs could not all be pinned ({}): "
                                        "weights are used as the solver chooses",
                                        one_line(e.what())));
        plan = so.get_solution();
      }
      res.memory_limit_bytes = plan.memory_limit_bytes;
      if (over_budget && !plan.has_solution && plan.min_peak_memory_bytes >= 0) {
        // Over budget: show what the recipe would need without the limit.
        so.mutable_options().memory_limit_bytes = 0;
        plan = so.get_solution();
      }
      res.lower_bound_us = plan.lower_bound_us;
      if (!plan.has_solution) {
        res.error = fmt::format("no plan found ({})", solve_status_name(plan.status));
      } else {
        res.fits = res.memory_limit_bytes <= 0 || plan.peak_memory_bytes <= res.memory_limit_bytes;
        res.plan = std::move(plan);
        if (inspect) inspect(so, res);
      }
    }
  } catch (const std::exception& e) {
    res.error = one_line(e.what());
    res.plan.reset();
  }
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace

RecipeResult plan_recipe_from(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                              const std::vector<Constraint>& constraints,
                              const RecipeInspect& inspect, const Plan* start) {
  return plan_recipe_impl(r, g, mesh, opt, constraints, inspect, start, true);
}

RecipeResult plan_recipe(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                         const std::vector<Constraint>& constraints, const RecipeInspect& inspect) {
  return plan_recipe_impl(r, g, mesh, opt, constraints, inspect, nullptr, true);
}

RecipeResult plan_recipe_that_fits(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt) {
  return plan_recipe_impl(r, g, mesh, opt, {}, {}, nullptr, false);
}

std::vector<RecipeResult> compare_recipes(const Graph& g, const Mesh& mesh,
                                          const PlannerOptions& opt,
                                          const std::vector<Constraint>& constraints,
                                          std::vector<Recipe> recipes, int threads,
                                          const RecipeInspect& inspect) {
  if (recipes.empty()) recipes = recipes_for(g, mesh);
  std::vector<RecipeResult> results(recipes.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(recipes.size()));
  PlannerOptions o = opt;
  o.progress = nullptr;  // several solves at once: their progress lines would interleave
  // The named recipes first (in parallel), then the optimum, started from the best recipe
  // that fits: under a time limit the optimum's search then cannot end above a recipe.
  std::vector<size_t> order, optimum;
  for (size_t k = 0; k < recipes.size(); ++k)
    (recipes[k] == Recipe::kAlpa ? optimum : order).push_back(k);
  parallel_for(order.size(), threads, [&](size_t k) {
    results[order[k]] = plan_recipe(recipes[order[k]], g, mesh, o, constraints, inspect);
  });
  // A strided recipe plan cannot seed an optimum offered no shard orders (no strategy matches).
  const Plan* start = nullptr;
  for (size_t k : order) {
    const RecipeResult& r = results[k];
    if (!o.shard_orders && recipe_uses_shard_orders(r.recipe, mesh)) continue;
    if (r.plan && r.fits && (!start || r.plan->objective_us < start->objective_us)) start = &*r.plan;
  }
  for (size_t k : optimum)
    results[k] = plan_recipe_from(recipes[k], g, mesh, o, constraints, inspect, start);
  return results;
}

}  // namespace autoshard

#include "planner/parallelism.h"

#include <fmt/format.h>

#include <algorithm>

#include "cost/compute.h"

namespace autoshard {

ParallelismLabeler::ParallelismLabeler(const Graph& g, const Mesh& mesh, const Plan& plan)
    : g_(g), mesh_(mesh), plan_(plan), batch_sharded_(static_cast<size_t>(mesh.ndim()), 0) {
  // (A plan without a solution may have no nodes at all.)
  for (NodeIdx i = 0; i < g.size() && static_cast<size_t>(i) < plan.nodes.size(); ++i) {
    if (g.node(i).kind != NodeKind::kInput) continue;
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    for (MeshDimIdx d = 0; d < mesh.ndim(); ++d)
      if (np->chosen.outputs[0].placements[static_cast<size_t>(d)].is_shard())
        batch_sharded_[static_cast<size_t>(d)] = 1;
  }
}

std::string ParallelismLabeler::on_dim(NodeIdx param, MeshDimIdx dim) const {
  const Graph& g = g_;
  const Plan& plan = plan_;
  const auto& np = plan.nodes[static_cast<size_t>(param)];
  if (!np) return "?";
  const Placement& stored = np->chosen.outputs[0].placements[static_cast<size_t>(dim)];
  // How the first forward consumer reads the parameter on this dim.  Views (nn.Linear's t())
  // are looked through when they keep the placement, since a gather can sit after them.
  std::optional<Placement> used;
  bool other_input_sharded = false;  // an activation read with the weight is split on `dim`
  std::string consumer_op;
  NodeIdx cur = param;
  for (NodeIdx i = cur + 1; i < g.size() && !used; ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kOp || n.phase == Phase::kOptimizer) continue;
    for (size_t s = 0; s < n.inputs.size(); ++s)
      if (n.inputs[s].node == cur) {
        const auto& cp = plan.nodes[static_cast<size_t>(i)];
        if (!cp) break;
        Placement in = cp->chosen.inputs[s].placements[static_cast<size_t>(dim)];
        const Placement& out = cp->chosen.outputs.at(0).placements[static_cast<size_t>(dim)];
        if (is_view_op(n.op) && n.inputs.size() == 1 && in.is_shard() == out.is_shard() &&
            in.is_replicate() == out.is_replicate()) {
          cur = i;  // follow the view to its own first consumer
        } else {
          used = in;
          consumer_op = std::string(aten_packet(n.op));
          for (size_t o = 0; o < n.inputs.size(); ++o)
            if (o != s && cp->chosen.inputs[o].placements[static_cast<size_t>(dim)].is_shard())
              other_input_sharded = true;
        }
        break;
      }
  }
  const int64_t rank = g.node(param).out().rank();
  if (stored.is_shard()) {
    if (used && used->is_replicate()) return "FSDP";
    if (consumer_op == "embedding") return stored.dim == 0 ? "TP vocab-parallel" : "TP hidden-split";
    if (rank == 2 && stored.dim == 0) return "TP column";
    if (rank == 2 && stored.dim == 1) return "TP row";
    return "TP";
  }
  if (stored.is_replicate())
    return other_input_sharded || batch_sharded_[static_cast<size_t>(dim)] ? "DP" : "replicated";
  return "partial";
}

std::string ParallelismLabeler::describe(NodeIdx param) const {
  std::string s;
  for (MeshDimIdx d = 0; d < mesh_.ndim(); ++d) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{}: {}", mesh_.dim(d).name, on_dim(param, d));
  }
  return s;
}

std::string describe_parallelism(const Graph& g, const Mesh& mesh, const Plan& plan,
                                 NodeIdx param) {
  return ParallelismLabeler(g, mesh, plan).describe(param);
}

std::string parallelism_on_dim(const Graph& g, const Mesh& mesh, const Plan& plan, NodeIdx param,
                               MeshDimIdx dim) {
  return ParallelismLabeler(g, mesh, plan).on_dim(param, dim);
}

std::vector<ContextParallelUse> context_parallel_use(const Plan& plan) {
  std::vector<ContextParallelUse> out;
  for (const auto& np : plan.nodes) {
    if (!np || !np->chosen.cp.active()) continue;
    const ContextParallel& cp = np->chosen.cp;
    auto it = std::find_if(out.begin(), out.end(), [&](const ContextParallelUse& u) {
      return u.dim == cp.mesh_dim && u.kind == cp.kind && u.load_balance == cp.load_balance;
    });
    if (it == out.end()) it = out.insert(out.end(), {cp.mesh_dim, cp.kind, cp.load_balance, 0});
    ++it->nodes;
  }
  return out;
}

std::string describe_context_parallel(const Mesh& mesh, const Plan& plan) {
  std::string r;
  for (const ContextParallelUse& u : context_parallel_use(plan))
    r += fmt::format("{}{}: {} attention{} ({} attention op{})", r.empty() ? "" : "; ",
                     mesh.dim(u.dim).name, cp_kind_name(u.kind), u.load_balance ? ", load-balanced" : "",
                     u.nodes, u.nodes == 1 ? "" : "s");
  return r;
}

}  // namespace autoshard

#include "planner/parallelism.h"

#include <fmt/format.h>

#include "cost/compute.h"

namespace autoshard {

namespace {

/// Does some graph input (the batch) get sharded on this mesh dim?
bool batch_sharded_on(const Graph& g, const Plan& plan, MeshDimIdx dim) {
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (g.node(i).kind != NodeKind::kInput) continue;
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (np && np->chosen.outputs[0].placements[static_cast<size_t>(dim)].is_shard()) return true;
  }
  return false;
}

}  // namespace

std::string parallelism_on_dim(const Graph& g, const Mesh& mesh, const Plan& plan, NodeIdx param,
                               MeshDimIdx dim) {
  (void)mesh;
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
    return other_input_sharded || batch_sharded_on(g, plan, dim) ? "DP" : "replicated";
  return "partial";
}

std::string describe_parallelism(const Graph& g, const Mesh& mesh, const Plan& plan,
                                 NodeIdx param) {
  std::string s;
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{}: {}", mesh.dim(d).name, parallelism_on_dim(g, mesh, plan, param, d));
  }
  return s;
}

}  // namespace autoshard

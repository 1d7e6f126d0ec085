#include "planner/inflight_memory.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "planner/recipes.h"

namespace autoshard {

namespace {

size_t isz(int64_t i) { return static_cast<size_t>(i); }


/// What `s` leaves Partial of its output `output` (a gradient whose reduction is deferred to the
/// step's end), per device; 0 when it reduces it.
int64_t partial_output_bytes(const Strategy& s, int32_t output, const Mesh& mesh) {
  const auto& outs = s.outputs;
  if (isz(output) >= outs.size() || !outs[isz(output)].has_partial()) return 0;
  return outs[isz(output)].local_bytes(mesh);
}

/// kept_across_boundary's node `v`'s usage with `inflight` undone.
int64_t unscaled(int64_t usage, double inflight) {
  return inflight == 1.0 ? usage : static_cast<int64_t>(std::floor(static_cast<double>(usage) / inflight));
}

}  // namespace

int64_t forward_backward_boundary(const Graph& g) {
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).phase == Phase::kBackward && g.node(i).kind == NodeKind::kOp) return i;
  return g.size();
}

std::vector<PNodeIdx> live_at_boundary(const Graph& g, const BuiltProblem& bp) {
  const int64_t t = forward_backward_boundary(g);
  std::vector<PNodeIdx> r;
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const ProblemNode& n = bp.problem.nodes[isz(v)];
    if (n.start <= t && t < n.end) r.push_back(v);
  }
  return r;
}

int64_t boundary_usage(const Graph& g, const BuiltProblem& bp, const std::vector<StrategyIdx>& choice) {
  int64_t u = 0;
  for (PNodeIdx v : live_at_boundary(g, bp)) u += bp.problem.nodes[isz(v)].usages[isz(choice[isz(v)])];
  return u;
}

void price_boundary_usage(const Graph& g, const Mesh& mesh, double us_per_byte, BuiltProblem& bp) {
  // Priced bytes are no compute: kept out of the overlap objective's windows as op_comm is.
  auto price = [&](PNodeIdx v, const std::vector<double>& bytes) {
    ProblemNode& n = bp.problem.nodes[isz(v)];
    std::vector<double> kept(n.costs.size());
    for (size_t q = 0; q < n.costs.size(); ++q) {
      const double c = us_per_byte * bytes[q];
      kept[q] = bp.op_comm_us(v, static_cast<StrategyIdx>(q)) + c;
      n.costs[q] += c;
    }
    bp.set_op_comm(v, std::make_shared<const std::vector<double>>(std::move(kept)));
  };
  for (PNodeIdx v : live_at_boundary(g, bp)) {
    const auto& u = bp.problem.nodes[isz(v)].usages;
    price(v, std::vector<double>(u.begin(), u.end()));
  }
  // The gradients summed over the step: held from the first microbatch's backward on, so at
  // every later microbatch's t* too (a rank's need counts them beside its peak).
  for (const TensorRef& r : deferred_gradient_tensors(g)) {
    const PNodeIdx v = bp.pnode[isz(r.node)];
    if (v < 0) continue;
    const StrategyList& strats = bp.strategies[isz(v)];
    std::vector<double> bytes(bp.problem.nodes[isz(v)].costs.size(), 0.0);
    for (size_t q = 0; q < bytes.size() && q < strats.size(); ++q)
      bytes[q] = static_cast<double>(partial_output_bytes(strats[q], r.output, mesh));
    if (std::any_of(bytes.begin(), bytes.end(), [](double b) { return b > 0; })) price(v, bytes);
  }
}

std::vector<PNodeIdx> kept_across_boundary(const Graph& g, const BuiltProblem& bp) {
  const int64_t t = forward_backward_boundary(g);
  std::vector<PNodeIdx> r;
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const ProblemNode& n = bp.problem.nodes[isz(v)];
    // A recomputation node's graph node is its owner's (gap, tail) or the tensor it keeps.
    const NodeIdx o = isz(v) < bp.graph_node.size() ? bp.graph_node[isz(v)] : kNoNode;
    if (o < 0 || !(n.start < t && n.end > t)) continue;  // shadows live past the schedule
    const Node& x = g.node(o);
    if (x.kind == NodeKind::kParameter || x.kind == NodeKind::kBuffer) continue;
    // A stage's received gradient is a placeholder too: it arrives in the backward.
    if (x.kind == NodeKind::kInput && x.phase == Phase::kBackward) continue;
    r.push_back(v);
  }
  return r;
}

void scale_inflight_usages(const Graph& g, double inflight, BuiltProblem& bp) {
  for (PNodeIdx v : kept_across_boundary(g, bp))
    for (int64_t& u : bp.problem.nodes[isz(v)].usages)
      u = static_cast<int64_t>(std::ceil(static_cast<double>(u) * inflight));
}

InflightMemory inflight_memory(const Graph& g, const BuiltProblem& bp, double inflight,
                               const std::vector<StrategyIdx>& choice) {
  const Problem& p = bp.problem;
  std::vector<int64_t> usage(isz(p.num_nodes()));
  for (size_t i = 0; i < usage.size(); ++i) usage[i] = p.nodes[i].usages[isz(choice[i])];
  InflightMemory m;
  for (PNodeIdx v : kept_across_boundary(g, bp)) {
    usage[isz(v)] = unscaled(usage[isz(v)], inflight);
    m.kept_bytes += usage[isz(v)];
  }
  m.microbatch_peak = peak_of_usages(p, usage, g.size() + 1);  // shadows live past the schedule
  for (PNodeIdx v : live_at_boundary(g, bp)) m.boundary_bytes += usage[isz(v)];
  m.peak = m.microbatch_peak + static_cast<int64_t>(std::ceil((inflight - 1) * static_cast<double>(m.kept_bytes)));
  return m;
}

int64_t gathered_copy_bytes(const ShardingSpec& have, const Mesh& mesh) {
  const MeshDimIdx tp = tensor_parallel_dim(mesh);
  ShardingSpec whole = have;
  bool gathered = false;
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) {
    Placement& p = whole.placements[isz(d)];
    if (d == tp || !p.is_shard()) continue;
    p = Placement::replicate();
    gathered = true;
  }
  return gathered ? whole.local_bytes(mesh) : 0;
}

std::vector<NodeIdx> gathered_parameters(const Graph& g) {
  std::vector<char> read(isz(g.size()), 0);
  for (const Node& x : g.nodes)
    if (x.kind == NodeKind::kOp && x.phase != Phase::kOptimizer)
      for (const TensorRef& r : x.inputs)
        if (g.node(r.node).kind == NodeKind::kParameter) read[isz(r.node)] = 1;
  std::vector<NodeIdx> out;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (read[isz(i)]) out.push_back(i);
  return out;
}

void add_gathered_usages(const Graph& g, const Mesh& mesh, BuiltProblem& bp) {
  for (NodeIdx i : gathered_parameters(g)) {
    const PNodeIdx v = bp.pnode[isz(i)];
    if (v < 0) continue;
    auto& u = bp.problem.nodes[isz(v)].usages;
    const StrategyList& sl = bp.strategies[isz(v)];
    for (size_t q = 0; q < u.size(); ++q) u[q] += gathered_copy_bytes(sl[q].outputs.at(0), mesh);
  }
}

int64_t gathered_parameter_bytes(const Graph& g, const Plan& plan, const Mesh& mesh) {
  int64_t bytes = 0;
  for (NodeIdx i : gathered_parameters(g))
    if (const auto& np = plan.nodes[isz(i)]) bytes += gathered_copy_bytes(np->chosen.outputs.at(0), mesh);
  return bytes;
}

std::vector<TensorRef> deferred_gradient_tensors(const Graph& g) {
  std::vector<TensorRef> out;
  std::vector<char> seen(isz(g.size()), 0);  // a tensor counted once
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.phase != Phase::kOptimizer) continue;
    for (const TensorRef& r : x.inputs) {
      if (g.node(r.node).phase != Phase::kBackward || seen[isz(r.node)]) continue;
      seen[isz(r.node)] = 1;
      out.push_back(r);
    }
  }
  return out;
}

int64_t deferred_gradient_bytes(const Graph& g, const Plan& plan, const Mesh& mesh) {
  int64_t bytes = 0;
  for (const TensorRef& r : deferred_gradient_tensors(g)) {
    if (const auto& np = plan.nodes[isz(r.node)]) bytes += partial_output_bytes(np->chosen, r.output, mesh);
  }
  return bytes;
}

}  // namespace autoshard

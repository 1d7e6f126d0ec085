#include "planner/twin_views.h"

#include <string>
#include <tuple>

namespace autoshard {

std::vector<NodeIdx> graph_twins(const Graph& g) {
  std::vector<NodeIdx> twin(static_cast<size_t>(g.size()), kNoNode);
  std::map<std::tuple<NodeIdx, int32_t, int, std::string>, std::vector<NodeIdx>> by_input;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.inputs.size() != 1 || !is_alias_op(x.op)) continue;
    auto& seen = by_input[{x.inputs[0].node, x.inputs[0].output, static_cast<int>(x.phase), x.op}];
    for (NodeIdx a : seen)
      if (g.node(a).attrs == x.attrs && g.node(a).outputs == x.outputs) {
        twin[static_cast<size_t>(i)] = a;
        break;
      }
    if (twin[static_cast<size_t>(i)] == kNoNode) seen.push_back(i);
  }
  return twin;
}

std::vector<PNodeIdx> twin_views(const Graph& g, const std::vector<PNodeIdx>& pnode,
                                 const std::vector<int32_t>& template_of) {
  // Each group of twins (graph_twins) is tied to its first unpinned member of the template.
  const std::vector<NodeIdx> first = graph_twins(g);
  std::vector<PNodeIdx> twin(static_cast<size_t>(g.size()), -1);
  std::map<NodeIdx, PNodeIdx> rep;  // group (its first node) -> problem node tied to
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx v = pnode[static_cast<size_t>(i)];
    if (v < 0 || template_of[static_cast<size_t>(v)] < 0) continue;
    const NodeIdx group = first[static_cast<size_t>(i)] == kNoNode ? i : first[static_cast<size_t>(i)];
    auto [it, fresh] = rep.try_emplace(group, v);
    if (!fresh && template_of[static_cast<size_t>(it->second)] == template_of[static_cast<size_t>(v)])
      twin[static_cast<size_t>(i)] = it->second;
  }
  return twin;
}

void mark_twins(const BuiltProblem& bp, Plan& plan) {
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const BuiltProblem::EdgeOrigin& o = bp.edge_origin[k];
    if (o.slot != kTwinSlot || static_cast<size_t>(o.consumer) >= plan.nodes.size()) continue;
    if (auto& np = plan.nodes[static_cast<size_t>(o.consumer)])
      np->twin = bp.graph_node[static_cast<size_t>(bp.edges[k].u)];
  }
}

std::shared_ptr<const std::vector<Cost>> TwinTies::diagonal(size_t n) {
  auto& m = by_size_[n];
  if (!m) {
    std::vector<Cost> c(n * n, kInfCost);
    for (size_t q = 0; q < n; ++q) c[q * n + q] = 0;
    m = std::make_shared<const std::vector<Cost>>(std::move(c));
  }
  return m;
}

}  // namespace autoshard

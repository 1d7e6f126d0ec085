#include "planner/cp_memory.h"

#include <map>
#include <memory>
#include <vector>

#include "planner/cp_cost.h"

namespace autoshard {

void add_cp_buffer_nodes(const Graph& g, const Mesh& mesh, BuiltProblem& bp) {
  // Repeated layers share strategy lists: their usage vectors and tie matrices are built once.
  std::map<const Strategy*, std::pair<std::vector<int64_t>, std::shared_ptr<const std::vector<Cost>>>> built;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx owner = bp.pnode[static_cast<size_t>(i)];
    if (owner < 0 || g.node(i).kind != NodeKind::kOp) continue;
    const StrategyList list = bp.strategies[static_cast<size_t>(owner)];  // shared, not copied
    if (list.size() == 0) continue;
    auto it = built.find(&list.vec().front());
    if (it == built.end()) {
      std::vector<int64_t> usages;
      usages.reserve(list.size());
      bool any = false;
      for (const Strategy& s : list.vec()) {
        usages.push_back(cp_buffer_bytes(g.node(i), s, mesh));
        any = any || usages.back() > 0;
      }
      std::shared_ptr<const std::vector<Cost>> tie;
      if (any) {
        const size_t k = list.size();
        std::vector<Cost> m(k * k, kInfCost);
        for (size_t a = 0; a < k; ++a) m[a * k + a] = 0;
        tie = std::make_shared<const std::vector<Cost>>(std::move(m));
      }
      it = built.emplace(&list.vec().front(), std::make_pair(std::move(usages), std::move(tie))).first;
    }
    if (!it->second.second) continue;  // no CP strategy: nothing held
    ProblemNode pn;
    pn.name = g.node(i).name + "#cp_buffers";
    pn.start = i;
    pn.end = i + 1;
    pn.costs.assign(list.size(), 0.0);
    pn.usages = it->second.first;
    const PNodeIdx v = bp.problem.num_nodes();
    bp.problem.nodes.push_back(std::move(pn));
    bp.graph_node.push_back(i);
    bp.strategies.push_back(list);
    bp.edges.push_back({owner, v, it->second.second});
    bp.edge_origin.push_back({i, kMemoryTieSlot, TensorRef{i, 0}});
    bp.cp_buffers.push_back({v, owner});
  }
}

std::vector<BuiltProblem::CpBuffer> cp_buffers_from_edges(const Graph& g, const BuiltProblem& bp) {
  std::vector<BuiltProblem::CpBuffer> r;
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const BuiltProblem::EdgeOrigin& o = bp.edge_origin[k];
    if (o.slot == kMemoryTieSlot && g.node(o.consumer).kind == NodeKind::kOp)
      r.push_back({bp.edges[k].v, bp.edges[k].u});
  }
  return r;
}

std::vector<StrategyIdx> least_usage_layout(const BuiltProblem& bp) {
  std::vector<StrategyIdx> c = least_usage_choice(bp.problem);
  for (const BuiltProblem::CpBuffer& b : bp.cp_buffers) {
    const std::vector<int64_t>& u = bp.problem.nodes[static_cast<size_t>(b.node)].usages;
    const StrategyIdx owner = c[static_cast<size_t>(b.owner)];
    if (u[static_cast<size_t>(owner)] == u[static_cast<size_t>(c[static_cast<size_t>(b.node)])])
      c[static_cast<size_t>(b.node)] = owner;
  }
  return c;
}

}  // namespace autoshard

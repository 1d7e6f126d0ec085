#include "planner/twin_views.h"

#include <tuple>

namespace autoshard {

std::vector<PNodeIdx> twin_views(const Graph& g, const std::vector<PNodeIdx>& pnode,
                                 const std::vector<int32_t>& template_of) {
  std::vector<PNodeIdx> twin(static_cast<size_t>(g.size()), -1);
  std::map<std::tuple<int32_t, NodeIdx, int32_t, int>, PNodeIdx> first;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const PNodeIdx v = pnode[static_cast<size_t>(i)];
    if (v < 0 || x.kind != NodeKind::kOp || x.inputs.size() != 1 || !is_alias_op(x.op)) continue;
    const int32_t t = template_of[static_cast<size_t>(v)];
    if (t < 0) continue;
    const TensorRef& in = x.inputs[0];
    auto [it, fresh] = first.try_emplace(std::make_tuple(t, in.node, in.output, static_cast<int>(x.phase)), v);
    if (!fresh) twin[static_cast<size_t>(i)] = it->second;
  }
  return twin;
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

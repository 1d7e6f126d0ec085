#include "planner/live_intervals.h"

#include <algorithm>

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

}  // namespace autoshard

#include "planner/prefetch_schedule.h"

#include <algorithm>
#include <stdexcept>

#include "planner/overlap.h"

namespace autoshard {

int32_t prefetch_segment(int32_t consumer_segment, int32_t prefetch_layers) {
  if (consumer_segment < 0) return -1;
  return std::max(0, consumer_segment - std::max(0, prefetch_layers));
}

PrefetchSchedule prefetch_schedule(const Graph& g, const Plan& plan, int32_t prefetch_layers) {
  if (!plan.has_solution) throw std::runtime_error("prefetch_schedule: the plan has no solution");
  PrefetchSchedule s;
  s.prefetch_layers = prefetch_layers;
  int32_t n_segments = 0;
  const std::vector<int32_t> segment = layer_segments(g, &n_segments);
  const std::vector<char> view = placeholder_views(g);
  std::vector<NodeIdx> first_op(static_cast<size_t>(n_segments), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t k = segment[static_cast<size_t>(i)];
    if (k >= 0 && first_op[static_cast<size_t>(k)] == kNoNode) first_op[static_cast<size_t>(k)] = i;
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& consumer = plan.nodes[static_cast<size_t>(i)];
    if (x.kind != NodeKind::kOp || !consumer) continue;
    for (size_t slot = 0; slot < x.inputs.size(); ++slot) {
      const TensorRef& r = x.inputs[slot];
      const Node& producer = g.node(r.node);
      if (producer.kind == NodeKind::kOp && !view[static_cast<size_t>(r.node)]) continue;
      const auto& from_plan = plan.nodes[static_cast<size_t>(r.node)];
      if (!from_plan || slot >= consumer->chosen.inputs.size()) continue;
      const ShardingSpec& from = from_plan->chosen.outputs.at(static_cast<size_t>(r.output));
      const ShardingSpec& to = consumer->chosen.inputs[slot];
      if (from.to_string() == to.to_string()) continue;  // no collective to issue
      const int32_t k = prefetch_segment(segment[static_cast<size_t>(i)], prefetch_layers);
      s.entries.push_back({i, static_cast<int32_t>(slot), k < 0 ? kNoNode : first_op[static_cast<size_t>(k)]});
    }
  }
  return s;
}

}  // namespace autoshard

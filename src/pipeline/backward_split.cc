#include "pipeline/backward_split.h"

#include <algorithm>

namespace autoshard {

std::vector<StepPart> step_parts(const StageGraph& sg) {
  const Graph& g = sg.graph;
  const auto n = static_cast<size_t>(g.size());
  std::vector<StepPart> part(n, StepPart::kForward);
  for (size_t i = 0; i < n; ++i) {
    if (g.nodes[i].phase == Phase::kOptimizer) part[i] = StepPart::kOptimizer;
    if (g.nodes[i].phase == Phase::kBackward) part[i] = StepPart::kWeightGrad;
  }
  // B: the backward nodes the sent gradients depend on (walked through backward nodes only).
  std::vector<NodeIdx> todo;
  for (const TensorRef& t : sg.sent)
    if (g.node(t.node).phase == Phase::kBackward) todo.push_back(t.node);
  while (!todo.empty()) {
    const NodeIdx x = todo.back();
    todo.pop_back();
    if (part[static_cast<size_t>(x)] != StepPart::kWeightGrad) continue;
    part[static_cast<size_t>(x)] = StepPart::kInputGrad;
    for (const TensorRef& in : g.node(x).inputs) todo.push_back(in.node);
  }
  return part;
}

std::vector<TensorRef> handed_to_weight_grads(const StageGraph& sg, const std::vector<StepPart>& part) {
  const Graph& g = sg.graph;
  const auto uses = g.uses();
  std::vector<TensorRef> r;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (part[static_cast<size_t>(i)] != StepPart::kInputGrad) continue;
    const auto& us = uses[static_cast<size_t>(i)];
    for (size_t k = 0; k < g.node(i).outputs.size(); ++k)
      if (std::any_of(us.begin(), us.end(), [&](const Graph::Use& u) {
            return u.output == static_cast<int32_t>(k) && part[static_cast<size_t>(u.consumer)] == StepPart::kWeightGrad;
          }))
        r.push_back({i, static_cast<int32_t>(k)});
  }
  return r;
}

PartTimes part_times(const StageGraph& sg, const Plan& plan, const Mesh& stage_mesh) {
  const Graph& g = sg.graph;
  const std::vector<StepPart> part = step_parts(sg);
  PartTimes t;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    const double us = np->compute_us + np->comm_us;
    switch (part[static_cast<size_t>(i)]) {
      case StepPart::kForward: t.forward_us += us; break;
      case StepPart::kInputGrad: t.input_grad_us += us; break;
      case StepPart::kWeightGrad: t.weight_grad_us += us; break;
      case StepPart::kOptimizer: break;
    }
  }
  for (const TensorRef& h : handed_to_weight_grads(sg, part)) {
    const auto& np = plan.nodes[static_cast<size_t>(h.node)];
    if (np && static_cast<size_t>(h.output) < np->chosen.outputs.size())
      t.kept_for_w_bytes += np->chosen.outputs[static_cast<size_t>(h.output)].local_bytes(stage_mesh);
  }
  return t;
}

}  // namespace autoshard

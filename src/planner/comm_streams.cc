#include "planner/comm_streams.h"

namespace autoshard {

std::vector<std::vector<int32_t>> view_inputs(const Graph& g, const std::vector<CommJob>& jobs,
                                              const std::map<std::pair<NodeIdx, int32_t>, int32_t>& job_of_slot) {
  std::vector<std::vector<int32_t>> out(jobs.size());
  for (size_t id = 0; id < jobs.size(); ++id) {
    if (!jobs[id].prefetchable) continue;
    std::vector<NodeIdx> stack{jobs[id].producer};
    while (!stack.empty()) {
      const NodeIdx p = stack.back();
      stack.pop_back();
      if (g.node(p).kind != NodeKind::kOp) continue;
      for (int32_t s = 0; s < static_cast<int32_t>(g.node(p).inputs.size()); ++s) {
        auto it = job_of_slot.find({p, s});
        if (it != job_of_slot.end()) out[id].push_back(it->second);
        stack.push_back(g.node(p).inputs[static_cast<size_t>(s)].node);
      }
    }
  }
  return out;
}

}  // namespace autoshard

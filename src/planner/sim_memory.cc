#include "planner/sim_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "planner/cp_cost.h"

namespace autoshard {
const NodePlan& sim_node_plan(const Graph& g, const Plan& plan, NodeIdx i) {
  const auto& np = plan.nodes[static_cast<size_t>(i)];
  if (!np) throw std::runtime_error(fmt::format("simulate_step: node '{}' has no placement", g.node(i).name));
  return *np;
}

void memory_timeline(const Graph& g, const BuiltProblem& bp, const Plan& plan, const Mesh& mesh,
                     const std::vector<StrategyIdx>& aux_choice, const std::vector<CommJob>& jobs,
                     const ReplayTimes& r, StepSimulation& sim) {

  const size_t n = static_cast<size_t>(g.size());
  std::vector<int64_t> delta(n + 2, 0);
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const NodeIdx gi = bp.graph_node[static_cast<size_t>(v)];
    // The recomputation's nodes (aux_choice) carry its lifetimes: a freed activation's
    // tail from b, the gap while it is still kept, the inputs kept until b.
    const StrategyIdx aux = aux_choice.empty() ? -1 : aux_choice[static_cast<size_t>(v)];
    if (aux < 0 && bp.pnode[static_cast<size_t>(gi)] != v) continue;  // shadow of a memory constraint
    const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(v)];
    const int64_t u = pn.usages[static_cast<size_t>(aux >= 0 ? aux : sim_node_plan(g, plan, gi).strategy)];
    const int64_t s = std::clamp<int64_t>(pn.start, 0, static_cast<int64_t>(n));
    const int64_t e = std::clamp<int64_t>(pn.end, 0, static_cast<int64_t>(n));
    if (e <= s) continue;
    delta[static_cast<size_t>(s)] += u;
    delta[static_cast<size_t>(e)] -= u;
  }
  struct Change {
    double time;
    int order;  // 0 alloc, 1 base, 2 free, 3 an op's own buffers (after the base it joins)
    int64_t amount;
    bool held = false;  ///< a context-parallel attention's K/V buffers, not a redistribution's
  };
  std::vector<Change> changes;
  int64_t base = 0;
  for (size_t t = 0; t < n; ++t) {
    int64_t next = base + delta[t];
    // Time point b starts with the recomputation that runs before its op.
    auto b = r.block_start.find(static_cast<NodeIdx>(t));
    const double at = b != r.block_start.end() ? b->second : r.node_start[t];
    if (next != base || t == 0) changes.push_back({at, 1, next});
    base = next;
  }
  for (const CommJob& job : jobs) {
    if (job.start_us < 0) continue;  // a recomputation's job that never ran
    const double until = job.recompute ? r.redone_end[static_cast<size_t>(job.consumer)]
                         : g.node(job.consumer).kind == NodeKind::kOp
                             ? r.node_end[static_cast<size_t>(job.consumer)]
                             : sim.step_us;
    changes.push_back({job.start_us, 0, job.buffer_bytes});
    changes.push_back({std::max(until, job.end_us), 2, -job.buffer_bytes});
  }
  // A context-parallel attention's K/V buffers (planner/cp_memory.h), while each execution
  // of it runs (its re-execution too: the runtime gathers again).
  for (const SimEvent& e : sim.streams[0]) {
    const int64_t held = cp_buffer_bytes(g.node(e.node), sim_node_plan(g, plan, e.node).chosen, mesh);
    if (held <= 0) continue;
    changes.push_back({e.start_us, 3, held, true});
    changes.push_back({e.end_us, 2, -held, true});
  }
  std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
    return a.time != b.time ? a.time < b.time : a.order < b.order;
  });
  int64_t level_base = 0, buffers = 0, held = 0;
  for (const Change& c : changes) {
    if (c.order == 1)
      level_base = c.amount;
    else
      (c.held ? held : buffers) += c.amount;
    const int64_t total = level_base + buffers + held;
    sim.prefetch_peak_bytes = std::max(sim.prefetch_peak_bytes, buffers);
    sim.peak_memory_bytes = std::max(sim.peak_memory_bytes, total);
    if (!sim.memory.empty() && sim.memory.back().time_us == c.time)
      sim.memory.back().bytes = total;
    else if (sim.memory.empty() || sim.memory.back().bytes != total)
      sim.memory.push_back({c.time, total});
  }
}

}  // namespace autoshard

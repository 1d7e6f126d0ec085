#pragma once
/// The step simulator's communication side (planner/simulate.h): the redistributions of a plan
/// as jobs of collective steps, and the streams that run them.
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "cost/collective.h"
#include "ir/graph.h"
#include "planner/simulate.h"

namespace autoshard {

/// One redistribution the simulator runs: an edge's collectives with their real times.
struct CommJob {
  int32_t edge = -1;
  NodeIdx producer = kNoNode;
  NodeIdx consumer = kNoNode;
  int32_t slot = -1;
  int64_t buffer_bytes = 0;  ///< destination buffer per device
  struct Step {
    MeshDimIdx dim = 0;
    Collective kind = Collective::kAllGather;
    double bytes = 0;
    double us = 0;
  };
  std::vector<Step> steps;
  bool prefetchable = false;
  bool recompute = false;  ///< a recomputation's redistribution (edge slot kRecomputeSlot)
  int32_t gang = -1;       ///< its bucket: the members' k-th steps run as one merged collective
  double start_us = -1;  ///< first collective start (set when issued)
  double end_us = -1;    ///< last collective end
};

/// The communication streams, one per mesh dim, each running its collectives one at a time in
/// the order they become ready (one NCCL communicator per dim, FIFO).  A redistribution's first
/// step is ready when it is issued (and the redistributions it reads from have finished); each
/// later step when the step before it ends: the runtime issues DTensor's next collective of a
/// redistribution after waiting the previous one, so a step still waiting on another dim never
/// holds its stream's place in line (a gradient's P(sum)P(sum) -> RR does not block the tp
/// stream while its dp all-reduce queues behind the layer's reduce-scatters).
class CommStreams {
 public:
  CommStreams(std::vector<CommJob>& jobs, StepSimulation& sim)
      : jobs_(jobs), sim_(sim), free_(sim.streams.size(), 0.0) {
    for (const CommJob& j : jobs_)
      if (j.gang >= 0) ++gang_size_[j.gang];
  }

  /// Job `id` is issued at `ready`; its first step is ready then, or once every job in
  /// `after` has finished (what it moves is computed from their results).
  void issue(int32_t id, double ready, bool prefetched, const std::vector<int32_t>& after = {}) {
    Waiting w{id, ready, prefetched, 0};
    for (int32_t d : after) {
      const CommJob& dep = jobs_[static_cast<size_t>(d)];
      if (dep.end_us >= 0) {
        w.ready = std::max(w.ready, dep.end_us);
      } else {
        ++w.left;
        dependents_[d].push_back(waiting_.size());
      }
    }
    waiting_.push_back(w);
    if (w.left == 0) release(waiting_.size() - 1);
  }
  /// When job `id` ends, running every step that becomes ready before its own steps.
  double finish(int32_t id) {
    while (jobs_[static_cast<size_t>(id)].end_us < 0 && step_any()) {
    }
    return jobs_[static_cast<size_t>(id)].end_us;
  }
  /// Runs every step ready by `t`.
  void run_until(double t) {
    while (!pending_.empty() && pending_.top().ready <= t) run_next();
  }
  /// The time `stream` is free (context-parallel transfers occupy it directly).
  double& free_at(size_t stream) { return free_[stream]; }
  double last_end() {
    while (step_any()) {
    }
    double t = 0;
    for (double f : free_) t = std::max(t, f);
    return t;
  }

 private:
  struct Pending {
    double ready;
    int64_t seq;  ///< ties in ready time keep issue order
    int32_t job;
    size_t step;
    bool prefetched;
    bool operator>(const Pending& o) const { return std::tie(ready, seq) > std::tie(o.ready, o.seq); }
  };

  struct Waiting {
    int32_t job;
    double ready;
    bool prefetched;
    int32_t left;  ///< jobs in `after` still running
  };

  /// Runs the next ready step; with none pending, releases a job whose dependency never runs
  /// (a recomputation's job not issued), so nothing waits forever.  False when all is done.
  bool step_any() {
    if (!pending_.empty()) {
      run_next();
      return true;
    }
    for (auto& [gang, held] : held_)  // a member never issued: run the others as they are
      if (!held.empty()) {
        for (const Pending& p : held) pending_.push(p);
        held.clear();
        return true;
      }
    for (size_t w = 0; w < waiting_.size(); ++w)
      if (waiting_[w].left > 0) {
        waiting_[w].left = 0;
        release(w);
        return true;
      }
    return false;
  }
  void release(size_t w) {
    const Waiting& x = waiting_[w];
    enqueue({x.ready, seq_++, x.job, 0, x.prefetched});
  }
  /// A bucket's members wait for each other: their k-th steps are one merged collective in
  /// the runtime (autoshard.buckets), ready when the last member's is, run back to back.
  void enqueue(Pending p) {
    const int32_t gang = jobs_[static_cast<size_t>(p.job)].gang;
    if (gang < 0) {
      pending_.push(p);
      return;
    }
    std::vector<Pending>& held = held_[gang];
    held.push_back(p);
    if (static_cast<int32_t>(held.size()) < gang_size_[gang]) return;
    double ready = 0;
    for (const Pending& h : held) ready = std::max(ready, h.ready);
    for (Pending& h : held) {
      h.ready = ready;
      pending_.push(h);
    }
    held.clear();
  }
  void run_next() {
    const Pending p = pending_.top();
    pending_.pop();
    run_step(p.job, p.step, p.ready, p.prefetched);
  }
  void run_step(int32_t id, size_t s, double ready, bool prefetched) {
    CommJob& job = jobs_[static_cast<size_t>(id)];
    const CommJob::Step& st = job.steps[s];
    const size_t stream = static_cast<size_t>(1 + st.dim);
    SimEvent e;
    e.stream = static_cast<StreamIdx>(stream);
    e.start_us = std::max(ready, free_[stream]);
    e.end_us = e.start_us + st.us;
    free_[stream] = e.end_us;
    if (s == 0) job.start_us = e.start_us;
    e.node = job.consumer;
    e.edge = job.edge;
    e.step = static_cast<int32_t>(s);
    e.collective = st.kind;
    e.bytes = st.bytes;
    e.prefetched = prefetched;
    e.recomputed = job.recompute;
    sim_.streams[stream].push_back(e);
    sim_.comm_us += st.us;
    if (s + 1 < job.steps.size()) {
      enqueue({e.end_us, seq_++, id, s + 1, prefetched});
      return;
    }
    job.end_us = e.end_us;
    auto it = dependents_.find(id);
    if (it == dependents_.end()) return;
    for (size_t w : it->second) {
      Waiting& x = waiting_[w];
      x.ready = std::max(x.ready, job.end_us);
      if (x.left > 0 && --x.left == 0) release(w);
    }
    dependents_.erase(it);
  }

  std::vector<CommJob>& jobs_;
  StepSimulation& sim_;
  std::vector<double> free_;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> pending_;
  std::vector<Waiting> waiting_;
  std::map<int32_t, int32_t> gang_size_;             ///< bucket -> members
  std::map<int32_t, std::vector<Pending>> held_;     ///< bucket -> members' steps ready so far
  std::map<int32_t, std::vector<size_t>> dependents_;  ///< job -> waiting entries on it
  int64_t seq_ = 0;
};

/// Per job, the jobs it waits for when prefetched: a view of placeholders (a weight's `t`)
/// reads its inputs at their planned placements, so what it moves exists once their own
/// redistributions have finished (the weight's gather before the transposed weight's move).
std::vector<std::vector<int32_t>> view_inputs(
    const Graph& g, const std::vector<CommJob>& jobs,
    const std::map<std::pair<NodeIdx, int32_t>, int32_t>& job_of_slot);

}  // namespace autoshard

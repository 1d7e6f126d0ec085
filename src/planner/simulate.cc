#include "planner/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "cost/compute.h"
#include "cost/redistribute.h"
#include "planner/comm_streams.h"
#include "planner/cp_cost.h"
#include "planner/prefetch_schedule.h"
#include "planner/recompute.h"
#include "planner/sharding_optimizer.h"
#include "planner/sim_memory.h"

namespace autoshard {

double model_flops(const Graph& g) {
  double total = 0;
  std::vector<TensorMeta> ins;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kOp) continue;
    ins.clear();
    for (const TensorRef& r : n.inputs) ins.push_back(g.meta(r));
    total += op_flops(n, ins, n.outputs);
  }
  return total;
}

DType dominant_flops_dtype(const Graph& g) {
  std::map<DType, double> by_dtype;
  std::vector<TensorMeta> ins;
  for (const Node& n : g.nodes) {
    if (n.kind != NodeKind::kOp || n.outputs.empty()) continue;
    ins.clear();
    for (const TensorRef& r : n.inputs) ins.push_back(g.meta(r));
    by_dtype[n.out().dtype] += op_flops(n, ins, n.outputs);
  }
  DType best = DType::kBF16;
  double most = -1;
  for (const auto& [t, f] : by_dtype)
    if (f > most) {
      most = f;
      best = t;
    }
  return best;
}

double mfu(double flops, int64_t devices, double peak_flops_per_s, double step_us) {
  if (!(step_us > 0) || devices <= 0 || !(peak_flops_per_s > 0)) return 0;
  return flops / (static_cast<double>(devices) * peak_flops_per_s * step_us * 1e-6);
}

namespace {


/// The collectives of one redistribution with their real times (see the header).
std::vector<CommJob::Step> comm_steps(const ShardingSpec& from, const ShardingSpec& to,
                                      const Mesh& mesh, CommModel model) {
  std::vector<CommJob::Step> steps;
  const double total = redistribute_cost_us(from, to, mesh, model);
  if (!(total > 0) || !std::isfinite(total)) return steps;
  const RedistributePlan rp = plan_redistribute(from, to, mesh);
  double sum = 0;
  for (int32_t k = 0; k < rp.num_steps; ++k) {
    const CommStep& s = rp.steps[static_cast<size_t>(k)];
    double us = collective_time_us(s.kind, s.bytes, mesh, s.dim, CommModel::kNccl);
    steps.push_back({s.dim, s.kind, s.bytes, us});
    sum += us;
  }
  if (steps.empty() || !(sum > 0)) {
    // The dtensor profile charges a move the nccl schedule does locally: one step on the first
    // mesh dim whose placement changes.
    MeshDimIdx d = 0;
    for (MeshDimIdx m = 0; m < mesh.ndim(); ++m)
      if (!(from.placements[static_cast<size_t>(m)] == to.placements[static_cast<size_t>(m)])) {
        d = m;
        break;
      }
    steps.assign(1, {d, Collective::kAllGather, static_cast<double>(to.local_bytes(mesh)), total});
    return steps;
  }
  for (CommJob::Step& s : steps) s.us *= total / sum;
  return steps;
}

/// Aux nodes of recomputation grouped by region.
std::vector<std::vector<const BuiltProblem::RecomputeAux*>> aux_by_region(const BuiltProblem& bp) {
  std::vector<std::vector<const BuiltProblem::RecomputeAux*>> out(bp.recompute_regions.size());
  for (const auto& a : bp.recompute_aux) out.at(static_cast<size_t>(a.region)).push_back(&a);
  return out;
}

/// The full assignment of the recomputation's problem nodes (decisions, aux; -1 elsewhere).  A
/// plan carries graph node strategies only, so each region's mode is read back from
/// plan.recomputed_nodes: the first mode re-executing exactly those of its ops.  Modes that
/// re-execute the same ops build the same aux usages, so the pick does not matter.
std::vector<StrategyIdx> recompute_choice(const Graph& g, const BuiltProblem& bp, const Plan& plan) {
  std::vector<StrategyIdx> choice(bp.problem.nodes.size(), -1);
  const std::set<std::string> redone(plan.recomputed_nodes.begin(), plan.recomputed_nodes.end());
  const auto by_region = aux_by_region(bp);
  auto matches = [&](size_t r, RecomputePolicy m) {
    for (const auto* a : by_region[r]) {
      if (a->role != BuiltProblem::RecomputeAux::kGap) continue;
      const NodeIdx v = bp.graph_node[static_cast<size_t>(a->owner)];
      if (recompute_executes(m, bp, v) != (redone.count(g.node(v).name) > 0)) return false;
    }
    return true;
  };
  for (size_t r = 0; r < bp.recompute_regions.size(); ++r) {
    const auto& reg = bp.recompute_regions[r];
    StrategyIdx k = 0;
    while (k < static_cast<StrategyIdx>(reg.modes.size()) && !matches(r, reg.modes[static_cast<size_t>(k)])) ++k;
    if (k == static_cast<StrategyIdx>(reg.modes.size()))
      throw std::runtime_error(fmt::format("simulate_step: the plan's recomputed nodes fit no mode of {}.{}",
                                           reg.layer, reg.region));
    choice[static_cast<size_t>(reg.decision)] = k;
  }
  for (const auto& a : bp.recompute_aux) {
    const auto& np = plan.nodes.at(static_cast<size_t>(bp.graph_node[static_cast<size_t>(a.owner)]));
    if (!np) throw std::runtime_error("simulate_step: a recomputed node has no placement");
    const StrategyIdx m = choice[static_cast<size_t>(bp.recompute_regions[static_cast<size_t>(a.region)].decision)];
    choice[static_cast<size_t>(a.node)] = m * bp.problem.nodes[static_cast<size_t>(a.owner)].num_strategies() + np->strategy;
  }
  return choice;
}

/// Point b of each region (recompute.h): where the backward first reads a tensor the region
/// saved, so where the recomputation runs.  Its aux nodes carry it (a tail starts at b, a keep
/// ends at b + 1, a gap that frees ends at b); a region with none of them (its only
/// re-executed ops are read by nothing the backward waits for) falls back to the first
/// backward reader of its re-executed ops.
std::vector<int64_t> region_points(const Graph& g, const BuiltProblem& bp) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> first_bwd(static_cast<size_t>(g.size()), kNever);
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kOp && g.node(i).phase == Phase::kBackward)
      for (const TensorRef& r : g.node(i).inputs)
        first_bwd[static_cast<size_t>(r.node)] = std::min<int64_t>(first_bwd[static_cast<size_t>(r.node)], i);
  std::vector<int64_t> at(bp.recompute_regions.size(), kNever), fallback = at;
  for (const auto& a : bp.recompute_aux) {
    const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(a.node)];
    int64_t& b = at[static_cast<size_t>(a.region)];
    if (a.role == BuiltProblem::RecomputeAux::kTail) b = std::min(b, pn.start);
    if (a.role == BuiltProblem::RecomputeAux::kKeep) b = std::min(b, pn.end - 1);
    if (a.role == BuiltProblem::RecomputeAux::kGap && pn.start < pn.end) b = std::min(b, pn.end);
    const NodeIdx v = bp.graph_node[static_cast<size_t>(a.owner)];
    fallback[static_cast<size_t>(a.region)] =
        std::min(fallback[static_cast<size_t>(a.region)], first_bwd[static_cast<size_t>(v)]);
  }
  for (size_t r = 0; r < at.size(); ++r) {
    if (at[r] == kNever) at[r] = fallback[r];
    if (at[r] == kNever) at[r] = g.size();  // read by nothing: at the end of the step
  }
  return at;
}

/// What the plan re-executes, as the simulator replays it.
struct RecomputeSchedule {
  std::vector<StrategyIdx> choice;  ///< recompute_choice (empty without recomputation)
  std::vector<double> us;           ///< per graph node: recomputation time; < 0: not re-executed
  std::map<NodeIdx, std::vector<NodeIdx>> before;  ///< point b -> re-executed ops, graph order
  std::vector<NodeIdx> point;       ///< per graph node: its point b when re-executed, else -1
};

RecomputeSchedule recompute_schedule(const Graph& g, const BuiltProblem& bp, const Plan& plan) {
  RecomputeSchedule rs;
  rs.us.assign(static_cast<size_t>(g.size()), -1.0);
  rs.point.assign(static_cast<size_t>(g.size()), -1);
  if (bp.recompute_aux.empty()) return rs;
  rs.choice = recompute_choice(g, bp, plan);
  const std::vector<int64_t> points = region_points(g, bp);
  for (const auto& a : bp.recompute_aux) {
    if (a.role != BuiltProblem::RecomputeAux::kGap) continue;
    const auto& reg = bp.recompute_regions[static_cast<size_t>(a.region)];
    const NodeIdx v = bp.graph_node[static_cast<size_t>(a.owner)];
    const RecomputePolicy m = reg.modes[static_cast<size_t>(rs.choice[static_cast<size_t>(reg.decision)])];
    if (!recompute_executes(m, bp, v)) continue;
    // The gap node charges the recomputation: the owner's compute under its strategy.
    const ProblemNode& gap = bp.problem.nodes[static_cast<size_t>(a.node)];
    rs.us[static_cast<size_t>(v)] = gap.costs[static_cast<size_t>(rs.choice[static_cast<size_t>(a.node)])];
    rs.point[static_cast<size_t>(v)] = static_cast<NodeIdx>(points[static_cast<size_t>(a.region)]);
    rs.before[static_cast<NodeIdx>(points[static_cast<size_t>(a.region)])].push_back(v);
  }
  for (auto& [b, ops] : rs.before) {
    std::sort(ops.begin(), ops.end());
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  }
  return rs;
}

/// Input slot of a recomputation edge: its origin keeps the producer only, so the k-th such
/// edge of (consumer, producer) is the k-th input slot of the consumer reading that producer
/// (recompute.cc adds them in the order of the tensor-use edges they repeat).
int32_t recompute_slot(const Node& consumer, const TensorRef& producer, int32_t ordinal) {
  for (int32_t s = 0; s < static_cast<int32_t>(consumer.inputs.size()); ++s)
    if (consumer.inputs[static_cast<size_t>(s)] == producer && ordinal-- == 0) return s;
  throw std::runtime_error(fmt::format("simulate_step: '{}' has no such recomputed input", consumer.name));
}

/// The redistributions of a plan and where the replay issues and waits for each.
struct IssuePlan {
  std::vector<CommJob> jobs;
  std::vector<std::vector<int32_t>> issued_after;       ///< by producer op
  std::vector<std::vector<int32_t>> issued_after_redo;  ///< by re-executed producer (backward uses)
  std::vector<std::vector<int32_t>> released_before;    ///< prefetches by issue op
  std::vector<int32_t> released_first;                  ///< before any op
  std::map<std::pair<NodeIdx, int32_t>, int32_t> job_of_slot;
  std::vector<std::vector<int32_t>> waited_before;  ///< by the op a rank waits before (wait_point)
  std::vector<std::vector<int32_t>> recompute_in;   ///< recomputation's jobs by consumer
};

/// Builds the IssuePlan edge by edge in the problem's order: each redistribution's collectives,
/// its bucket, and the op after or before which the runtime issues it.
class JobPlanner {
 public:
  JobPlanner(ShardingOptimizer& opt, const Plan& plan, const SimulationOptions& o,
             const RecomputeSchedule& rs, const PrefetchPoints& points)
      : g_(opt.graph()), mesh_(opt.mesh()), bp_(opt.problem()), plan_(plan), o_(o),
        model_(opt.options().comm_model), rs_(rs), points_(points), placeholder_view_(placeholder_views(g_)) {
    const size_t n = static_cast<size_t>(g_.size());
    for (auto* v : {&out_.issued_after, &out_.issued_after_redo, &out_.released_before, &out_.waited_before,
                    &out_.recompute_in})
      v->resize(n);
    // Gradient reductions of one bucket are issued together once its last gradient exists.
    std::map<int32_t, NodeIdx> last;
    const std::vector<ReductionEntry> rb = reduction_buckets(g_, plan, o.bucketing);
    for (const ReductionEntry& r : rb) last[r.bucket] = std::max(last[r.bucket], r.producer);
    for (const ReductionEntry& r : rb) reduction_of_[r.param] = {r.bucket, last[r.bucket]};
  }

  IssuePlan build() && {
    for (size_t k = 0; k < bp_.edge_origin.size(); ++k) add(k);
    // Prefetches are issued in consumer order (edge order within a consumer).
    for (auto& v : out_.released_before)
      std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
        return out_.jobs[static_cast<size_t>(a)].consumer < out_.jobs[static_cast<size_t>(b)].consumer;
      });
    return std::move(out_);
  }

 private:
  const NodePlan& node_plan(NodeIdx i) const { return sim_node_plan(g_, plan_, i); }

  /// Problem edge k's redistribution, if it moves a tensor.
  void add(size_t k) {
    const auto& origin = bp_.edge_origin[k];
    // Tensor uses (slot >= 0), gradient agreements (-1) and the redistributions of ops the
    // plan re-executes; other origins (parameter-memory shadow ties, recomputation ties) move
    // no tensor.
    const bool recompute = origin.slot == kRecomputeSlot;
    if (recompute && rs_.us[static_cast<size_t>(origin.consumer)] < 0) return;
    if (origin.slot < -1 && !recompute) return;
    const NodeIdx pu = origin.producer.node;
    const ShardingSpec& from = node_plan(pu).chosen.outputs.at(static_cast<size_t>(origin.producer.output));
    ShardingSpec to;
    int32_t slot = origin.slot;
    if (recompute) {
      const auto key = std::make_tuple(origin.consumer, origin.producer.node, origin.producer.output);
      slot = recompute_slot(g_.node(origin.consumer), origin.producer, recompute_seen_[key]++);
    }
    if (slot >= 0) {
      to = node_plan(origin.consumer).chosen.inputs.at(static_cast<size_t>(slot));
    } else {
      to = node_plan(origin.consumer).chosen.outputs.at(0);
      to.meta = g_.meta(origin.producer);
    }
    CommJob job;
    job.steps = comm_steps(from, to, mesh_, model_);
    if (job.steps.empty()) return;
    job.edge = static_cast<int32_t>(k);
    job.producer = pu;
    job.consumer = origin.consumer;
    job.slot = slot;
    job.buffer_bytes = to.local_bytes(mesh_);
    job.prefetchable = g_.node(pu).kind != NodeKind::kOp || placeholder_view_[static_cast<size_t>(pu)];
    job.recompute = recompute;
    const int32_t id = static_cast<int32_t>(out_.jobs.size());
    if (recompute)  // issued by the recomputation (Replay::recompute_before)
      out_.recompute_in[static_cast<size_t>(origin.consumer)].push_back(id);
    else
      place(job, id, origin, from, to);
    out_.jobs.push_back(std::move(job));
  }

  /// Where the runtime waits for job `id` and after or before which op it issues it.
  void place(CommJob& job, int32_t id, const BuiltProblem::EdgeOrigin& origin, const ShardingSpec& from,
             const ShardingSpec& to) {
    const NodeIdx pu = origin.producer.node;
    if (origin.slot >= 0) out_.job_of_slot[{origin.consumer, origin.slot}] = id;
    if (const NodeIdx w = wait_point(g_, origin.consumer, origin.slot); w != kNoNode)
      out_.waited_before[static_cast<size_t>(w)].push_back(id);  // the schedule's wait point
    const NodeIdx redo_at = rs_.point[static_cast<size_t>(pu)];
    const auto reduction = origin.slot == -1 ? reduction_of_.find(origin.consumer) : reduction_of_.end();
    if (reduction != reduction_of_.end() && o_.bucketing == Bucketing::kLayer) {
      const auto [bucket, after] = reduction->second;
      job.gang = gang(fmt::format("grad|{}", bucket));
      if (!reduction_buckets_seen_.insert(bucket).second) credit_latency(job);
      out_.issued_after[static_cast<size_t>(after)].push_back(id);
    } else if (!job.prefetchable && redo_at >= 0 && origin.consumer >= redo_at)
      out_.issued_after_redo[static_cast<size_t>(pu)].push_back(id);  // reads the recomputed tensor
    else if (!job.prefetchable && g_.node(pu).phase != Phase::kBackward &&
             g_.node(origin.consumer).phase == Phase::kBackward)
      // A forward value the backward reads: the runtime redistributes it at its use
      // (autoshard.schedule.apply_issue_points), not during the forward.
      out_.released_before[static_cast<size_t>(origin.consumer)].push_back(id);
    else if (!job.prefetchable)
      out_.issued_after[static_cast<size_t>(pu)].push_back(id);
    else {
      const NodeIdx at = points_.issue_at(g_, origin.consumer, o_.prefetch_layers);  // the runtime's rule too
      join_bucket(job, at, from, to, g_.meta(origin.producer));
      (at == kNoNode ? out_.released_first : out_.released_before[static_cast<size_t>(at)]).push_back(id);
    }
  }

  int32_t gang(const std::string& key) {
    return gang_of_.try_emplace(key, static_cast<int32_t>(gang_of_.size())).first->second;
  }
  void credit_latency(CommJob& job) const {
    for (CommJob::Step& st : job.steps) st.us -= bucket_latency_credit_us(st.kind, st.dim, mesh_, model_, st.us);
  }
  /// A prefetched job issued before op `at` joins its bucket: after the bucket's first
  /// member it no longer pays its steps' fixed latency (prefetch_schedule.h "Buckets").
  void join_bucket(CommJob& job, NodeIdx at, const ShardingSpec& from, ShardingSpec to, const TensorMeta& meta) {
    if (o_.bucketing != Bucketing::kLayer) return;
    to.meta = meta;
    const std::string key = bucket_key(at, from, to);
    job.gang = gang(key);
    if (buckets_seen_.insert(key).second) return;
    credit_latency(job);
  }

  const Graph& g_;
  const Mesh& mesh_;
  const BuiltProblem& bp_;
  const Plan& plan_;
  const SimulationOptions& o_;
  const CommModel model_;
  const RecomputeSchedule& rs_;
  const PrefetchPoints& points_;
  const std::vector<char> placeholder_view_;
  std::map<std::tuple<NodeIdx, NodeIdx, int32_t>, int32_t> recompute_seen_;  // -> ordinal
  std::map<NodeIdx, std::pair<int32_t, NodeIdx>> reduction_of_;  // param -> (bucket, issue after)
  std::set<int32_t> reduction_buckets_seen_;
  std::set<std::string> buckets_seen_;
  std::map<std::string, int32_t> gang_of_;  // bucket -> CommJob::gang
  IssuePlan out_;
};

/// Replays the step in the runtime's order: one compute stream, and the mesh dims' comm
/// streams running the IssuePlan's jobs where it issues them.
class Replay {
 public:
  Replay(const Graph& g, const Plan& plan, const Mesh& mesh, CommModel model, const RecomputeSchedule& rs,
         IssuePlan& ip, const std::vector<int32_t>& layer, StepSimulation& sim)
      : g_(g), plan_(plan), mesh_(mesh), model_(model), rs_(rs), ip_(ip), layer_(layer), sim_(sim),
        upstream_(view_inputs(g, ip.jobs, ip.job_of_slot)), streams_(ip.jobs, sim),
        node_start_(static_cast<size_t>(g.size()), 0.0), node_end_(static_cast<size_t>(g.size()), 0.0),
        redone_end_(static_cast<size_t>(g.size()), -1.0) {}

  /// When each op and each recomputation ran (after run()).
  ReplayTimes times() const { return {node_start_, node_end_, redone_end_, block_start_}; }

  void run() {
    for (int32_t id : ip_.released_first) issue(id, 0.0, true);
    for (NodeIdx i : run_order(g_)) {  // the order placements.json's schedule gives the runtime
      const Node& x = g_.node(i);
      const size_t iu = static_cast<size_t>(i);
      if (x.kind != NodeKind::kOp) {
        if (x.kind == NodeKind::kOutput) recompute_before(i);
        node_start_[iu] = node_end_[iu] = x.kind == NodeKind::kOutput ? cursor_ : 0.0;
        continue;
      }
      for (int32_t id : ip_.released_before[iu])
        issue(id, cursor_, layer_[static_cast<size_t>(ip_.jobs[static_cast<size_t>(id)].consumer)] > layer_[iu]);
      recompute_before(i);
      // The op starts once its direct inputs exist and the redistributions the schedule waits
      // for here have arrived (a redistributed input is waited at its wait point, not later).
      double ready = 0;
      for (int32_t id : ip_.waited_before[iu]) ready = std::max(ready, streams_.finish(id));
      for (int32_t s = 0; s < static_cast<int32_t>(x.inputs.size()); ++s)
        if (!ip_.job_of_slot.count({i, s}))
          ready = std::max(ready, node_end_[static_cast<size_t>(x.inputs[static_cast<size_t>(s)].node)]);
      node_start_[iu] = compute(i, ready, sim_node_plan(g_, plan_, i).compute_us, false);
      node_end_[iu] = cursor_;
      cp_transfers(i, node_start_[iu]);
      for (int32_t id : ip_.issued_after[iu]) issue(id, cursor_, false);
    }
    recompute_before(g_.size());  // a region whose point is past the schedule
    sim_.step_us = std::max(cursor_, streams_.last_end());
  }

 private:
  void issue(int32_t id, double ready, bool prefetched) {
    streams_.issue(id, ready, prefetched, prefetched ? upstream_[static_cast<size_t>(id)] : std::vector<int32_t>{});
  }
  /// One compute-stream event from `ready` (the inputs' arrival) for `dur`; returns its start.
  double compute(NodeIdx i, double ready, double dur, bool recomputed) {
    const double start = std::max(cursor_, ready);
    cursor_ = start + dur;
    sim_.compute_us += dur;
    if (dur > 0) {
      SimEvent e;
      e.stream = 0;
      e.start_us = start;
      e.end_us = cursor_;
      e.node = i;
      e.recomputed = recomputed;
      sim_.streams[0].push_back(e);
    }
    return start;
  }
  /// The recomputation at point b: each re-executed op in graph order, after its inputs --
  /// its recomputed producers, or its redistributions issued once their source is there (the
  /// saved tensor at once, a recomputed one when it is recomputed).
  void recompute_before(NodeIdx b) {
    auto it = rs_.before.find(b);
    if (it == rs_.before.end()) return;
    block_start_[b] = cursor_;
    const double begin = cursor_;
    for (NodeIdx v : it->second) {
      const Node& x = g_.node(v);
      const std::vector<int32_t>& in = ip_.recompute_in[static_cast<size_t>(v)];
      for (int32_t id : in) {
        const double src = redone_end_[static_cast<size_t>(ip_.jobs[static_cast<size_t>(id)].producer)];
        issue(id, std::max(begin, src), false);
      }
      double ready = 0;
      for (int32_t s = 0; s < static_cast<int32_t>(x.inputs.size()); ++s) {
        const NodeIdx u = x.inputs[static_cast<size_t>(s)].node;
        double arrive = std::max(node_end_[static_cast<size_t>(u)], redone_end_[static_cast<size_t>(u)]);
        for (int32_t id : in)
          if (ip_.jobs[static_cast<size_t>(id)].slot == s) arrive = streams_.finish(id);
        ready = std::max(ready, arrive);
      }
      compute(v, ready, rs_.us[static_cast<size_t>(v)], true);
      redone_end_[static_cast<size_t>(v)] = cursor_;
      for (int32_t id : ip_.issued_after_redo[static_cast<size_t>(v)]) issue(id, cursor_, false);
    }
  }
  /// A context-parallel attention's own K/V transfers (planner/cp_cost.h): its node cost
  /// already holds their exposed part, so they delay nothing here; they occupy its mesh dim's
  /// stream from the op's start (other collectives queue behind them) and show in the trace.
  void cp_transfers(NodeIdx i, double start) {
    const Strategy& st = sim_node_plan(g_, plan_, i).chosen;
    if (!st.cp.active()) return;
    const NodeCost nc = node_cost(g_.node(i), st, mesh_, model_);
    if (nc.transfer_us <= 0) return;
    const size_t stream = static_cast<size_t>(1 + st.cp.mesh_dim);
    SimEvent e;
    e.stream = static_cast<StreamIdx>(stream);
    streams_.run_until(start);
    e.start_us = std::max(start, streams_.free_at(stream));
    e.end_us = e.start_us + nc.transfer_us;
    e.node = i;
    e.context_parallel = true;
    e.bytes = cp_attention_input(g_.node(i), st, mesh_).kv_bytes;
    streams_.free_at(stream) = e.end_us;
    sim_.streams[stream].push_back(e);
    sim_.comm_us += nc.transfer_us;
  }

  const Graph& g_;
  const Plan& plan_;
  const Mesh& mesh_;
  const CommModel model_;
  const RecomputeSchedule& rs_;
  IssuePlan& ip_;
  const std::vector<int32_t>& layer_;
  StepSimulation& sim_;
  const std::vector<std::vector<int32_t>> upstream_;
  CommStreams streams_;
  double cursor_ = 0;
  std::vector<double> node_start_, node_end_;
  std::vector<double> redone_end_;         ///< end of a node's recomputation
  std::map<NodeIdx, double> block_start_;  ///< point b -> start of the recomputation there
};

}  // namespace

StepSimulation simulate_step(ShardingOptimizer& opt, const Plan& plan, const SimulationOptions& o) {
  if (!plan.has_solution) throw std::runtime_error("simulate_step: the plan has no solution");
  const Graph& g = opt.graph();
  const Mesh& mesh = opt.mesh();
  const BuiltProblem& bp = opt.problem();
  if (plan.nodes.size() != static_cast<size_t>(g.size()))
    throw std::runtime_error("simulate_step: the plan is for another graph");

  StepSimulation sim;
  sim.additive_us = plan.additive_us;
  sim.stream_names.push_back("compute");
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) sim.stream_names.push_back("comm " + mesh.dim(d).name);
  sim.streams.resize(sim.stream_names.size());

  const PrefetchPoints points(g);
  sim.num_layers = points.num_segments();
  const RecomputeSchedule rs = recompute_schedule(g, bp, plan);
  IssuePlan ip = JobPlanner(opt, plan, o, rs, points).build();
  Replay replay(g, plan, mesh, opt.options().comm_model, rs, ip, points.segment(), sim);
  replay.run();
  sim.exposed_comm_us = std::max(0.0, sim.step_us - sim.compute_us);
  for (auto& s : sim.streams)
    std::stable_sort(s.begin(), s.end(),
                     [](const SimEvent& a, const SimEvent& b) { return a.start_us < b.start_us; });
  memory_timeline(g, bp, plan, mesh, rs.choice, ip.jobs, replay.times(), sim);

  sim.model_flops = model_flops(g);
  sim.mfu = mfu(sim.model_flops, mesh.num_devices(), mesh.hardware().peak_flops(dominant_flops_dtype(g)),
                sim.step_us);
  return sim;
}

}  // namespace autoshard

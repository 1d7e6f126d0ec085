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

/// A plan's node as simulate_step reads it: every node the simulation meets has a placement.
const NodePlan& planned(const Graph& g, const Plan& plan, NodeIdx i) {
  const auto& np = plan.nodes[static_cast<size_t>(i)];
  if (!np) throw std::runtime_error(fmt::format("simulate_step: node '{}' has no placement", g.node(i).name));
  return *np;
}

/// When the replayed step ran each op and each recomputation.
struct ReplayTimes {
  const std::vector<double>& node_start;
  const std::vector<double>& node_end;
  const std::vector<double>& redone_end;          ///< end of a node's recomputation, or -1
  const std::map<NodeIdx, double>& block_start;  ///< point b -> start of the recomputation there
};

/// The step's memory timeline into sim.memory and its peaks.  The base is the plan's
/// live-interval usage per time point (node index), each point at the time its op (or the
/// recomputation before it) started; above it, the redistributions' destination buffers while
/// their jobs run and until their consumer ends, and context-parallel attentions' K/V buffers.
/// `aux_choice`: the recomputation's problem nodes' strategies (recompute_schedule).
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
    const int64_t u = pn.usages[static_cast<size_t>(aux >= 0 ? aux : planned(g, plan, gi).strategy)];
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
    const int64_t held = cp_buffer_bytes(g.node(e.node), planned(g, plan, e.node).chosen, mesh);
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

}  // namespace

StepSimulation simulate_step(ShardingOptimizer& opt, const Plan& plan, const SimulationOptions& o) {
  if (!plan.has_solution) throw std::runtime_error("simulate_step: the plan has no solution");
  const Graph& g = opt.graph();
  const Mesh& mesh = opt.mesh();
  const BuiltProblem& bp = opt.problem();
  const size_t n = static_cast<size_t>(g.size());
  if (plan.nodes.size() != n) throw std::runtime_error("simulate_step: the plan is for another graph");
  auto node_plan = [&](NodeIdx i) -> const NodePlan& { return planned(g, plan, i); };

  StepSimulation sim;
  sim.additive_us = plan.additive_us;
  sim.stream_names.push_back("compute");
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) sim.stream_names.push_back("comm " + mesh.dim(d).name);
  sim.streams.resize(sim.stream_names.size());

  // Layers (prefetch unit) of the op nodes.
  const std::vector<int32_t> layer = layer_segments(g, &sim.num_layers);
  const NodeIdx first_backward = first_backward_op(g);
  std::vector<NodeIdx> segment_start(static_cast<size_t>(std::max(sim.num_layers, 1)), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t k = layer[static_cast<size_t>(i)];
    if (k >= 0 && segment_start[static_cast<size_t>(k)] == kNoNode) segment_start[static_cast<size_t>(k)] = i;
  }

  const std::vector<char> placeholder_view = placeholder_views(g);

  const RecomputeSchedule rs = recompute_schedule(g, bp, plan);
  std::vector<std::vector<int32_t>> recompute_in(n);  // recomputation's jobs by consumer
  std::map<std::tuple<NodeIdx, NodeIdx, int32_t>, int32_t> recompute_seen;  // -> ordinal

  // Redistributions.
  std::vector<CommJob> jobs;
  std::vector<std::vector<int32_t>> issued_after(n);                      // by producer op
  std::vector<std::vector<int32_t>> issued_after_redo(n);  // by re-executed producer (backward uses)
  std::vector<std::vector<int32_t>> released_before(n);                  // prefetches by issue op
  std::vector<int32_t> released_first;                                    // before any op
  std::map<std::pair<NodeIdx, int32_t>, int32_t> job_of_slot;
  std::vector<std::vector<int32_t>> waited_before(n);  // by the op a rank waits before (wait_point)
  std::set<std::string> buckets_seen;
  // Gradient reductions of one bucket are issued together once its last gradient exists.
  std::map<NodeIdx, std::pair<int32_t, NodeIdx>> reduction_of;  // param -> (bucket, issue after)
  {
    std::map<int32_t, NodeIdx> last;
    const std::vector<ReductionEntry> rb = reduction_buckets(g, plan, o.bucketing);
    for (const ReductionEntry& r : rb) last[r.bucket] = std::max(last[r.bucket], r.producer);
    for (const ReductionEntry& r : rb) reduction_of[r.param] = {r.bucket, last[r.bucket]};
  }
  std::set<int32_t> reduction_buckets_seen;
  std::map<std::string, int32_t> gang_of;  // bucket -> CommJob::gang
  /// A prefetched job issued before op `at` joins its bucket: after the bucket's first
  /// member it no longer pays its steps' fixed latency (prefetch_schedule.h "Buckets").
  auto join_bucket = [&](CommJob& job, NodeIdx at, const ShardingSpec& from, ShardingSpec to,
                         const TensorMeta& meta) {
    if (o.bucketing != Bucketing::kLayer) return;
    to.meta = meta;
    const std::string key = bucket_key(at, from, to);
    job.gang = gang_of.try_emplace(key, static_cast<int32_t>(gang_of.size())).first->second;
    if (buckets_seen.insert(key).second) return;
    for (CommJob::Step& st : job.steps)
      st.us -= bucket_latency_credit_us(st.kind, st.dim, mesh, opt.options().comm_model, st.us);
  };
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& origin = bp.edge_origin[k];
    // Tensor uses (slot >= 0), gradient agreements (-1) and the redistributions of ops the
    // plan re-executes; other origins (parameter-memory shadow ties, recomputation ties) move
    // no tensor.
    const bool recompute = origin.slot == kRecomputeSlot;
    if (recompute && rs.us[static_cast<size_t>(origin.consumer)] < 0) continue;
    if (origin.slot < -1 && !recompute) continue;
    const NodeIdx pu = origin.producer.node;
    const NodePlan& up = node_plan(pu);
    const ShardingSpec& from = up.chosen.outputs.at(static_cast<size_t>(origin.producer.output));
    ShardingSpec to;
    int32_t slot = origin.slot;
    if (recompute) {
      const auto key = std::make_tuple(origin.consumer, origin.producer.node, origin.producer.output);
      slot = recompute_slot(g.node(origin.consumer), origin.producer, recompute_seen[key]++);
    }
    if (slot >= 0) {
      to = node_plan(origin.consumer).chosen.inputs.at(static_cast<size_t>(slot));
    } else {
      to = node_plan(origin.consumer).chosen.outputs.at(0);
      to.meta = g.meta(origin.producer);
    }
    CommJob job;
    job.steps = comm_steps(from, to, mesh, opt.options().comm_model);
    if (job.steps.empty()) continue;
    job.edge = static_cast<int32_t>(k);
    job.producer = pu;
    job.consumer = origin.consumer;
    job.slot = slot;
    job.buffer_bytes = to.local_bytes(mesh);
    job.prefetchable = g.node(pu).kind != NodeKind::kOp || placeholder_view[static_cast<size_t>(pu)];
    job.recompute = recompute;
    const int32_t id = static_cast<int32_t>(jobs.size());
    if (recompute) {  // issued by the recomputation (below)
      recompute_in[static_cast<size_t>(origin.consumer)].push_back(id);
      jobs.push_back(std::move(job));
      continue;
    }
    if (origin.slot >= 0) job_of_slot[{origin.consumer, origin.slot}] = id;
    if (const NodeIdx w = wait_point(g, origin.consumer, origin.slot); w != kNoNode)
      waited_before[static_cast<size_t>(w)].push_back(id);  // the schedule's wait point
    const int32_t cl = layer[static_cast<size_t>(origin.consumer)];
    const NodeIdx redo_at = rs.point[static_cast<size_t>(pu)];
    const auto reduction = origin.slot == -1 ? reduction_of.find(origin.consumer) : reduction_of.end();
    if (reduction != reduction_of.end() && o.bucketing == Bucketing::kLayer) {
      const auto [bucket, after] = reduction->second;
      job.gang = gang_of.try_emplace(fmt::format("grad|{}", bucket), static_cast<int32_t>(gang_of.size()))
                     .first->second;
      if (!reduction_buckets_seen.insert(bucket).second)
        for (CommJob::Step& st : job.steps)
          st.us -= bucket_latency_credit_us(st.kind, st.dim, mesh, opt.options().comm_model, st.us);
      issued_after[static_cast<size_t>(after)].push_back(id);
    } else if (!job.prefetchable && redo_at >= 0 && origin.consumer >= redo_at)
      issued_after_redo[static_cast<size_t>(pu)].push_back(id);  // reads the recomputed tensor
    else if (!job.prefetchable && g.node(pu).phase != Phase::kBackward &&
             g.node(origin.consumer).phase == Phase::kBackward)
      // A forward value the backward reads: the runtime redistributes it at its use
      // (autoshard.schedule.apply_issue_points), not during the forward.
      released_before[static_cast<size_t>(origin.consumer)].push_back(id);
    else if (!job.prefetchable)
      issued_after[static_cast<size_t>(pu)].push_back(id);
    else {
      const int32_t k = prefetch_segment(cl, o.prefetch_layers);  // the runtime's rule too
      NodeIdx at = k < 0 ? kNoNode : segment_start[static_cast<size_t>(k)];
      if (g.node(origin.consumer).phase == Phase::kBackward && first_backward != kNoNode &&
          (at == kNoNode || at < first_backward))
        at = first_backward;
      join_bucket(job, at, from, to, g.meta(origin.producer));
      (at == kNoNode ? released_first : released_before[static_cast<size_t>(at)]).push_back(id);
    }
    jobs.push_back(std::move(job));
  }
  // Prefetches are issued in consumer order (edge order within a consumer).
  for (auto& v : released_before)
    std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
      return jobs[static_cast<size_t>(a)].consumer < jobs[static_cast<size_t>(b)].consumer;
    });

  const std::vector<std::vector<int32_t>> upstream = view_inputs(g, jobs, job_of_slot);
  CommStreams streams(jobs, sim);
  auto issue = [&](int32_t id, double ready, bool prefetched) {
    streams.issue(id, ready, prefetched, prefetched ? upstream[static_cast<size_t>(id)] : std::vector<int32_t>{});
  };

  for (int32_t id : released_first) issue(id, 0.0, true);
  std::vector<double> node_start(n, 0.0), node_end(n, 0.0);
  std::vector<double> redone_end(n, -1.0);  // end of a node's recomputation
  std::map<NodeIdx, double> block_start;     // point b -> start of the recomputation there
  double cursor = 0;
  /// One compute-stream event from `ready` (the inputs' arrival) for `dur`.
  auto compute = [&](NodeIdx i, double ready, double dur, bool recomputed) {
    const double start = std::max(cursor, ready);
    cursor = start + dur;
    sim.compute_us += dur;
    if (dur > 0) {
      SimEvent e;
      e.stream = 0;
      e.start_us = start;
      e.end_us = cursor;
      e.node = i;
      e.recomputed = recomputed;
      sim.streams[0].push_back(e);
    }
    return start;
  };
  /// The recomputation at point b: each re-executed op in graph order, after its inputs --
  /// its recomputed producers, or its redistributions issued once their source is there (the
  /// saved tensor at once, a recomputed one when it is recomputed).
  auto recompute_before = [&](NodeIdx b) {
    auto it = rs.before.find(b);
    if (it == rs.before.end()) return;
    block_start[b] = cursor;
    const double begin = cursor;
    for (NodeIdx v : it->second) {
      const Node& x = g.node(v);
      for (int32_t id : recompute_in[static_cast<size_t>(v)]) {
        const double src = redone_end[static_cast<size_t>(jobs[static_cast<size_t>(id)].producer)];
        issue(id, std::max(begin, src), false);
      }
      double ready = 0;
      for (int32_t s = 0; s < static_cast<int32_t>(x.inputs.size()); ++s) {
        const NodeIdx u = x.inputs[static_cast<size_t>(s)].node;
        double arrive = std::max(node_end[static_cast<size_t>(u)], redone_end[static_cast<size_t>(u)]);
        for (int32_t id : recompute_in[static_cast<size_t>(v)])
          if (jobs[static_cast<size_t>(id)].slot == s) arrive = streams.finish(id);
        ready = std::max(ready, arrive);
      }
      compute(v, ready, rs.us[static_cast<size_t>(v)], true);
      redone_end[static_cast<size_t>(v)] = cursor;
      for (int32_t id : issued_after_redo[static_cast<size_t>(v)]) issue(id, cursor, false);
    }
  };
  /// A context-parallel attention's own K/V transfers (planner/cp_cost.h): its node cost
  /// already holds their exposed part, so they delay nothing here; they occupy its mesh dim's
  /// stream from the op's start (other collectives queue behind them) and show in the trace.
  auto cp_transfers = [&](NodeIdx i, double start) {
    const Strategy& st = node_plan(i).chosen;
    if (!st.cp.active()) return;
    const NodeCost nc = node_cost(g.node(i), st, mesh, opt.options().comm_model);
    if (nc.transfer_us <= 0) return;
    const size_t stream = static_cast<size_t>(1 + st.cp.mesh_dim);
    SimEvent e;
    e.stream = static_cast<StreamIdx>(stream);
    streams.run_until(start);
    e.start_us = std::max(start, streams.free_at(stream));
    e.end_us = e.start_us + nc.transfer_us;
    e.node = i;
    e.context_parallel = true;
    e.bytes = cp_attention_input(g.node(i), st, mesh).kv_bytes;
    streams.free_at(stream) = e.end_us;
    sim.streams[stream].push_back(e);
    sim.comm_us += nc.transfer_us;
  };
  for (NodeIdx i : run_order(g)) {  // the order placements.json's schedule gives the runtime
    const Node& x = g.node(i);
    const size_t iu = static_cast<size_t>(i);
    if (x.kind != NodeKind::kOp) {
      if (x.kind == NodeKind::kOutput) recompute_before(i);
      node_start[iu] = node_end[iu] = x.kind == NodeKind::kOutput ? cursor : 0.0;
      continue;
    }
    for (int32_t id : released_before[iu])
      issue(id, cursor, layer[static_cast<size_t>(jobs[static_cast<size_t>(id)].consumer)] > layer[iu]);
    recompute_before(i);
    // The op starts once its direct inputs exist and the redistributions the schedule waits
    // for here have arrived (a redistributed input is waited at its wait point, not later).
    double ready = 0;
    for (int32_t id : waited_before[iu]) ready = std::max(ready, streams.finish(id));
    for (int32_t s = 0; s < static_cast<int32_t>(x.inputs.size()); ++s)
      if (!job_of_slot.count({i, s}))
        ready = std::max(ready, node_end[static_cast<size_t>(x.inputs[static_cast<size_t>(s)].node)]);
    node_start[iu] = compute(i, ready, node_plan(i).compute_us, false);
    node_end[iu] = cursor;
    cp_transfers(i, node_start[iu]);
    for (int32_t id : issued_after[iu]) issue(id, cursor, false);
  }
  recompute_before(g.size());  // a region whose point is past the schedule
  sim.step_us = std::max(cursor, streams.last_end());
  sim.exposed_comm_us = std::max(0.0, sim.step_us - sim.compute_us);
  for (auto& s : sim.streams)
    std::stable_sort(s.begin(), s.end(),
                     [](const SimEvent& a, const SimEvent& b) { return a.start_us < b.start_us; });

  memory_timeline(g, bp, plan, mesh, rs.choice, jobs, {node_start, node_end, redone_end, block_start}, sim);

  sim.model_flops = model_flops(g);
  sim.mfu = mfu(sim.model_flops, mesh.num_devices(), mesh.hardware().peak_flops(dominant_flops_dtype(g)),
                sim.step_us);
  return sim;
}

}  // namespace autoshard

#include "planner/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "planner/pipeline_dp.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {

constexpr double kPipeInf = std::numeric_limits<double>::infinity();
size_t psz(int64_t i) { return static_cast<size_t>(i); }

/// Stage kinds of the cost tables.
enum StageKind : int32_t { kStageFirst = 0, kStageMid = 1, kStageLast = 2, kStageBoth = 3 };

StageKind kind_of(int32_t s, int32_t S) {
  if (S == 1) return kStageBoth;
  return s == 0 ? kStageFirst : s == S - 1 ? kStageLast : kStageMid;
}

/// Seconds a send of `bytes` takes over the pp dim's link.
double p2p_time_us(const Mesh& mesh, int32_t pp, double bytes) {
  const MeshDim& d = mesh.dim(pp);
  return d.latency_us + bytes / (d.busbw_gbps * 1e3);
}

/// The figures of a solved stage problem: sends, once-per-step work, kept activations.  The
/// plan's objective already holds the sends (PlannerOptions::output_costs).
void stage_figures(const Mesh& full, int32_t pp, const Mesh& sub, int32_t M, StageSolve& s) {
  const Graph& g = s.sg.graph;
  const auto uses = g.uses();
  for (const TensorRef& t : s.sg.sent) {
    const auto& np = s.plan.nodes[psz(t.node)];
    s.p2p_us += p2p_time_us(full, pp, static_cast<double>(np->chosen.outputs.at(psz(t.output)).local_bytes(sub)));
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& np = s.plan.nodes[psz(i)];
    if (!np) continue;
    if (x.kind == NodeKind::kOp && x.phase == Phase::kOptimizer) s.once_us += (np->compute_us + np->comm_us) * M;
    if (x.phase != Phase::kForward || (x.kind != NodeKind::kOp && !s.sg.received[psz(i)])) continue;
    for (size_t k = 0; k < x.outputs.size(); ++k) {
      const bool kept = std::any_of(uses[psz(i)].begin(), uses[psz(i)].end(), [&](const Graph::Use& u) {
        return u.output == static_cast<int32_t>(k) && g.node(u.consumer).phase == Phase::kBackward;
      });
      if (kept) s.activation_bytes += np->chosen.outputs[k].local_bytes(sub);
    }
  }
  s.microbatch_us = s.plan.objective_us;
  s.parts = part_times(s.sg, s.plan, sub);
  // A solve stopped by the time limit may have no bound (-inf): costs are >= 0.
  s.lower_bound_us = std::isfinite(s.plan.lower_bound_us) ? std::max(0.0, s.plan.lower_bound_us) : 0.0;
}

/// The sum over layer `layer`'s problem nodes of their cheapest strategy's cost: a lower bound
/// of what one more layer adds to a stage under any decisions (its edges cost >= 0, and the
/// overlap model hides communication only, never compute).
double layer_floor(const ShardingOptimizer& so, const StageGraph& sg, int32_t layer, const LayerMap& m) {
  const BuiltProblem* built = so.built_problem();  // problem() would build it again
  if (!built) return 0;
  const BuiltProblem& bp = *built;
  double f = 0;
  for (NodeIdx j = 0; j < sg.graph.size(); ++j) {
    const NodeIdx o = sg.origin[psz(j)];
    const PNodeIdx v = bp.pnode[psz(j)];
    if (o < 0 || sg.received[psz(j)] || v < 0 || m.pos[psz(o)] != layer) continue;
    const auto& c = bp.problem.nodes[psz(v)].costs;
    f += *std::min_element(c.begin(), c.end());
  }
  return f;
}

/// Layers [lo, hi) of the canonical stage of a kind with k layers.
std::pair<int32_t, int32_t> canonical_range(StageKind kind, int32_t k, int32_t L) {
  switch (kind) {
    case kStageFirst: return {0, k};
    case kStageLast: return {L - k, L};
    case kStageMid: return {1, 1 + k};
    case kStageBoth: return {0, L};
  }
  return {0, k};
}

/// Everything one plan_pipeline call shares: the graph, the meshes and the solved stages.
struct Search {
  const Graph& g;
  const Mesh& mesh;
  const PlannerOptions& opt;
  const PipelineOptions& popt;
  LayerMap m;
  int32_t pp = 0, P = 1, L = 0;
  Mesh sub;
  std::map<std::pair<int32_t, int32_t>, std::shared_ptr<const StageSolve>> solved;  // (kind, k)
  int32_t solves = 0;

  /// Plans the canonical stage (kind, k) once; memory_limit: 0 none (the relaxation), else bytes.
  std::shared_ptr<const StageSolve> solve(StageKind kind, int32_t k, int64_t memory_limit = 0) {
    const auto key = std::make_pair(static_cast<int32_t>(kind), k);
    if (memory_limit == 0)
      if (auto it = solved.find(key); it != solved.end()) return it->second;
    auto [lo, hi] = canonical_range(kind, k, L);
    auto s = std::make_shared<StageSolve>();
    s->sg = extract_stage(g, m, lo, hi);
    PlannerOptions o = opt;
    o.memory_limit_bytes = memory_limit;
    o.optimizer_cost_scale = 1.0 / popt.microbatches;
    o.progress = nullptr;
    const MeshDim& link = mesh.dim(pp);
    for (const TensorRef& t : s->sg.sent)  // the sends, priced on the pp link
      o.output_costs.push_back({s->sg.graph.node(t.node).name, t.output, link.latency_us, 1.0 / (link.busbw_gbps * 1e3)});
    o.ilp_solution_file.clear();
    const auto t0 = std::chrono::steady_clock::now();
    s->optimizer = std::make_shared<ShardingOptimizer>(s->sg.graph, sub, o);
    ShardingOptimizer& so = *s->optimizer;
    if (popt.stage_hook) popt.stage_hook(so);
    s->plan = so.get_solution();
    s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (opt.progress)
      opt.progress(fmt::format("stage kind {} with {} layers: {} {:.3f} us, bound {:.3f} us, in {:.3f}s",
                               static_cast<int>(kind), k, solve_status_name(s->plan.status),
                               s->plan.objective_us, s->plan.lower_bound_us, s->seconds));
    s->layer_floor_us = layer_floor(so, s->sg, lo, m);
    ++solves;
    if (s->plan.has_solution) stage_figures(mesh, pp, sub, popt.microbatches, *s);
    else {  // no plan (e.g. the time limit): no cost, but the solver's bound still holds
      s->microbatch_us = kPipeInf;
      s->lower_bound_us = std::isfinite(s->plan.lower_bound_us) ? std::max(0.0, s->plan.lower_bound_us) : 0.0;
    }
    if (memory_limit == 0) solved[key] = s;
    return s;
  }

  /// Per kind, the least a layer can add to a stage (StageSolve::layer_floor_us of its samples).
  double floor_of(int32_t kind) const {
    double f = kPipeInf;
    for (const auto& [key, s] : solved)
      if (key.first == kind) f = std::min(f, s->layer_floor_us);
    return std::isfinite(f) ? f : 0.0;
  }

  /// Lower bounds per kind and k from the solved samples: chords between them (concavity), and
  /// above the largest its bound plus layer_floor_us per further layer.
  StageCostTable lower_table(int32_t S) const {
    StageCostTable t;
    const int32_t K = L - S + 1;
    for (int32_t kind = 0; kind < 4; ++kind) {
      std::vector<double>& v = kind == kStageFirst ? t.first : kind == kStageMid ? t.mid : kind == kStageLast ? t.last : t.both;
      v.assign(psz(K) + 1, kPipeInf);
      std::vector<std::pair<int32_t, double>> pts;
      for (const auto& [key, s] : solved)
        if (key.first == kind) pts.emplace_back(key.second, s->lower_bound_us);
      if (pts.empty()) continue;
      for (int32_t k = 1; k <= K; ++k) {
        auto hi = std::lower_bound(pts.begin(), pts.end(), std::make_pair(k, -kPipeInf));
        if (hi == pts.end()) v[psz(k)] = pts.back().second + (k - pts.back().first) * floor_of(kind);
        else if (hi->first == k || hi == pts.begin()) v[psz(k)] = hi->first == k ? hi->second : 0.0;
        else {
          auto lo = hi - 1;
          const double w = static_cast<double>(k - lo->first) / (hi->first - lo->first);
          v[psz(k)] = lo->second + w * (hi->second - lo->second);
        }
      }
    }
    return t;
  }

  /// Solved costs per kind and k (+inf where not solved).
  StageCostTable upper_table(int32_t S) const {
    StageCostTable t;
    const int32_t K = L - S + 1;
    for (auto* v : {&t.first, &t.mid, &t.last, &t.both}) v->assign(psz(K) + 1, kPipeInf);
    for (const auto& [key, s] : solved) {
      if (key.second > K) continue;
      std::vector<double>& v = key.first == kStageFirst ? t.first : key.first == kStageMid ? t.mid
                               : key.first == kStageLast ? t.last : t.both;
      v[psz(key.second)] = s->microbatch_us;
    }
    return t;
  }
};

/// Step time of a split and its lower bound, for one (schedule, v).
struct Evaluated {
  std::vector<int32_t> layers;
  double step_us = kPipeInf, lower_bound_us = 0;
};

/// k of pipeline_schedule.h for stages `st` (each stage's time split in its parts' ratio).
double stage_factor(PipelineSchedule sch, const std::vector<const StageSolve*>& st) {
  std::vector<double> f, b, w;
  for (const StageSolve* s : st) {
    const PartTimes& p = s->parts;
    const double all = p.forward_us + p.input_grad_us + p.weight_grad_us;
    const double c = std::isfinite(s->microbatch_us) ? s->microbatch_us : 0.0;
    f.push_back(all > 0 ? c * p.forward_us / all : c);
    b.push_back(all > 0 ? c * p.input_grad_us / all : 0.0);
    w.push_back(all > 0 ? c * p.weight_grad_us / all : 0.0);
  }
  return bubble_factor(sch, f, b, w);
}

/// k of the model's layer: the phase mix of the one-layer middle stage (planned once, shared
/// by every split), so that the step of a split is the interleaved formula with a constant k
/// and the DPs stay exact (pipeline_schedule.h).  The layers dominate every stage; the first
/// stage (no input gradient to send) and the last differ, and the report's timeline runs
/// every stage with its own f, b and w.  Without a middle stage (S = 2), the least k of the
/// solved stages.
double layer_factor(Search& S, PipelineSchedule sch, int32_t n) {
  if (!splits_backward(sch)) return 1.0;
  if (n > 2 && S.L - n + 1 >= 1) return stage_factor(sch, {S.solve(kStageMid, 1).get()});
  double k = 1.0;
  for (const auto& [key, s] : S.solved) k = std::min(k, stage_factor(sch, {s.get()}));
  return k;
}

/// The best split on tables `t` and its step (on lower-bound tables: a lower bound of the step
/// over all splits).  Both DPs are exact for their schedule's formula with factor k.
Evaluated split_step(const StageCostTable& t, int32_t L, int32_t P, int32_t v, int32_t M,
                     PipelineSchedule sch = PipelineSchedule::k1F1B, double k = 1.0) {
  Evaluated e;
  const bool v_shape = v_shaped(sch);
  const StageSplit s = v == 1 && !splits_backward(sch) ? best_split_latency(t, L, P, M)
                                                       : best_split_ranks(t, L, P, v, M, k, v_shape);
  if (s.layers.empty()) return e;
  e.layers = s.layers;
  e.step_us = e.lower_bound_us = s.value;
  return e;
}

/// Solves stage sizes until the (schedule, v) gap is below the target, or its lower bound
/// reaches `cutoff` (the best step of another schedule: this one cannot win; step_us stays
/// infinite).
Evaluated search_split(Search& S, PipelineSchedule sch, int32_t v, double cutoff) {
  const int32_t P = S.P, L = S.L, M = S.popt.microbatches, n = P * v;
  const int32_t K = L - n + 1;
  // A kind never solved yet: one layer and the balanced size; the DP on the bounds asks for more.
  for (int32_t s = 0; s < n; s = s == 0 && n > 2 ? n - 2 : s + 1) {
    const StageKind kind = kind_of(s, n);
    if (std::none_of(S.solved.begin(), S.solved.end(), [&](const auto& e) { return e.first.first == kind; }))
      for (int32_t k : {1, std::min(K, (L + n - 1) / n)}) S.solve(kind, kind == kStageBoth ? L : k);
  }
  Evaluated best;
  for (int iter = 0; iter < 12; ++iter) {
    const double k = layer_factor(S, sch, n);
    const Evaluated low = split_step(S.lower_table(n), L, P, v, M, sch, k);
    best.lower_bound_us = std::max(best.lower_bound_us, low.lower_bound_us);  // each is valid
    if (best.lower_bound_us >= cutoff) return best;
    Evaluated e = split_step(S.upper_table(n), L, P, v, M, sch, k);
    if (e.step_us < best.step_us) {
      e.lower_bound_us = best.lower_bound_us;
      best = e;
    }
    if (std::isfinite(best.step_us) && best.step_us - best.lower_bound_us <= S.popt.target_gap * best.step_us) break;
    bool added = false;
    for (int32_t s = 0; s < static_cast<int32_t>(low.layers.size()); ++s) {
      const StageKind kind = kind_of(s, n);
      const int32_t k = kind == kStageBoth ? L : low.layers[psz(s)];
      if (!S.solved.count({kind, k})) {
        S.solve(kind, k);
        added = true;
      }
    }
    if (!added) break;
  }
  return best;
}

/// Full-mesh strategy: R inserted on the pp dim of every spec.
Strategy with_pp(const Strategy& s, const Mesh& mesh, int32_t pp) {
  Strategy r = s;
  for (auto* list : {&r.outputs, &r.inputs})
    for (ShardingSpec& spec : *list) {
      if (mesh.ndim() == 1) spec.placements = {Placement::replicate()};
      else spec.placements.insert(spec.placements.begin() + pp, Placement::replicate());
    }
  // A context-parallel attention's dim indexes the stage mesh: shift it past the pp dim.
  if (r.cp.active() && r.cp.mesh_dim >= pp) ++r.cp.mesh_dim;
  return r;
}

/// Per pp rank, the peak per device: its stages' peaks plus the activations of the other
/// microbatches it keeps in flight.  True when a rank is over the limit.
bool rank_peaks(PipelinePlan& pl) {
  pl.rank_peak_bytes.assign(psz(pl.P), 0);
  std::vector<int64_t> act(psz(pl.P), 0), kept(psz(pl.P), 0);
  for (const PipelineStage& st : pl.stages) {
    pl.rank_peak_bytes[psz(st.pp_rank)] += st.solve->plan.peak_memory_bytes;
    act[psz(st.pp_rank)] += st.solve->activation_bytes;
    kept[psz(st.pp_rank)] += st.solve->parts.kept_for_w_bytes;
  }
  bool over = false;
  for (int32_t r = 0; r < pl.P; ++r) {
    // A zero-bubble schedule also keeps, per microbatch whose W waits, the gradients B made
    // for it (its activations are counted in flight until W).
    const double extra = (inflight_microbatches(pl.schedule, pl.P, pl.v, pl.M, r) - 1) * static_cast<double>(act[psz(r)]) +
                         deferred_microbatches(pl.schedule, pl.P, pl.v, pl.M, r) * static_cast<double>(kept[psz(r)]);
    pl.rank_peak_bytes[psz(r)] += static_cast<int64_t>(extra);
    over = over || (pl.memory_limit_bytes > 0 && pl.rank_peak_bytes[psz(r)] > pl.memory_limit_bytes);
  }
  return over;
}

/// Stages of the chosen split, their memory (re-planned under the limit when over it) and
/// every full-graph node's stage and placements.
void assemble(Search& S, PipelinePlan& pl, const std::vector<int32_t>& layers) {
  const int32_t n = static_cast<int32_t>(layers.size());
  for (int32_t s = 0, lo = 0; s < n; lo += layers[psz(s)], ++s) {
    PipelineStage st;
    st.index = s;
    st.pp_rank = stage_rank(pl.schedule, pl.P, s);
    st.lo = lo;
    st.hi = lo + layers[psz(s)];
    st.first = s == 0;
    st.last = s == n - 1;
    const StageKind kind = kind_of(s, n);
    st.solve = S.solve(kind, kind == kStageBoth ? S.L : layers[psz(s)]);
    st.inflight = inflight_microbatches(pl.schedule, pl.P, pl.v, pl.M, st.pp_rank);
    st.deferred = deferred_microbatches(pl.schedule, pl.P, pl.v, pl.M, st.pp_rank);
    pl.stages.push_back(st);
  }
  if (rank_peaks(pl)) {
    // Over the limit: plan the stages again under the limit less their other in-flight
    // microbatches' activations; keep that only when every rank then fits.
    std::vector<std::shared_ptr<const StageSolve>> before;
    for (PipelineStage& st : pl.stages) {
      before.push_back(st.solve);
      const double extra = (st.inflight - 1) * static_cast<double>(st.solve->activation_bytes);
      const int64_t limit = pl.memory_limit_bytes - static_cast<int64_t>(extra) / pl.v;
      if (limit <= 0) continue;
      const StageKind kind = kind_of(st.index, n);
      auto again = S.solve(kind, kind == kStageBoth ? S.L : st.hi - st.lo, limit);
      if (again->plan.has_solution) st.solve = again;
    }
    if (rank_peaks(pl)) {
      for (size_t i = 0; i < pl.stages.size(); ++i) pl.stages[i].solve = before[i];
      rank_peaks(pl);
    }
  }
  for (int32_t r = 0; r < pl.P; ++r)
    if (pl.memory_limit_bytes > 0 && pl.rank_peak_bytes[psz(r)] > pl.memory_limit_bytes)
      pl.warnings.push_back(fmt::format("pp rank {} needs {} bytes per device with its in-flight activations, "
                                        "over the {} byte limit", r, pl.rank_peak_bytes[psz(r)], pl.memory_limit_bytes));
}

/// Per full-graph node: stage and full-mesh placements, from the stages' plans by position.
void map_nodes(const Search& S, PipelinePlan& pl) {
  pl.node_stage.assign(psz(S.g.size()), -1);
  pl.node_strategy.assign(psz(S.g.size()), std::nullopt);
  bool disagree = false;
  for (const PipelineStage& st : pl.stages) {
    const StageGraph real = extract_stage(S.g, S.m, st.lo, st.hi);
    const StageSolve& sv = *st.solve;
    if (!same_structure(real.graph, sv.sg.graph))
      throw std::logic_error(fmt::format("pipeline: stage [{}, {}) differs from its solved stage", st.lo, st.hi));
    for (NodeIdx j = 0; j < real.graph.size(); ++j) {
      const NodeIdx full = real.origin[psz(j)];
      const auto& np = sv.plan.nodes[psz(j)];
      if (full < 0 || real.received[psz(j)] || !np) continue;
      const bool shared = S.m.pos[psz(full)] == LayerMap::kShared;
      pl.node_stage[psz(full)] = shared ? -1 : st.index;
      Strategy s = with_pp(np->chosen, S.mesh, S.pp);
      auto& slot = pl.node_strategy[psz(full)];
      if (!slot) slot = std::move(s);
      else if (slot->name() != s.name()) disagree = true;
    }
  }
  if (disagree)
    pl.warnings.push_back("stages plan a shared node (a buffer every stage copies) differently; "
                          "placements.json lists the first stage's");
}

/// The (schedule, v) pairs plan_pipeline tries.  Auto: the zero-bubble schedules, then
/// interleaved 1F1B, with the most stages per rank first (smallest bubble, so its step prunes
/// the others early), then 1F1B; GPipe runs the same step as 1F1B (pipeline_schedule.h) with
/// more activations in flight, so auto never prefers it.
std::vector<std::pair<PipelineSchedule, int32_t>> schedules_to_try(const PipelineOptions& popt, int32_t P,
                                                                   int32_t L) {
  std::vector<std::pair<PipelineSchedule, int32_t>> tries;
  const std::vector<PipelineSchedule> scheds =
      popt.schedule ? std::vector<PipelineSchedule>{*popt.schedule}
                    : std::vector<PipelineSchedule>{PipelineSchedule::kInterleavedZeroBubble,
                                                    PipelineSchedule::kZBVZeroBubble,
                                                    PipelineSchedule::kInterleaved1F1B, PipelineSchedule::k1F1B};
  for (PipelineSchedule s : scheds) {
    std::vector<int32_t> vs = stages_per_rank_options(s);
    if (vs.size() > 1 || vs.front() > 1)
      vs = popt.stages_per_rank > 0 ? std::vector<int32_t>{popt.stages_per_rank} : vs;
    if (!popt.fixed_layers.empty()) vs = {static_cast<int32_t>(popt.fixed_layers.size()) / P};
    for (int32_t v : vs) {
      const std::string why = schedule_problem(s, P, v, popt.microbatches);
      const bool fits = why.empty() && P * v <= L;
      if (!fits && popt.schedule)
        throw std::invalid_argument(fmt::format(
            "--schedule {}: {}", schedule_name(s),
            why.empty() ? fmt::format("{} x {} stages exceed the {} layers", P, v, L) : why));
      if (fits) tries.emplace_back(s, v);
    }
  }
  return tries;
}

/// A fixed split's step and bound (PipelineOptions::fixed_layers).
Evaluated fixed_split(Search& S, PipelineSchedule sch, int32_t v) {
  const std::vector<int32_t>& layers = S.popt.fixed_layers;
  const int32_t n = static_cast<int32_t>(layers.size());
  int32_t total = 0;
  for (int32_t k : layers) total += k;
  if (n != S.P * v || total != S.L || *std::min_element(layers.begin(), layers.end()) < 1)
    throw std::invalid_argument(fmt::format("pipeline: a fixed split needs {} stages of >= 1 layer summing to {}",
                                            S.P * v, S.L));
  std::vector<double> up, low;
  for (int32_t s = 0; s < n; ++s) {
    const StageKind kind = kind_of(s, n);
    auto st = S.solve(kind, kind == kStageBoth ? S.L : layers[psz(s)]);
    up.push_back(st->microbatch_us);
    low.push_back(st->lower_bound_us);
  }
  const double k = layer_factor(S, sch, n);
  Evaluated e;
  e.layers = layers;
  e.step_us = pipelined_step_us(sch, up, S.P, v, S.popt.microbatches, k);
  e.lower_bound_us = pipelined_step_us(sch, low, S.P, v, S.popt.microbatches, k);
  return e;
}

}  // namespace

std::vector<int32_t> equal_split(int32_t L, int32_t S) {
  std::vector<int32_t> r(psz(S), L / S);
  for (int32_t i = 0, extra = L % S; extra > 0; ++i, --extra) ++r[psz(S > 2 ? 1 + i % (S - 2) : i % S)];
  return r;
}

PipelinePlan plan_pipeline(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const PipelineOptions& popt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t pp = pp_dim_of(mesh);
  if (pp < 0) throw std::invalid_argument("pipeline: the mesh has no dim named pp");
  Search S{g, mesh, opt, popt, map_layers(g), pp, static_cast<int32_t>(mesh.size(pp)), 0, stage_mesh(mesh, pp), {}, 0};
  S.L = S.m.num_layers();
  if (S.P > S.L)
    throw std::invalid_argument(fmt::format("pp size {} exceeds the graph's {} layers", S.P, S.L));
  if (popt.microbatches < 1)
    throw std::invalid_argument(fmt::format("--microbatches: expected >= 1, got {}", popt.microbatches));
  PipelinePlan pl;
  pl.P = S.P;
  pl.M = popt.microbatches;
  pl.pp_dim = pp;
  pl.stage_mesh = S.sub;
  pl.layers = S.m.layers;
  pl.memory_limit_bytes = opt.memory_limit_bytes < 0 ? mesh.hardware().memory_bytes : opt.memory_limit_bytes;
  if (!popt.fixed_layers.empty() && !popt.schedule)
    throw std::invalid_argument("pipeline: a fixed split needs a schedule");
  const auto tries = schedules_to_try(popt, S.P, S.L);
  Evaluated chosen;
  double lower = kPipeInf;
  for (const auto& [s, v] : tries) {
    const Evaluated e = popt.fixed_layers.empty() ? search_split(S, s, v, chosen.step_us) : fixed_split(S, s, v);
    pl.candidates.push_back({s, v, e.step_us, e.lower_bound_us});
    lower = std::min(lower, e.lower_bound_us);
    if (e.step_us < chosen.step_us) {
      chosen = e;
      pl.schedule = s;
      pl.v = v;
    }
  }
  if (chosen.layers.empty()) throw std::runtime_error("pipeline: no stage split has a plan");
  pl.step_us = chosen.step_us;
  pl.lower_bound_us = std::min(lower, pl.step_us);
  pl.gap = pl.step_us > 0 ? (pl.step_us - pl.lower_bound_us) / pl.step_us : 0;
  assemble(S, pl, chosen.layers);
  std::vector<double> costs;
  for (const PipelineStage& st : pl.stages) costs.push_back(st.solve->microbatch_us);
  const double k = layer_factor(S, pl.schedule, static_cast<int32_t>(pl.stages.size()));
  pl.step_us = pipelined_step_us(pl.schedule, costs, pl.P, pl.v, pl.M, k);  // a re-planned stage may cost more
  pl.bubble_us = bubble_us(pl.schedule, costs, pl.P, pl.v, pl.M, k);
  pl.gap = pl.step_us > 0 ? (pl.step_us - pl.lower_bound_us) / pl.step_us : 0;
  map_nodes(S, pl);
  pl.intra_op_solves = S.solves;
  pl.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return pl;
}

}  // namespace autoshard

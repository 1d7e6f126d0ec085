#include "planner/pipeline_solve.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <functional>
#include <thread>

#include "planner/inflight_memory.h"
#include "planner/parallel_for.h"
#include "planner/recipes.h"
#include "planner/sharding_optimizer.h"
#include "planner/stage_pattern.h"

namespace autoshard {

namespace {

constexpr double kSolveInf = std::numeric_limits<double>::infinity();
size_t ssz(int64_t i) { return static_cast<size_t>(i); }

/// Where a worker thread's progress lines go (StageSolver::run_parallel): printed in task order
/// after the join, so that -v reads the same whatever the threads' timing.  nullptr: at once.
thread_local std::string* t_progress_sink = nullptr;

/// Seconds a send of `bytes` takes over the pp dim's link.
double p2p_time_us(const Mesh& mesh, int32_t pp, double bytes) {
  const MeshDim& d = mesh.dim(pp);
  return d.latency_us + bytes / (d.busbw_gbps * 1e3);
}

/// The figures of a solved stage problem: sends, once-per-step work, kept activations, the
/// one-microbatch peak and the summed gradients.  The plan's objective already holds the sends
/// (output_costs).
void stage_figures(const Mesh& full, int32_t pp, const Mesh& sub, int32_t M, StageSolve& s) {
  const Graph& g = s.sg.graph;
  for (const TensorRef& t : s.sg.sent) {
    const auto& np = s.plan.nodes[ssz(t.node)];
    s.p2p_us += p2p_time_us(full, pp, static_cast<double>(np->chosen.outputs.at(ssz(t.output)).local_bytes(sub)));
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& np = s.plan.nodes[ssz(i)];
    if (np && x.kind == NodeKind::kOp && x.phase == Phase::kOptimizer) s.once_us += (np->compute_us + np->comm_us) * M;
  }
  const InflightMemory mem = inflight_memory(g, *s.optimizer->built_problem(), s.inflight, s.optimizer->solution_choice());
  s.activation_bytes = mem.kept_bytes;
  s.microbatch_peak_bytes = mem.microbatch_peak;
  s.boundary_bytes = mem.boundary_bytes;
  // The runtime sums Partial gradients over the step and reduces them once: the rank holds
  // those sums through every microbatch's backward (added per rank, as zero bubble's deferred W).
  s.deferred_grad_bytes = deferred_gradient_bytes(g, s.plan, sub);
  // Gathered once per step, the parameters' copies are state (in the peaks above already).
  s.gathered_param_bytes = s.optimizer->options().params_gathered_once ? gathered_parameter_bytes(g, s.plan, sub) : 0;
  s.microbatch_us = s.plan.objective_us;
  s.parts = part_times(s.sg, s.plan, sub);
}

/// Node v's cheapest compute over its strategies (cost less in-op communication), >= 0; 0 when
/// no strategy has a finite cost.
double least_compute(const BuiltProblem& bp, PNodeIdx v) {
  const auto& c = bp.problem.nodes[ssz(v)].costs;
  double least = kSolveInf;
  for (size_t q = 0; q < c.size(); ++q) least = std::min(least, c[q] - bp.op_comm_us(v, static_cast<StrategyIdx>(q)));
  return std::isfinite(least) ? std::max(0.0, least) : 0.0;
}

}  // namespace

double node_floor(const ShardingOptimizer& so) {
  const BuiltProblem* bp = so.built_problem();
  if (!bp) return 0;
  double f = 0;
  for (PNodeIdx v = 0; v < bp->problem.num_nodes(); ++v) f += least_compute(*bp, v);
  return f;
}

double proven_bound(const Plan& p, double floor) {
  if (!p.has_solution && p.status == SolveStatus::kInfeasible) return kSolveInf;
  return std::max(floor, std::isfinite(p.lower_bound_us) ? p.lower_bound_us : 0.0);
}

namespace {

/// The sum over the stage's forward ops (of layer `layer` only, unless -1) of their cheapest
/// strategy's compute (its cost without in-op communication, which overlap may hide): a lower
/// bound of the forward's time under any decisions.
double forward_floor(const ShardingOptimizer& so, const StageGraph& sg, int32_t layer, const LayerMap& m) {
  const BuiltProblem* bp = so.built_problem();
  if (!bp) return 0;
  double f = 0;
  for (NodeIdx j = 0; j < sg.graph.size(); ++j) {
    const NodeIdx o = sg.origin[ssz(j)];
    const PNodeIdx v = bp->pnode[ssz(j)];
    const Node& x = sg.graph.node(j);
    if (o < 0 || sg.received[ssz(j)] || v < 0 || x.kind != NodeKind::kOp || x.phase != Phase::kForward) continue;
    if (layer == -1 || m.pos[ssz(o)] == layer) f += least_compute(*bp, v);
  }
  return f;
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
    const NodeIdx o = sg.origin[ssz(j)];
    const PNodeIdx v = bp.pnode[ssz(j)];
    if (o < 0 || sg.received[ssz(j)] || v < 0 || m.pos[ssz(o)] != layer) continue;
    const auto& c = bp.problem.nodes[ssz(v)].costs;
    f += *std::min_element(c.begin(), c.end());
  }
  return f;
}

}  // namespace

std::pair<int32_t, int32_t> canonical_range(StageKind kind, int32_t k, int32_t L) {
  switch (kind) {
    case kStageFirst: return {0, k};
    case kStageLast: return {L - k, L};
    case kStageMid: return {1, 1 + k};
    case kStageBoth: return {0, L};
  }
  return {0, k};
}

StageKind kind_of(int32_t s, int32_t S) {
  if (S == 1) return kStageBoth;
  return s == 0 ? kStageFirst : s == S - 1 ? kStageLast : kStageMid;
}

StageSolver::StageSolver(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
                         const LayerMap& m, int32_t pp)
    : g_(g), mesh_(mesh), opt_(opt), popt_(popt), m_(m), pp_(pp), L_(m.num_layers()), sub_(stage_mesh(mesh, pp)),
      progress_(popt.on_progress) {}

double StageSolver::need_bytes(const StageSolve& s, double inflight, bool grads) {
  return static_cast<double>(s.microbatch_peak_bytes + (grads ? s.deferred_grad_bytes : 0)) +
         (inflight - 1) * static_cast<double>(s.activation_bytes);
}

bool StageSolver::fits(const StageSolve& s, StageMemory mem) {
  if (mem.budget <= 0) return true;
  if (!s.plan.has_solution) return false;
  return need_bytes(s, mem) <= static_cast<double>(mem.budget);
}

PlannerOptions StageSolver::stage_options(const StageGraph& sg, double inflight, int64_t limit) const {
  PlannerOptions o = opt_;
  o.memory_limit_bytes = limit;
  o.inflight_microbatches = inflight;
  o.optimizer_cost_scale = 1.0 / popt_.microbatches;
  o.params_gathered_once = popt_.params_gathered_once;
  o.progress = nullptr;
  const MeshDim& link = mesh_.dim(pp_);
  for (const TensorRef& t : sg.sent)  // the sends, priced on the pp link
    o.output_costs.push_back({sg.graph.node(t.node).name, t.output, link.latency_us, 1.0 / (link.busbw_gbps * 1e3)});
  o.ilp_solution_file.clear();
  return o;
}

void StageSolver::say(std::string line) const {
  if (!opt_.progress) return;
  if (t_progress_sink) *t_progress_sink += line + "\n";
  else opt_.progress(line);
}

std::shared_ptr<StageSolve> StageSolver::solve(StageKind kind, int32_t k, StageMemory mem, int64_t limit,
                                               double cutoff) {
  auto [lo, hi] = canonical_range(kind, k, L_);
  const bool counted = t_progress_sink == nullptr;  // run_parallel counts its own tasks
  if (counted) progress_.started(1);
  auto s = std::make_shared<StageSolve>();
  s->sg = extract_stage(g_, m_, lo, hi);
  s->inflight = limit > 0 ? mem.inflight : 1.0;
  s->memory_budget = mem.budget;
  const auto t0 = std::chrono::steady_clock::now();
  PlannerOptions o = stage_options(s->sg, s->inflight, limit);
  o.cutoff_us = cutoff;
  s->optimizer = std::make_shared<ShardingOptimizer>(s->sg.graph, sub_, o);
  ShardingOptimizer& so = *s->optimizer;
  if (popt_.stage_hook) popt_.stage_hook(so);
  s->plan = so.get_solution();
  s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s->layer_floor_us = layer_floor(so, s->sg, lo, m_);
  s->forward_floor_us = forward_floor(so, s->sg, -1, m_);
  s->layer_forward_floor_us = forward_floor(so, s->sg, lo, m_);
  ++solves_;
  if (counted) progress_.finished();
  s->lower_bound_us = proven_bound(s->plan, node_floor(so));
  if (s->plan.has_solution) stage_figures(mesh_, pp_, sub_, popt_.microbatches, *s);
  else s->microbatch_us = kSolveInf;  // no plan (infeasible, or the time limit)
  if (opt_.progress)
    say(fmt::format("stage kind {} with {} layers{}: {} {:.3f} us, proven bound {:.3f} us, in {:.3f}s ({} objective solves)",
                    static_cast<int>(kind), k,
                    limit > 0 ? fmt::format(" ({} in flight, limit {} B)", mem.inflight, limit) : "",
                    solve_status_name(s->plan.status), s->plan.objective_us, s->lower_bound_us, s->seconds, s->plan.objective_solves));
  return s;
}

std::shared_ptr<StageSolve> StageSolver::evaluated(std::shared_ptr<ShardingOptimizer> so, const StageSolve& relaxed,
                                                   const std::vector<StrategyIdx>& choice, double inflight,
                                                   int64_t budget) const {
  if (std::find(choice.begin(), choice.end(), -1) != choice.end()) return nullptr;
  auto s = std::make_shared<StageSolve>();
  s->sg = relaxed.sg;
  s->inflight = inflight;
  s->memory_budget = budget;
  s->layer_floor_us = relaxed.layer_floor_us;
  s->optimizer = std::move(so);
  s->plan = s->optimizer->evaluate(choice);
  if (!std::isfinite(s->plan.objective_us)) return nullptr;
  s->plan.status = SolveStatus::kFeasible;
  s->plan.lower_bound_us = 0;  // a plan, no bound
  s->optimizer->set_solution(s->plan, choice);
  stage_figures(mesh_, pp_, sub_, popt_.microbatches, *s);
  return s;
}

StageSolver::Carried StageSolver::carried(const StageSolve& from, RecomputePolicy model) const {
  PlannerOptions o = stage_options(from.sg, 1.0, 0);
  o.recompute = model;
  Carried c{std::make_shared<ShardingOptimizer>(from.sg.graph, sub_, o), {}};
  if (popt_.stage_hook) popt_.stage_hook(*c.so);
  std::vector<std::optional<Strategy>> wanted(from.plan.nodes.size());
  for (size_t i = 0; i < wanted.size(); ++i)
    if (from.plan.nodes[i]) wanted[i] = from.plan.nodes[i]->chosen;
  c.choice = c.so->match_strategies(wanted);
  return c;
}

std::shared_ptr<StageSolve> StageSolver::recompute_all(const StageSolve& relaxed, StageMemory mem) {
  if (!relaxed.plan.has_solution) return nullptr;
  Carried c = carried(relaxed, RecomputePolicy::kFull);
  auto s = evaluated(std::move(c.so), relaxed, c.choice, 1.0, mem.budget);
  if (s) report(*s, "its memory-free plan fully recomputed", mem);
  return s;
}

void StageSolver::report(const StageSolve& s, std::string_view what, StageMemory mem) const {
  if (!opt_.progress) return;
  const double need = need_bytes(s, mem);
  say(fmt::format("  {}: {:.3f} us, {:.0f} B per device with {} in flight", what, s.microbatch_us, need,
                            mem.inflight));
}

std::shared_ptr<StageSolve> StageSolver::recipe_candidate(StageKind kind, int32_t k, StageMemory mem) {
  if (popt_.stage_hook) return nullptr;  // the caller pins its own recipe
  auto [lo, hi] = canonical_range(kind, k, L_);
  const bool counted = t_progress_sink == nullptr;  // run_parallel counts its own tasks
  if (counted) progress_.started(1);
  auto s = std::make_shared<StageSolve>();
  s->sg = extract_stage(g_, m_, lo, hi);
  s->memory_budget = mem.budget;
  PlannerOptions o = stage_options(s->sg, 1.0, 0);
  o.recompute = RecomputePolicy::kFull;
  const Recipe r = tensor_parallel_dim(sub_) >= 0 ? Recipe::kFsdpTp : Recipe::kFsdp;
  const RecipePins pins = recipe_pins(r, s->sg.graph, sub_, o.require_divisible, o.shard_orders);
  if (!pins.not_applicable.empty()) return nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  s->optimizer = std::make_shared<ShardingOptimizer>(s->sg.graph, sub_, o);
  ShardingOptimizer& so = *s->optimizer;
  for (const Constraint& c : pins.constraints) so.add_constraint(c);
  for (const Constraint& c : pins.use_constraints) so.add_constraint(c);
  try {
    (void)so.problem();
  } catch (const std::runtime_error&) {
    for (const Constraint& c : pins.use_constraints) so.remove_constraint(c.name);
  }
  try {
    s->plan = so.get_solution();
  } catch (const std::runtime_error&) {
    return nullptr;  // the stage cannot take the recipe's pins
  }
  ++solves_;
  if (!s->plan.has_solution) return nullptr;
  s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s->plan.lower_bound_us = 0;  // a bound of the pinned problem only
  s->plan.status = SolveStatus::kFeasible;
  stage_figures(mesh_, pp_, sub_, popt_.microbatches, *s);
  report(*s, fmt::format("torchtitan's {} with full recomputation", recipe_name(r)), mem);
  return s;
}

std::shared_ptr<StageSolve> StageSolver::between(StageKind kind, int32_t k, const Bracket& b, bool full_recompute) {
  auto range = [&](int32_t n) { return canonical_range(kind, n, L_); };
  const auto pb = stage_pattern(b.below->sg, b.below->plan, m_, range(b.kb).first, range(b.kb).second);
  const auto pa = stage_pattern(b.above->sg, b.above->plan, m_, range(b.ka).first, range(b.ka).second);
  if (!pa) return nullptr;
  // One pattern at both ends is optimal between them up to their gaps; where they differ,
  // each is a candidate (the one below only with a middle layer of its own).
  std::vector<StagePattern> pats;
  if (auto both = pb ? merge_patterns(*pb, *pa) : std::nullopt) pats.push_back(std::move(*both));
  else {
    pats.push_back(*pa);
    if (pb && b.kb >= 3) pats.push_back(*pb);
  }
  return at_size(kind, k, pats, full_recompute);
}

std::shared_ptr<StageSolve> StageSolver::at_size(StageKind kind, int32_t k, const std::vector<StagePattern>& pats,
                                                 bool full_recompute) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [lo, hi] = canonical_range(kind, k, L_);
  const bool counted = t_progress_sink == nullptr;  // run_parallel counts its own tasks
  if (counted) progress_.started(1);
  auto s = std::make_shared<StageSolve>();
  s->sg = extract_stage(g_, m_, lo, hi);
  PlannerOptions o = stage_options(s->sg, 1.0, 0);
  if (full_recompute) o.recompute = RecomputePolicy::kFull;
  s->optimizer = std::make_shared<ShardingOptimizer>(s->sg.graph, sub_, o);
  ShardingOptimizer& so = *s->optimizer;
  if (popt_.stage_hook) popt_.stage_hook(so);
  std::vector<StrategyIdx> choice;
  for (const StagePattern& pat : pats) {
    const auto wanted = pattern_strategies(pat, s->sg, m_, lo, hi);
    if (!wanted) continue;
    std::vector<StrategyIdx> c = so.match_strategies(*wanted);
    if (std::find(c.begin(), c.end(), -1) != c.end()) continue;
    Plan p = so.evaluate(c);
    if (std::isfinite(p.objective_us) && (choice.empty() || p.objective_us < s->plan.objective_us)) {
      s->plan = std::move(p);
      choice = std::move(c);
    }
  }
  if (choice.empty()) return nullptr;
  so.set_solution(s->plan, choice);
  s->interpolated = true;
  s->layer_floor_us = layer_floor(so, s->sg, lo, m_);
  s->forward_floor_us = forward_floor(so, s->sg, -1, m_);
  s->layer_forward_floor_us = forward_floor(so, s->sg, lo, m_);
  stage_figures(mesh_, pp_, sub_, popt_.microbatches, *s);
  s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

bool StageSolver::accept_between(StageSolve& s, StageKind kind, int32_t k, const Bracket& b, double bound,
                                 std::string_view what) const {
  // No wider a gap (in us) than the solves at its ends left, or the search's target: else
  // solve it.  With one pattern at both ends that always holds for the memory-free plans (the
  // plan's cost and the chord both interpolate the ends).
  bound = std::min(bound, s.plan.objective_us);
  const double allowed = std::max({b.below->microbatch_us - b.below->lower_bound_us,
                                   b.above->microbatch_us - b.above->lower_bound_us,
                                   popt_.target_gap * s.plan.objective_us});
  if (s.plan.objective_us - bound > allowed * (1 + 1e-9)) return false;
  s.lower_bound_us = s.plan.lower_bound_us = bound;
  s.plan.status = bound >= s.plan.objective_us ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  say(fmt::format("stage kind {} with {} layers{}: the plan of {} or {} layers, {:.3f} us, bound {:.3f} us, in {:.3f}s",
                  static_cast<int>(kind), k, what, b.kb, b.ka, s.plan.objective_us,
                  s.lower_bound_us, s.seconds));
  return true;
}

std::shared_ptr<StageSolve> StageSolver::interpolate(StageKind kind, int32_t k) {
  if (kind == kStageBoth) return nullptr;
  // The nearest solved sizes below and above k (evaluated ones are no new information).
  Bracket b;
  for (const auto& [key, sv] : free_) {
    if (key.first != kind || sv->interpolated || !sv->plan.has_solution) continue;
    if (key.second < k && key.second >= 2) b.below = sv, b.kb = key.second;
    if (key.second > k && !b.above) b.above = sv, b.ka = key.second;
  }
  if (!b.below || !b.above) return nullptr;
  auto s = between(kind, k, b, false);
  if (!s) return nullptr;
  // The stage optimum is concave in k (pipeline.h): the chord of the proven bounds holds.
  const double w = static_cast<double>(k - b.kb) / (b.ka - b.kb);
  const double chord = b.below->lower_bound_us + w * (b.above->lower_bound_us - b.below->lower_bound_us);
  return accept_between(*s, kind, k, b, std::max(chord, node_floor(*s->optimizer)), "") ? s : nullptr;
}

std::shared_ptr<StageSolve> StageSolver::interpolate_fitted(StageKind kind, int32_t k, StageMemory mem,
                                                            const StageSolve& relaxed) {
  if (kind == kStageBoth) return nullptr;
  // The nearest fitted plans of the kind for as many in flight, both with every layer
  // recomputed (their recomputation is no decision, so their strategies are the pattern).
  Bracket b;
  for (const auto& [key, sv] : fitted_) {
    const auto& [kk, kf, f, budget, grads] = key;
    if (kk != kind || f != mem.inflight || sv->interpolated || !std::isfinite(sv->microbatch_us) ||
        sv->optimizer->options().recompute != RecomputePolicy::kFull)
      continue;
    if (kf < k && kf >= 2 && kf >= b.kb) b.below = sv, b.kb = kf;
    if (kf > k && (!b.above || kf < b.ka)) b.above = sv, b.ka = kf;
  }
  if (!b.below || !b.above) return popt_.extend_fitted ? extend_fitted(kind, k, mem, relaxed) : nullptr;
  auto s = between(kind, k, b, true);
  if (!s || !fits(*s, mem)) return popt_.extend_fitted ? extend_fitted(kind, k, mem, relaxed) : nullptr;
  s->memory_budget = mem.budget;
  // A plan under a memory limit costs at least the memory-free optimum.
  const std::string what = fmt::format(" ({} in flight, budget {} B)", mem.inflight, mem.budget);
  return accept_between(*s, kind, k, b, relaxed.lower_bound_us, what) ? s : nullptr;
}

std::shared_ptr<const StageSolve> StageSolver::free(StageKind kind, int32_t k) {
  const FreeKey key{kind, kind == kStageBoth ? L_ : k};
  if (auto it = free_.find(key); it != free_.end()) return it->second;
  std::shared_ptr<StageSolve> s = interpolate(kind, key.second);
  if (!s) s = solve(kind, key.second, StageMemory{}, 0);
  free_[key] = s;
  return s;
}

void StageSolver::run_parallel(size_t tasks, const std::function<void(size_t)>& task) const {
  std::vector<std::string> logs(tasks);
  std::vector<std::exception_ptr> failed(tasks);
  progress_.started(static_cast<int32_t>(tasks));
  parallel_for(tasks, popt_.stage_threads, [&](size_t i) {
    t_progress_sink = &logs[i];
    try {
      task(i);
    } catch (...) {
      failed[i] = std::current_exception();
    }
    t_progress_sink = nullptr;
    progress_.finished();
  });
  for (size_t i = 0; i < tasks; ++i) {
    if (failed[i]) std::rethrow_exception(failed[i]);  // the first in task order, as in sequence
    if (!opt_.progress) continue;
    for (size_t a = 0, b; a < logs[i].size(); a = b + 1) {
      b = logs[i].find('\n', a);
      opt_.progress(logs[i].substr(a, b - a));
    }
  }
}

std::vector<std::shared_ptr<StageSolve>> StageSolver::solve_all(const std::vector<FreeKey>& keys) {
  std::vector<std::shared_ptr<StageSolve>> out(keys.size());
  run_parallel(keys.size(), [&](size_t i) {
    out[i] = solve(static_cast<StageKind>(keys[i].first), keys[i].second, StageMemory{}, 0);
  });
  return out;
}

void StageSolver::prefetch(const std::vector<std::pair<StageKind, int32_t>>& keys) {
  std::vector<FreeKey> unknown;
  for (auto [kind, k] : keys) {
    const FreeKey key{kind, kind == kStageBoth ? L_ : k};
    if (!free_.count(key) && std::find(unknown.begin(), unknown.end(), key) == unknown.end()) unknown.push_back(key);
  }
  // The patterns evaluated on threads too (0.02-0.06 s each on llama3-70b 8x8x8's stages): each
  // reads only the solved sizes (interpolate skips evaluated ones), so they do not depend on
  // one another, and the result is the same as one after the other.
  std::vector<std::shared_ptr<StageSolve>> evaluated(unknown.size());
  run_parallel(unknown.size(), [&](size_t i) {
    evaluated[i] = interpolate(static_cast<StageKind>(unknown[i].first), unknown[i].second);
  });
  std::vector<FreeKey> todo;
  for (size_t i = 0; i < unknown.size(); ++i) {
    if (evaluated[i]) free_[unknown[i]] = std::move(evaluated[i]);
    else todo.push_back(unknown[i]);
  }
  std::vector<std::shared_ptr<StageSolve>> out = solve_all(todo);
  for (size_t i = 0; i < todo.size(); ++i) free_[todo[i]] = std::move(out[i]);
}

void StageSolver::refine(const std::vector<std::tuple<StageKind, int32_t, StageMemory>>& keys) {
  std::vector<FreeKey> todo;
  for (auto [kind, k, mem] : keys) {
    const FreeKey key{kind, kind == kStageBoth ? L_ : k};
    const auto it = free_.find(key);
    if (it != free_.end() && it->second->interpolated && std::find(todo.begin(), todo.end(), key) == todo.end())
      todo.push_back(key);
  }
  std::vector<std::shared_ptr<StageSolve>> out = solve_all(todo);
  for (size_t i = 0; i < todo.size(); ++i) free_[todo[i]] = better_of(*free_.at(todo[i]), out[i]);
  // The fitted plans evaluated as patterns: fit() each (its plans at hand and its solve).
  std::vector<FitKey> fits;
  std::vector<StageMemory> mems;
  std::vector<std::shared_ptr<const StageSolve>> relaxed;
  for (auto [kind, k, mem] : keys) {
    if (kind == kStageBoth) k = L_;
    const FitKey key{kind, k, mem.inflight, mem.budget, mem.grads};
    const auto it = fitted_.find(key);
    if (it == fitted_.end() || !it->second->interpolated || std::find(fits.begin(), fits.end(), key) != fits.end())
      continue;
    fits.push_back(key);
    mems.push_back(mem);
    relaxed.push_back(free(kind, k));
  }
  std::vector<std::shared_ptr<StageSolve>> fitted(fits.size());
  run_parallel(fits.size(), [&](size_t i) {
    fitted[i] = fit(static_cast<StageKind>(std::get<0>(fits[i])), std::get<1>(fits[i]), mems[i], *relaxed[i]);
  });
  for (size_t i = 0; i < fits.size(); ++i) fitted_[fits[i]] = better_of(*fitted_.at(fits[i]), fitted[i]);
}

std::shared_ptr<const StageSolve> StageSolver::better_of(const StageSolve& was, std::shared_ptr<StageSolve> solved) {
  std::shared_ptr<StageSolve> s = solved;
  if (!s->plan.has_solution || !(s->microbatch_us < was.microbatch_us)) s = std::make_shared<StageSolve>(was);
  s->lower_bound_us = std::min(std::max(solved->lower_bound_us, was.lower_bound_us), s->microbatch_us);
  s->interpolated = false;  // solved now: a bracket end like any solve
  return s;
}

bool StageSolver::resolved(StageKind kind, int32_t k, StageMemory mem) const {
  if (kind == kStageBoth) k = L_;
  const auto it = free_.find({kind, k});
  if (it == free_.end()) return false;
  if (fits(*it->second, mem)) return true;
  return fitted_.count({kind, k, mem.inflight, mem.budget, mem.grads}) > 0;
}

std::shared_ptr<const StageSolve> StageSolver::fitted(StageKind kind, int32_t k, StageMemory mem) {
  if (kind == kStageBoth) k = L_;
  auto relaxed = free(kind, k);
  if (mem.budget <= 0 || fits(*relaxed, mem)) return relaxed;
  const FitKey key{kind, k, mem.inflight, mem.budget, mem.grads};
  if (auto it = fitted_.find(key); it != fitted_.end()) return it->second;
  std::shared_ptr<StageSolve> best = interpolate_fitted(kind, k, mem, *relaxed);
  if (!best) best = fit(kind, k, mem, *relaxed);
  fitted_[key] = best;
  return best;
}

void StageSolver::prefetch_fitted(const std::vector<std::tuple<StageKind, int32_t, StageMemory>>& keys) {
  std::vector<std::pair<StageKind, int32_t>> sizes;
  for (const auto& [kind, k, mem] : keys) sizes.emplace_back(kind, k);
  prefetch(sizes);
  std::vector<FitKey> unknown;
  std::vector<StageMemory> unknown_mems;
  std::vector<std::shared_ptr<const StageSolve>> unknown_relaxed;
  for (auto [kind, k, mem] : keys) {
    if (kind == kStageBoth) k = L_;
    auto r = free(kind, k);  // known: prefetched above
    const FitKey key{kind, k, mem.inflight, mem.budget, mem.grads};
    if (mem.budget <= 0 || fits(*r, mem) || fitted_.count(key) || std::find(unknown.begin(), unknown.end(), key) != unknown.end())
      continue;
    unknown.push_back(key);
    unknown_mems.push_back(mem);
    unknown_relaxed.push_back(std::move(r));
  }
  // Evaluated on threads, as prefetch's: each reads only the fitted plans solved so far.
  std::vector<std::shared_ptr<StageSolve>> evaluated(unknown.size());
  run_parallel(unknown.size(), [&](size_t i) {
    evaluated[i] = interpolate_fitted(static_cast<StageKind>(std::get<0>(unknown[i])), std::get<1>(unknown[i]),
                                      unknown_mems[i], *unknown_relaxed[i]);
  });
  std::vector<FitKey> todo;
  std::vector<StageMemory> mems;
  std::vector<std::shared_ptr<const StageSolve>> relaxed;
  for (size_t i = 0; i < unknown.size(); ++i) {
    if (evaluated[i]) {
      fitted_[unknown[i]] = std::move(evaluated[i]);
      continue;
    }
    todo.push_back(unknown[i]);
    mems.push_back(unknown_mems[i]);
    relaxed.push_back(unknown_relaxed[i]);
  }
  std::vector<std::shared_ptr<StageSolve>> out(todo.size());
  run_parallel(todo.size(), [&](size_t i) {
    out[i] = fit(static_cast<StageKind>(std::get<0>(todo[i])), std::get<1>(todo[i]), mems[i], *relaxed[i]);
  });
  for (size_t i = 0; i < todo.size(); ++i) fitted_[todo[i]] = std::move(out[i]);
}

std::shared_ptr<StageSolve> StageSolver::fit(StageKind kind, int32_t k, StageMemory mem, const StageSolve& relaxed_s) {
  const StageSolve* relaxed = &relaxed_s;
  // A plan at hand: the memory-free one with every region recomputed (no solve), where the
  // policy allows full recomputation.
  const RecomputePolicy rp = opt_.recompute;
  const bool full_allowed = rp == RecomputePolicy::kIfNeeded || rp == RecomputePolicy::kAuto || rp == RecomputePolicy::kFull;
  // Whether the policy lets each region choose its mode (least_recompute's mixes).
  const bool mixes_allowed = rp == RecomputePolicy::kIfNeeded || rp == RecomputePolicy::kAuto;
  std::shared_ptr<StageSolve> best;
  auto consider = [&](std::shared_ptr<StageSolve> c) {
    if (c && fits(*c, mem) && (!best || c->microbatch_us < best->microbatch_us)) best = std::move(c);
  };
  if (full_allowed) {
    consider(recompute_all(*relaxed, mem));
    auto recipe = recipe_candidate(kind, k, mem);
    consider(recipe);
    // The same two layouts with only as much recomputation as the budget needs.
    if (mixes_allowed) {
      consider(least_recompute(*relaxed, mem, "its memory-free plan"));
      if (recipe) consider(least_recompute(*recipe, mem, "torchtitan's layout"));
    }
  }
  if (best && !popt_.solve_fitted) {  // the plan at hand, no memory-aware solve
    best->lower_bound_us = std::min(relaxed->lower_bound_us, best->microbatch_us);
    return best;
  }
  // The memory row at t* priced: a bound above the memory-free one, and often a plan that fits.
  // Where that plan is within the target gap of the bound, no memory-limited solve is needed.
  // A share of a rank (v > 1) is no relaxation: its priced bound is no bound of the stage (nor
  // of the pipeline), only the test that skips the memory-limited solve; its priced plans are
  // plans (llama3-405b 8x16x8, 9 layers at 8 in flight: 441.8 ms priced against 498.7 ms from
  // the time-limited solve).
  PricedBound pb;
  pb.bound = relaxed->lower_bound_us;
  double skip_below = pb.bound;
  if (popt_.price_memory) {
    pb = price_memory(kind, k, mem, *relaxed, best.get());
    skip_below = pb.bound;
    if (!mem.rank_limit) pb.bound = relaxed->lower_bound_us;
  }
  if (pb.plan && (!best || pb.plan->microbatch_us < best->microbatch_us)) best = pb.plan;
  if (best && best->microbatch_us - skip_below <= popt_.target_gap * best->microbatch_us) {
    best->lower_bound_us = std::min(pb.bound, best->microbatch_us);
    return best;
  }
  // The solve needs to beat the plan at hand only.
  auto s = solve(kind, k, mem, mem.budget, best ? best->microbatch_us : kSolveInf);
  const double bound = std::max(s->lower_bound_us, pb.bound);  // both relaxations: they hold
  if (s->plan.has_solution && !fits(*s, mem) && !(best && s->microbatch_us >= best->microbatch_us) && mixes_allowed) {
    // Over the exact in-flight peak: a few more regions recomputed often make it fit.  Where
    // that costs little the second solve below is skipped; else the repair is its cutoff.
    auto repaired = least_recompute(*s, mem, "the memory-limited plan");
    if (repaired && (!best || repaired->microbatch_us < best->microbatch_us)) {
      best = repaired;
      if (repaired->microbatch_us <= (1 + kRepairSlack) * s->microbatch_us) {
        best->lower_bound_us = std::min(std::max(bound, relaxed->lower_bound_us), best->microbatch_us);
        return best;
      }
    }
  }
  if (s->plan.has_solution && !fits(*s, mem) && !(best && s->microbatch_us >= best->microbatch_us)) {
    // Over the exact in-flight peak (with the step's summed gradients): plan again under the
    // limit less the excess.
    const int64_t excess = static_cast<int64_t>(std::ceil(need_bytes(*s, mem))) - mem.budget;
    if (const int64_t limit = s->plan.peak_memory_bytes - excess; limit > 0) {
      auto t = solve(kind, k, mem, limit, best ? best->microbatch_us : kSolveInf);
      if (t->plan.has_solution) s = t;
    }
  }
  if (fits(*s, mem) && (!best || s->microbatch_us < best->microbatch_us)) best = s;
  if (!best) {
    s->microbatch_us = kSolveInf;  // no plan under the budget
    best = s;
  }
  best->lower_bound_us = std::min(std::max(bound, relaxed->lower_bound_us), best->microbatch_us);
  return best;
}

}  // namespace autoshard

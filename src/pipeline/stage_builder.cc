#include "pipeline/stage_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <functional>
#include <optional>
#include <thread>

#include "planner/inflight_memory.h"
#include "planner/parallel_for.h"
#include "planner/recipes.h"
#include "planner/recompute_fit.h"
#include "planner/sharding_optimizer.h"
#include "pipeline/stage_pattern.h"

namespace autoshard {

namespace {

constexpr double kSolveInf = std::numeric_limits<double>::infinity();
size_t bsz(int64_t i) { return static_cast<size_t>(i); }

/// Where a worker thread's progress lines go (StageBuilder::run_parallel): printed in task order
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
    const auto& np = s.plan.nodes[bsz(t.node)];
    s.p2p_us += p2p_time_us(full, pp, static_cast<double>(np->chosen.outputs.at(bsz(t.output)).local_bytes(sub)));
  }
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& np = s.plan.nodes[bsz(i)];
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
  s.gathered_param_bytes =
      s.optimizer->options().params_gathered_once ? gathered_parameter_bytes(g, s.plan, sub) : 0;
  s.microbatch_us = s.plan.objective_us;
  s.parts = part_times(s.sg, s.plan, sub);
}

/// Node v's cheapest compute over its strategies (cost less in-op communication), >= 0; 0 when
/// no strategy has a finite cost.
double least_compute(const BuiltProblem& bp, PNodeIdx v) {
  const auto& c = bp.problem.nodes[bsz(v)].costs;
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
    const NodeIdx o = sg.origin[bsz(j)];
    const PNodeIdx v = bp->pnode[bsz(j)];
    const Node& x = sg.graph.node(j);
    if (o < 0 || sg.received[bsz(j)] || v < 0 || x.kind != NodeKind::kOp || x.phase != Phase::kForward) continue;
    if (layer == -1 || m.pos[bsz(o)] == layer) f += least_compute(*bp, v);
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
    const NodeIdx o = sg.origin[bsz(j)];
    const PNodeIdx v = bp.pnode[bsz(j)];
    if (o < 0 || sg.received[bsz(j)] || v < 0 || m.pos[bsz(o)] != layer) continue;
    const auto& c = bp.problem.nodes[bsz(v)].costs;
    f += *std::min_element(c.begin(), c.end());
  }
  return f;
}

}  // namespace

StageBuilder::StageBuilder(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt,
                           const LayerMap& m, int32_t pp)
    : g_(g), mesh_(mesh), opt_(opt), popt_(popt), m_(m), pp_(pp), L_(m.num_layers()), sub_(stage_mesh(mesh, pp)),
      progress_(popt.on_progress) {}

double StageBuilder::need_bytes(const StageSolve& s, double inflight, bool grads) {
  return need_bytes(s.microbatch_peak_bytes, grads ? s.deferred_grad_bytes : 0, s.activation_bytes, inflight);
}

double StageBuilder::need_bytes(int64_t microbatch_peak, int64_t grads, int64_t kept, double inflight) {
  return static_cast<double>(microbatch_peak + grads) + (inflight - 1) * static_cast<double>(kept);
}

bool StageBuilder::fits(const StageSolve& s, StageMemory mem) {
  if (mem.budget <= 0) return true;
  if (!s.plan.has_solution) return false;
  return need_bytes(s, mem) <= static_cast<double>(mem.budget);
}

PlannerOptions StageBuilder::stage_options(const StageGraph& sg, double inflight, int64_t limit) const {
  PlannerOptions o = opt_;
  // The same plan whatever the machine's load: the solves stop on their work limits.
  o.work_limited = true;
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

void StageBuilder::say(std::string line) const {
  if (!opt_.progress) return;
  if (t_progress_sink) *t_progress_sink += line + "\n";
  else opt_.progress(line);
}

std::shared_ptr<StageSolve> StageBuilder::solve(StageKind kind, int32_t k, StageMemory mem, int64_t limit,
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
  counted_solve(s->plan);
  s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s->layer_floor_us = layer_floor(so, s->sg, lo, m_);
  s->forward_floor_us = forward_floor(so, s->sg, -1, m_);
  s->layer_forward_floor_us = forward_floor(so, s->sg, lo, m_);
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

std::shared_ptr<StageSolve> StageBuilder::evaluated(std::shared_ptr<ShardingOptimizer> so, const StageSolve& relaxed,
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

std::shared_ptr<ShardingOptimizer> StageBuilder::carried_optimizer(const StageGraph& sg, RecomputePolicy model) const {
  PlannerOptions o = stage_options(sg, 1.0, 0);
  o.recompute = model;
  if (popt_.stage_hook) {  // a recipe's pins: their constraints are part of the problem
    auto so = std::make_shared<ShardingOptimizer>(sg.graph, sub_, o);
    popt_.stage_hook(*so);
    return so;
  }
  auto key = std::make_pair(sg.origin, model);
  std::shared_ptr<const BuiltProblem> built;
  {
    const std::lock_guard<std::mutex> lock(carried_mu_);
    if (const auto it = carried_problems_.find(key); it != carried_problems_.end()) built = it->second;
  }
  if (!built) {  // built outside the lock; a problem another thread built meanwhile is the same
    ShardingOptimizer first(sg.graph, sub_, o);
    auto made = std::make_shared<const BuiltProblem>(first.problem());
    const std::lock_guard<std::mutex> lock(carried_mu_);
    built = carried_problems_.emplace(std::move(key), std::move(made)).first->second;
  }
  return std::make_shared<ShardingOptimizer>(
      ShardingOptimizer::from_parts(sg.graph, sub_, o, {}, *built, std::nullopt, {}));
}

StageBuilder::Carried StageBuilder::carried(const StageSolve& from, RecomputePolicy model) const {
  Carried c{carried_optimizer(from.sg, model), {}};
  std::vector<std::optional<Strategy>> wanted(from.plan.nodes.size());
  for (size_t i = 0; i < wanted.size(); ++i)
    if (from.plan.nodes[i]) wanted[i] = from.plan.nodes[i]->chosen;
  c.choice = c.so->match_strategies(wanted);
  return c;
}

std::shared_ptr<StageSolve> StageBuilder::recompute_all(const StageSolve& relaxed, StageMemory mem) const {
  if (!relaxed.plan.has_solution) return nullptr;
  Carried c = carried(relaxed, RecomputePolicy::kFull);
  auto s = evaluated(std::move(c.so), relaxed, c.choice, 1.0, mem.budget);
  if (s) report(*s, "its memory-free plan fully recomputed", mem);
  return s;
}

void StageBuilder::report(const StageSolve& s, std::string_view what, StageMemory mem) const {
  if (!opt_.progress) return;
  const double need = need_bytes(s, mem);
  say(fmt::format("  {}: {:.3f} us, {:.0f} B per device with {} in flight", what, s.microbatch_us, need,
                            mem.inflight));
}

std::shared_ptr<StageSolve> StageBuilder::recipe(StageKind kind, int32_t k, StageMemory mem) {
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
  counted_solve(s->plan);
  if (!s->plan.has_solution) return nullptr;
  s->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s->plan.lower_bound_us = 0;  // a bound of the pinned problem only
  s->plan.status = SolveStatus::kFeasible;
  stage_figures(mesh_, pp_, sub_, popt_.microbatches, *s);
  report(*s, fmt::format("torchtitan's {} with full recomputation", recipe_name(r)), mem);
  return s;
}

std::shared_ptr<StageSolve> StageBuilder::at_size(StageKind kind, int32_t k, const std::vector<StagePattern>& pats,
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

void StageBuilder::run_parallel(size_t tasks, const std::function<void(size_t)>& task) const {
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

std::shared_ptr<StageSolve> StageBuilder::least_recompute(const StageSolve& from, StageMemory mem,
                                                         std::string_view what) const {
  if (!from.plan.has_solution || mem.budget <= 0) return nullptr;
  // The model with recomputation nodes, whatever model `from` was planned in: its strategies
  // carry over, and its regions are the decisions.
  // Not a structured binding: the lambda below captures `so` (clang 14 refuses bindings there).
  Carried carried_in = carried(from, RecomputePolicy::kAuto);
  const std::shared_ptr<ShardingOptimizer> so = carried_in.so;
  const std::vector<StrategyIdx>& base = carried_in.choice;
  if (std::find(base.begin(), base.end(), -1) != base.end()) return nullptr;
  // Each evaluation's figures only, its time and need_bytes from the terms stage_figures
  // would give it: a stage plan of its own would copy the stage graph and the plan, which cost
  // more than the evaluation.  The winner is evaluated in full at the end.
  auto figures = [&](const std::vector<StrategyIdx>& choice) -> std::optional<RecomputeFigures> {
    if (std::find(choice.begin(), choice.end(), -1) != choice.end()) return std::nullopt;
    const Plan p = so->evaluate(choice);
    if (!std::isfinite(p.objective_us)) return std::nullopt;
    const InflightMemory m = inflight_memory(from.sg.graph, *so->built_problem(), 1.0, choice);
    const int64_t grads = mem.grads ? deferred_gradient_bytes(from.sg.graph, p, sub_) : 0;
    return RecomputeFigures{p.objective_us, need_bytes(m.microbatch_peak, grads, m.kept_bytes, mem.inflight)};
  };
  const auto fit = least_recompute_that_fits(so->problem(), base, static_cast<double>(mem.budget), figures);
  if (!fit) return nullptr;
  auto s = evaluated(so, from, fit->choice, 1.0, mem.budget);
  if (s) report(*s, fmt::format("{} with the least recomputation that fits ({} evaluations)", what, fit->evaluations), mem);
  return s;
}
double StageBuilder::rank_need_bytes(const StageSolve& s, double inflight, double deferred) {
  return need_bytes(s, inflight, true) + deferred * static_cast<double>(s.parts.kept_for_w_bytes);
}
std::shared_ptr<const StageSolve> StageBuilder::refit(const StageSolve& from, const StageSolve& relaxed, double inflight,
                                                     double deferred, int64_t budget) const {
  // least_recompute's need leaves the hand-over to W out: it is taken from `from`, checked on
  // the answer (the recomputation may change what B keeps for W) and, when over, taken out of
  // the budget once more.
  double handover = deferred * static_cast<double>(from.parts.kept_for_w_bytes);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const StageMemory mem{inflight, static_cast<int64_t>(std::floor(static_cast<double>(budget) - handover)), true, false};
    if (mem.budget <= 0) return nullptr;
    auto s = least_recompute(from, mem, "rank refit: a plan");
    if (!s) return nullptr;
    const double need = rank_need_bytes(*s, inflight, deferred);
    if (need <= static_cast<double>(budget)) {
      s->lower_bound_us = s->plan.lower_bound_us = std::min(relaxed.lower_bound_us, s->microbatch_us);
      return s;
    }
    handover += need - static_cast<double>(budget);
  }
  return nullptr;
}
}  // namespace autoshard

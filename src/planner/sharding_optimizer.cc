#include "planner/sharding_optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>

#include "planner/clock.h"
#include "planner/cluster.h"
#include "planner/overlap_solve.h"
#include "planner/parameter_share.h"
#include "planner/solution_file.h"
#include "planner/recompute.h"
#include "planner/twin_views.h"

namespace autoshard {

namespace {

int64_t alpa_variables(const BuiltProblem& bp) {
  int64_t n = 0;
  for (const ProblemNode& x : bp.problem.nodes) n += static_cast<int64_t>(x.costs.size());
  for (const BuiltProblem::Edge& e : bp.edges) n += static_cast<int64_t>(e.costs->size());
  return n;
}

/// Fills the auxiliary entries (-1) of a choice whose graph nodes are set: recomputation nodes
/// keep, parameter-memory shadows follow their parameter.
void complete_aux_choice(const BuiltProblem& bp, std::vector<StrategyIdx>& choice) {
  complete_recompute_choice(bp, choice);
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v)
    if (choice[static_cast<size_t>(v)] < 0) {
      NodeIdx gi = bp.graph_node[static_cast<size_t>(v)];
      PNodeIdx main = bp.pnode[static_cast<size_t>(gi)];
      if (main != v) choice[static_cast<size_t>(v)] = choice[static_cast<size_t>(main)];
    }
}

/// Default policy, memory binding: share of the time left kept, while planning with
/// recomputation, for the keep-everything solve on the problem without it.
constexpr double kKeepShare = 0.5;

}  // namespace

ShardingOptimizer::ShardingOptimizer(Graph graph, Mesh mesh, PlannerOptions options)
    : graph_(std::move(graph)), mesh_(std::move(mesh)), options_(options) {
  std::string err = graph_.validate();
  if (!err.empty()) throw std::runtime_error("invalid graph: " + err);
}

std::string ShardingOptimizer::unique_name(const std::string& base) const {
  auto taken = [&](const std::string& n) {
    return std::any_of(constraints_.begin(), constraints_.end(),
                       [&](const Constraint& c) { return c.name == n; });
  };
  if (!taken(base)) return base;
  for (int k = 2;; ++k) {
    std::string n = fmt::format("{}#{}", base, k);
    if (!taken(n)) return n;
  }
}

void ShardingOptimizer::add_constraint(Constraint c) {
  if (c.name.empty())
    c.name = unique_name(c.kind == Constraint::Kind::kPin ? "pin:" + c.node : "parameter_memory");
  else if (std::any_of(constraints_.begin(), constraints_.end(),
                       [&](const Constraint& x) { return x.name == c.name; }))
    throw std::runtime_error(fmt::format("constraint '{}' already exists", c.name));
  if (c.kind == Constraint::Kind::kPin) {
    if (!graph_.find(c.node))
      throw std::runtime_error(fmt::format("constraint '{}': no node named '{}'", c.name, c.node));
    if (static_cast<int32_t>(c.output.size()) != mesh_.ndim())
      throw std::runtime_error(fmt::format("constraint '{}': {} placements for a {}-D mesh",
                                           c.name, c.output.size(), mesh_.ndim()));
  }
  constraints_.push_back(std::move(c));
  built_.reset();
  spare_built_.reset();
}

std::string ShardingOptimizer::pin(const std::string& node, const std::vector<Placement>& output,
                                   std::optional<std::vector<std::vector<Placement>>> inputs) {
  Constraint c;
  c.kind = Constraint::Kind::kPin;
  c.node = node;
  c.output = output;
  c.inputs = std::move(inputs);
  c.name = unique_name("pin:" + node);
  add_constraint(c);
  return constraints_.back().name;
}

std::vector<std::string> ShardingOptimizer::add_input_constraints(
    const std::vector<std::vector<Placement>>& p) {
  std::vector<std::string> names;
  size_t k = 0;
  for (const Node& n : graph_.nodes) {
    if (n.kind != NodeKind::kInput) continue;
    if (k >= p.size()) break;
    if (!p[k].empty()) {
      Constraint c;
      c.node = n.name;
      c.output = p[k];
      c.name = unique_name("input:" + n.name);
      add_constraint(c);
      names.push_back(constraints_.back().name);
    }
    ++k;
  }
  if (k < p.size())
    throw std::runtime_error(fmt::format("{} input constraints but the graph has {} inputs",
                                         p.size(), k));
  return names;
}

std::vector<std::string> ShardingOptimizer::add_output_constraints(
    const std::vector<std::vector<Placement>>& p) {
  std::vector<std::string> names;
  const Node* out = nullptr;
  for (const Node& n : graph_.nodes)
    if (n.kind == NodeKind::kOutput) out = &n;
  if (!out) throw std::runtime_error("the graph has no output node");
  if (p.size() > out->inputs.size())
    throw std::runtime_error(fmt::format("{} output constraints but the graph returns {} tensors",
                                         p.size(), out->inputs.size()));
  for (size_t k = 0; k < p.size(); ++k) {
    if (p[k].empty()) continue;
    const Node& src = graph_.node(out->inputs[k].node);
    if (out->inputs[k].output != 0)
      throw std::runtime_error(fmt::format("output {} is output {} of '{}': only first outputs "
                                           "can be constrained", k, out->inputs[k].output, src.name));
    Constraint c;
    c.node = src.name;
    c.output = p[k];
    c.name = unique_name("output:" + src.name);
    add_constraint(c);
    names.push_back(constraints_.back().name);
  }
  return names;
}

std::string ShardingOptimizer::add_parameter_memory_constraint(double low, double high) {
  Constraint c;
  c.kind = Constraint::Kind::kParameterMemory;
  c.low = low;
  c.high = high;
  c.name = unique_name("parameter_memory");
  add_constraint(c);
  return constraints_.back().name;
}

bool ShardingOptimizer::remove_constraint(const std::string& name) {
  auto it = std::find_if(constraints_.begin(), constraints_.end(),
                         [&](const Constraint& c) { return c.name == name; });
  if (it == constraints_.end()) return false;
  constraints_.erase(it);
  built_.reset();
  spare_built_.reset();
  return true;
}

RecomputePolicy ShardingOptimizer::built_policy() const {
  if (options_.recompute != RecomputePolicy::kIfNeeded) return options_.recompute;
  return recompute_escalated_ ? RecomputePolicy::kAuto : RecomputePolicy::kNone;
}

const BuiltProblem& ShardingOptimizer::problem() {
  if (!built_) {
    PlannerOptions o = options_;
    o.recompute = built_policy();
    built_ = std::make_unique<BuiltProblem>(build_problem(graph_, mesh_, o, constraints_));
  }
  return *built_;
}

void ShardingOptimizer::set_recompute_escalated(bool on) {
  if (options_.recompute != RecomputePolicy::kIfNeeded || on == recompute_escalated_) return;
  // A warm start of the old problem, by graph node (the strategy lists do not depend on the
  // policy); the new problem's recomputation nodes keep, shadows follow their parameter.
  std::vector<StrategyIdx> by_node;
  if (built_ && static_cast<PNodeIdx>(warm_start_.size()) == built_->problem.num_nodes()) {
    by_node.assign(static_cast<size_t>(graph_.size()), -1);
    for (NodeIdx i = 0; i < graph_.size(); ++i)
      if (PNodeIdx v = built_->pnode[static_cast<size_t>(i)]; v >= 0)
        by_node[static_cast<size_t>(i)] = warm_start_[static_cast<size_t>(v)];
  }
  recompute_escalated_ = on;
  std::swap(built_, spare_built_);  // the other policy's problem, if built
  if (by_node.empty()) return;
  const BuiltProblem& bp = problem();
  std::vector<StrategyIdx> choice(static_cast<size_t>(bp.problem.num_nodes()), -1);
  for (NodeIdx i = 0; i < graph_.size(); ++i)
    if (PNodeIdx v = bp.pnode[static_cast<size_t>(i)]; v >= 0) choice[static_cast<size_t>(v)] = by_node[static_cast<size_t>(i)];
  complete_aux_choice(bp, choice);
  for (StrategyIdx& c : choice) c = std::max<StrategyIdx>(c, 0);
  warm_start_ = std::move(choice);
}

Plan ShardingOptimizer::evaluate(const std::vector<StrategyIdx>& choice) {
  const BuiltProblem& bp = problem();
  const Problem& p = bp.problem;
  if (static_cast<PNodeIdx>(choice.size()) != p.num_nodes())
    throw std::runtime_error("evaluate: assignment size differs from the problem");
  Plan plan;
  plan.nodes.resize(static_cast<size_t>(graph_.size()));
  for (NodeIdx i = 0; i < graph_.size(); ++i) {
    PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0) continue;
    StrategyIdx q = choice[static_cast<size_t>(v)];
    NodePlan np;
    np.node = i;
    np.strategy = q;
    np.chosen = bp.strategies[static_cast<size_t>(v)].at(static_cast<size_t>(q));
    np.compute_us = p.nodes[static_cast<size_t>(v)].costs[static_cast<size_t>(q)];
    plan.compute_us += np.compute_us;
    plan.nodes[static_cast<size_t>(i)] = std::move(np);
  }
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const BuiltProblem::Edge& e = bp.edges[k];
    const size_t nv = p.nodes[static_cast<size_t>(e.v)].costs.size();
    Cost c = (*e.costs)[static_cast<size_t>(choice[static_cast<size_t>(e.u)]) * nv +
                        static_cast<size_t>(choice[static_cast<size_t>(e.v)])];
    const auto& origin = bp.edge_origin[k];
    if (origin.slot == kMemoryTieSlot) {  // memory tie: zero or infinite
      if (std::isinf(c)) plan.comm_us = kInfCost;
      continue;
    }
    plan.comm_us += c;
    if (auto& np = plan.nodes[static_cast<size_t>(origin.consumer)]) np->comm_us += c;
  }
  mark_twins(bp, plan);
  // Shadow nodes of parameter-memory constraints carry no cost; recomputation's gap nodes do
  // (its redistributions are already in comm_us).
  const RecomputeCost rc = recompute_cost(bp, choice);
  plan.compute_us += rc.compute_us;
  plan.recompute_us = rc.compute_us + rc.comm_us;
  plan.layer_recompute = layer_recompute(bp, choice);
  plan.recomputed_nodes = recomputed_nodes(graph_, bp, choice);
  plan.additive_us = plan.compute_us + plan.comm_us;
  plan.objective_us = plan.additive_us;
  if (options_.effective_objective() == Objective::kOverlap) {
    const OverlapModel model = build_overlap_model(graph_, bp);
    plan.overlapped_us = overlap_terms(model, bp, choice).overlapped_total_us;
    plan.objective_us -= plan.overlapped_us;
    plan.overlap_aware = true;
  }
  plan.peak_memory_bytes = peak_usage(p, choice, graph_.size() + 1);  // shadows live past the schedule
  plan.memory_limit_bytes = bp.memory_limit;
  plan.graph_nodes = graph_.size();
  plan.problem_nodes = p.num_nodes();
  plan.problem_edges = static_cast<int32_t>(bp.edges.size());
  plan.alpa_variables = alpa_variables(bp);
  plan.has_solution = true;
  for (const std::string& op : bp.fallback_ops)
    plan.warnings.push_back(fmt::format("no sharding rule for op '{}': planned replicated", op));
  return plan;
}

ShardingOptimizer ShardingOptimizer::from_parts(Graph graph, Mesh mesh, PlannerOptions options,
                                                std::vector<Constraint> constraints,
                                                std::optional<BuiltProblem> problem,
                                                std::optional<Plan> solution,
                                                std::vector<StrategyIdx> choice) {
  ShardingOptimizer so(std::move(graph), std::move(mesh), std::move(options));
  for (Constraint& c : constraints) so.add_constraint(std::move(c));
  // kIfNeeded: the saved problem (or plan) says whether memory made it recompute.
  so.recompute_escalated_ = so.options_.recompute == RecomputePolicy::kIfNeeded &&
                            (problem ? !problem->recompute_regions.empty()
                                     : solution && !solution->layer_recompute.empty());
  if (problem) so.built_ = std::make_unique<BuiltProblem>(std::move(*problem));
  so.solution_ = std::move(solution);
  so.solution_choice_ = std::move(choice);
  return so;
}

Plan ShardingOptimizer::get_solution() {
  // MASE's preload_solution: a solution file of this very problem replaces the solve.
  std::vector<std::string> file_warnings;
  if (options_.preload_solution && !options_.ilp_solution_file.empty()) {
    SolutionFileLoad reused = try_load_solution_file(*this, options_.ilp_solution_file);
    if (reused.plan) {
      solution_ = reused.plan;
      solution_choice_ = std::move(reused.choice);
      return *reused.plan;
    }
    if (!reused.warning.empty()) {
      if (options_.progress) options_.progress(reused.warning);
      file_warnings.push_back(reused.warning);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  // The default policy starts without recomputation every time (a plan that fits that way
  // has no recomputation node, whatever an earlier solve needed).
  const bool if_needed = options_.recompute == RecomputePolicy::kIfNeeded;
  if (if_needed) set_recompute_escalated(false);
  (void)problem();
  double t_build = seconds_since(t0);
  // A parameter-memory bound no strategy choice meets: infeasible before any search.
  if (const auto unreachable = unreachable_shares(graph_, mesh_, problem(), constraints_);
      !unreachable.empty()) {
    const BuiltProblem& bp = problem();
    Plan plan;
    plan.status = SolveStatus::kInfeasible;
    plan.nodes.resize(static_cast<size_t>(graph_.size()));
    plan.objective_us = plan.additive_us = plan.gap = kInfCost;  // no plan: no step time
    plan.memory_limit_bytes = bp.memory_limit;
    plan.graph_nodes = graph_.size();
    plan.problem_nodes = bp.problem.num_nodes();
    plan.problem_edges = static_cast<int32_t>(bp.edges.size());
    plan.alpa_variables = alpa_variables(bp);
    for (const UnreachableShare& u : unreachable) plan.warnings.push_back(u.why());
    plan.phase_seconds.push_back({"build", t_build});
    solution_ = plan;
    solution_choice_.clear();
    return plan;
  }

  const bool has_shadows = std::any_of(constraints_.begin(), constraints_.end(), [](const Constraint& c) {
    return c.kind == Constraint::Kind::kParameterMemory;
  });
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(options_.time_limit_s));
  std::vector<std::pair<std::string, double>> first_phases;
  bool keep_may_fit = false;
  std::optional<TiedSolve> probed;  // the probe's solve, when memory does not bind
  bool probe_stopped = false;
  if (if_needed && !has_shadows) {
    // Does memory bind without recomputation?  The memory-free solve says (its plan fits, or
    // the floor proves that nothing does).
    TiedSolveInput probe{graph_, problem(), options_, has_shadows, nullptr, warm_start_, deadline};
    probe.relaxed_only = true;
    TiedSolve t = solve_tied(probe);
    probe_stopped = t.clock_stopped;
    const int64_t limit = problem().problem.usage_limit;
    const bool floor_fails = limit >= 0 && t.peak_floor > limit;
    if (floor_fails || !t.fits) {
      for (const auto& ph : t.r.phase_seconds) first_phases.push_back({"without recompute " + ph.first, ph.second});
      keep_may_fit = !floor_fails;
      auto t2 = std::chrono::steady_clock::now();
      set_recompute_escalated(true);
      const bool regions = !problem().recompute_regions.empty();
      t_build += seconds_since(t2);
      if (!regions) {
        set_recompute_escalated(false);  // nothing to recompute in this graph
        keep_may_fit = false;
      } else if (options_.progress) {
        options_.progress("memory binds without recomputation: planning with --recompute auto");
      }
    } else {
      probed = std::move(t);
    }
  }
  PlannerOptions built_options = options_;
  built_options.recompute = built_policy();
  auto solve_deadline = deadline;
  if (keep_may_fit) {
    // Leave kKeepShare of the time to keep-everything without recomputation.
    const auto left = deadline - std::chrono::steady_clock::now();
    solve_deadline -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(left * kKeepShare);
  }
  TiedSolveInput in{graph_, problem(), built_options, has_shadows, nullptr, warm_start_, solve_deadline};
  if (probed && !keep_may_fit) in.first_solve = &*probed;
  Solved s = solve_objective(in);
  if (keep_may_fit) keep_everything_if_better(s, has_shadows, deadline);
  s.clock_stopped = s.clock_stopped || probe_stopped;
  s.phase_seconds.insert(s.phase_seconds.begin(), first_phases.begin(), first_phases.end());
  spare_built_.reset();  // the plan's problem stays; the other policy's is not needed again
  const BuiltProblem& bp = problem();
  Plan plan = plan_of(s, bp);
  plan.phase_seconds.insert(plan.phase_seconds.begin(), {"build", t_build});
  if (plan.has_solution && options_.run_checks) check_plan(plan, s, bp);
  plan.warnings.insert(plan.warnings.end(), file_warnings.begin(), file_warnings.end());
  solution_ = plan;
  solution_choice_ = s.choice;
  if (!options_.ilp_solution_file.empty() && plan.has_solution)
    save_solution_file(*this, plan, solution_choice_, options_.ilp_solution_file);
  return plan;
}

ShardingOptimizer::Solved ShardingOptimizer::solve_objective(const TiedSolveInput& in) {
  const OverlapModel model = options_.effective_objective() == Objective::kOverlap
                                 ? build_overlap_model(graph_, in.bp)
                                 : OverlapModel{};
  return model.empty() ? solve_additive(in) : solve_overlap_objective(in, model);
}

void ShardingOptimizer::keep_everything_if_better(Solved& s, bool has_shadows,
                                                  std::chrono::steady_clock::time_point deadline) {
  // Keeping every activation, judged on the problem without recomputation, whose views share
  // their base's memory (the recomputation model counts them apart: problem_builder.cc
  // views_alias), so that its keep-everything plans include the auto model's.
  set_recompute_escalated(false);
  PlannerOptions o = options_;
  o.recompute = RecomputePolicy::kNone;
  // The additive cost is the objective: nothing above the plan in hand is wanted.
  if (options_.effective_objective() == Objective::kAdditive && !s.choice.empty())
    o.cutoff_us = std::min(o.cutoff_us, s.objective_us);
  TiedSolveInput in{graph_, problem(), o, has_shadows, nullptr, warm_start_, deadline};
  Solved k = solve_objective(in);
  const bool stopped = s.clock_stopped || k.clock_stopped;
  const double bound = std::min(s.lower_bound_us, k.status == SolveStatus::kInfeasible ? kInfCost : k.lower_bound_us);
  if (!k.choice.empty() && k.objective_us < s.objective_us) {
    if (options_.progress)
      options_.progress(fmt::format("keeping every activation is cheaper: {:.1f} us", k.objective_us));
    k.phase_seconds.insert(k.phase_seconds.begin(), s.phase_seconds.begin(), s.phase_seconds.end());
    s = std::move(k);
  } else {
    for (const auto& ph : k.phase_seconds) s.phase_seconds.push_back({"keep " + ph.first, ph.second});
    set_recompute_escalated(true);
  }
  s.clock_stopped = stopped;
  if (s.choice.empty()) return;
  s.lower_bound_us = std::min(bound, s.objective_us);
  s.gap = (s.objective_us - s.lower_bound_us) / std::max(std::abs(s.objective_us), 1e-9);
  s.status = s.gap <= std::max(options_.mip_gap, kProofTolerance) ? SolveStatus::kOptimal : SolveStatus::kFeasible;
}

ShardingOptimizer::Solved ShardingOptimizer::solve_additive(const TiedSolveInput& in) {
  Solved s;
  s.tied = solve_tied(in);
  const SolveResult& r = s.tied.r;
  if (!r.choice.empty()) s.choice = s.tied.cp.expand(r.choice);
  s.status = r.status;
  s.objective_us = r.objective;
  s.lower_bound_us = r.lower_bound;
  s.gap = r.gap;
  s.phase_seconds = r.phase_seconds;
  s.clock_stopped = s.tied.clock_stopped;
  return s;
}

ShardingOptimizer::Solved ShardingOptimizer::solve_overlap_objective(const TiedSolveInput& in,
                                                                     const OverlapModel& model) {
  OverlapSolve o = solve_overlap(in, model);
  Solved s;
  s.tied = std::move(o.last);
  s.choice = std::move(o.choice);
  s.status = o.status;
  s.objective_us = o.objective_us;
  s.lower_bound_us = o.lower_bound_us;
  s.gap = s.choice.empty() ? kInfCost
                           : (o.objective_us - o.lower_bound_us) / std::max(std::abs(o.objective_us), 1e-9);
  s.phase_seconds = std::move(o.phase_seconds);
  s.objective_solves = o.solves;
  s.clock_stopped = o.clock_stopped;
  return s;
}

Plan ShardingOptimizer::plan_of(const Solved& s, const BuiltProblem& bp) {
  const SolveResult& r = s.tied.r;
  const ClusteredProblem& cp = s.tied.cp;
  Plan plan;
  if (!s.choice.empty()) {
    plan = evaluate(s.choice);
  } else {
    plan.nodes.resize(static_cast<size_t>(graph_.size()));
    plan.objective_us = kInfCost;  // no plan: no step time (JSON null, not 0)
    plan.additive_us = kInfCost;
    plan.memory_limit_bytes = bp.memory_limit;
    plan.graph_nodes = graph_.size();
    plan.problem_nodes = bp.problem.num_nodes();
    plan.problem_edges = static_cast<int32_t>(bp.edges.size());
    plan.alpa_variables = alpa_variables(bp);
  }
  plan.status = s.status;
  plan.lower_bound_us = s.lower_bound_us;
  plan.gap = plan.has_solution ? s.gap : kInfCost;
  plan.objective_solves = s.objective_solves;
  plan.clock_stopped = s.clock_stopped;
  plan.min_peak_memory_bytes = r.min_peak_usage;
  if (!plan.has_solution && r.status == SolveStatus::kInfeasible) {
    // Proven: the floor, or the solver's minimum when its memory model was exact (the tied
    // model over-estimates, so its minimum only bounds from above).
    const bool exact_min = r.min_peak_proven && r.min_peak_usage >= 0 && cp.memory_exact;
    plan.min_peak_lower_bound_bytes =
        exact_min ? std::max(s.tied.peak_floor, r.min_peak_usage) : s.tied.peak_floor;
  }
  plan.clustered_nodes = cp.problem.num_nodes();
  plan.layer_clusters = cp.num_classes_tied;
  plan.reduced_nodes = r.reduced_nodes;
  plan.reduced_edges = r.reduced_edges;
  plan.mip_variables = r.mip_variables;
  plan.phase_seconds.push_back({"cluster", s.tied.cluster_seconds});
  for (const auto& ph : s.phase_seconds) plan.phase_seconds.push_back({"solve." + ph.first, ph.second});
  return plan;
}

void ShardingOptimizer::check_plan(Plan& plan, const Solved& s, const BuiltProblem& bp) {
  // Independent check: the step time again from the full problem (evaluate() computes it
  // without the solver's tied or rescaled problems) against what the solve reported; memory
  // against the limit.
  const double tol = 1e-6 * std::max(1.0, std::abs(plan.objective_us));
  if (std::abs(s.objective_us - plan.objective_us) > tol)
    throw std::runtime_error(fmt::format("check failed: solver objective {} but the plan costs {}",
                                         s.objective_us, plan.objective_us));
  if (s.objective_solves == 0) {
    const Cost again = evaluate_cost(bp, s.choice);
    if (std::abs(again - plan.additive_us) > tol)
      throw std::runtime_error(fmt::format("check failed: the plan's additive cost {} is {} again",
                                           plan.additive_us, again));
  }
  if (bp.problem.usage_limit >= 0 && peak_usage(bp.problem, s.choice) > bp.problem.usage_limit)
    throw std::runtime_error("check failed: the plan exceeds the memory limit");
  plan.checked = true;
}

std::vector<StrategyIdx> ShardingOptimizer::match_strategies(
    const std::vector<std::optional<Strategy>>& wanted) {
  const BuiltProblem& bp = problem();
  std::vector<StrategyIdx> choice(static_cast<size_t>(bp.problem.num_nodes()), -1);
  for (NodeIdx i = 0; i < graph_.size() && i < static_cast<NodeIdx>(wanted.size()); ++i) {
    PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0 || !wanted[static_cast<size_t>(i)]) continue;
    const Strategy& w = *wanted[static_cast<size_t>(i)];
    const auto& strats = bp.strategies[static_cast<size_t>(v)];
    for (size_t q = 0; q < strats.size(); ++q) {
      const Strategy& s = strats[q];
      // A saved entry without input specs matches on outputs alone.
      // A context-parallel attention's kind is part of the strategy (ring and all-gather
      // share their specs).
      bool same = s.outputs.size() == w.outputs.size() && s.cp == w.cp &&
                  (w.inputs.empty() || s.inputs.size() == w.inputs.size());
      for (size_t k = 0; same && k < s.outputs.size(); ++k)
        same = s.outputs[k].placements == w.outputs[k].placements;
      for (size_t k = 0; same && k < w.inputs.size(); ++k)
        same = s.inputs[k].placements == w.inputs[k].placements;
      if (same) {
        choice[static_cast<size_t>(v)] = static_cast<StrategyIdx>(q);
        break;
      }
    }
  }
  complete_aux_choice(bp, choice);
  return choice;
}

}  // namespace autoshard

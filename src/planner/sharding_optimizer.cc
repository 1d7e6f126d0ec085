#include "planner/sharding_optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>

#include "planner/clock.h"
#include "planner/cluster.h"
#include "planner/exact_tied.h"
#include "planner/solution_file.h"
#include "planner/recompute.h"

namespace autoshard {

namespace {

/// Time for the minimal-peak search once the memory floor has proven a budget infeasible: it
/// only improves the upper bound stated beside the proven lower bound.
constexpr double kMinPeakSeconds = 4.0;
/// Share of the memory-limited solve's time for the exact tied model's search (exact_tied.h).
constexpr double kExactTiedShare = 0.8;
/// With --recompute auto under a binding limit: share of the exact tied model's time for the
/// recompute-none solve that warm-starts the auto one.
constexpr double kKeepFirstShare = 0.25;

int64_t alpa_variables(const BuiltProblem& bp) {
  int64_t n = 0;
  for (const ProblemNode& x : bp.problem.nodes) n += static_cast<int64_t>(x.costs.size());
  for (const BuiltProblem::Edge& e : bp.edges) n += static_cast<int64_t>(e.costs->size());
  return n;
}

/// Largest usage any assignment could reach at any time point: if it fits, the memory limit
/// cannot bind and the solver may drop it (an exact simplification).
int64_t peak_upper_bound(const Problem& p) {
  std::vector<int64_t> usage;
  usage.reserve(p.nodes.size());
  for (const ProblemNode& n : p.nodes) usage.push_back(*std::max_element(n.usages.begin(), n.usages.end()));
  return peak_of_usages(p, usage);
}

/// The memory-limited solve on the exact tied model (exact_tied.h), with kExactTiedShare of the
/// seconds `remaining()` leaves.  keep_first (--recompute auto): a recompute-none solve of the
/// same model (forbid_recomputation) first takes kKeepFirstShare of them; its plan is a plan of
/// the auto model and starts that search, so auto never ends above none (llama3-70b 4x8: the
/// auto search alone ended at 1065.3 ms, keeping everything gives 1052.9 ms;
/// docs/benchmarks.md, "Round 6").  Throws std::invalid_argument when there is no exact model.
SolveResult solve_exact_tied_model(const BuiltProblem& bp, const ClusteredProblem& cp, bool keep_first,
                                   SolverOptions eo, const std::function<double()>& remaining,
                                   const std::function<void(const std::string&)>& say) {
  const ExactTiedProblem et = exact_memory_tied_problem(bp.problem, cp);
  // Most of the time: what is left serves the over-estimating model's solve, which proves
  // infeasibility (or finds nothing either) when this finds no plan.
  eo.time_limit_s = remaining() * kExactTiedShare;
  SolveResult kept;
  if (keep_first) {
    ExactTiedProblem keep = et;
    if (forbid_recomputation(bp, cp.class_of, keep.problem)) {
      SolverOptions ko = eo;
      ko.time_limit_s = eo.time_limit_s * kKeepFirstShare;
      kept = solve_exact_tied(keep, ko);
      if (!kept.choice.empty()) {
        say(fmt::format("recompute auto: keeping every activation gives {:.1f} us", kept.objective));
        eo.warm_start = et.extend(kept.choice);
      }
      eo.time_limit_s = remaining() * kExactTiedShare;
    }
  }
  SolveResult r = solve_exact_tied(et, eo);
  if (!kept.choice.empty() && (r.choice.empty() || kept.objective < r.objective)) {
    // The warm start did not survive the auto model's reductions: keep's plan stands, under
    // the auto model's bound.
    r.choice = kept.choice;
    r.objective = kept.objective;
    r.peak_usage = kept.peak_usage;
    r.lower_bound = std::min(r.lower_bound, r.objective);
    r.status = SolveStatus::kFeasible;
  }
  return r;
}

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
  return true;
}

const BuiltProblem& ShardingOptimizer::problem() {
  if (!built_)
    built_ = std::make_unique<BuiltProblem>(build_problem(graph_, mesh_, options_, constraints_));
  return *built_;
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
    if (origin.slot == -2) {  // parameter-memory tie: zero or infinite
      if (std::isinf(c)) plan.comm_us = kInfCost;
      continue;
    }
    plan.comm_us += c;
    if (auto& np = plan.nodes[static_cast<size_t>(origin.consumer)]) np->comm_us += c;
  }
  // Shadow nodes of parameter-memory constraints carry no cost; recomputation's gap nodes do
  // (its redistributions are already in comm_us).
  const RecomputeCost rc = recompute_cost(bp, choice);
  plan.compute_us += rc.compute_us;
  plan.recompute_us = rc.compute_us + rc.comm_us;
  plan.layer_recompute = layer_recompute(bp, choice);
  plan.recomputed_nodes = recomputed_nodes(graph_, bp, choice);
  plan.objective_us = plan.compute_us + plan.comm_us;
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
  const BuiltProblem& bp = problem();
  double t_build = seconds_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  bool has_shadows = std::any_of(constraints_.begin(), constraints_.end(), [](const Constraint& c) {
    return c.kind == Constraint::Kind::kParameterMemory;
  });
  bool memory_may_bind = bp.problem.usage_limit >= 0 &&
                         (has_shadows || peak_upper_bound(bp.problem) > bp.problem.usage_limit);
  const auto deadline = t0 + std::chrono::duration<double>(options_.time_limit_s);
  auto remaining = [&] {
    return std::max(0.5, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
  };
  SolverOptions so;
  so.progress = options_.progress;
  auto say = [&](const std::string& m) {
    if (options_.progress) options_.progress(m);
  };
  so.mip_gap = options_.mip_gap;
  so.threads = options_.threads;
  so.cutoff = options_.cutoff_us;

  // Memory is handled by relaxation first: solve without the usage limit (every reduction
  // applies); if the optimum fits, it is also optimal for the limited problem.  Otherwise
  // solve again with memory, keeping the relaxed optimum as a lower bound.  Parameter-memory
  // constraints live in the usage limit, so they are never relaxed.
  ClusteredProblem cp = options_.cluster ? cluster_problem(graph_, bp) : identity_cluster(bp);
  double t_cluster = seconds_since(t1);
  // The memory floor: every node at its least usage.  When even that exceeds the limit, no plan
  // fits and the floor is a proven lower bound on the smallest peak, found without a solve.
  // Parameter-memory shadows scale usages, so the floor means nothing with them.
  int64_t peak_floor = -1;
  std::vector<StrategyIdx> least;
  if (bp.problem.usage_limit >= 0 && !has_shadows) {
    least = least_usage_choice(bp.problem);
    peak_floor = peak_usage(bp.problem, least);
  }
  SolveResult r;
  if (peak_floor > bp.problem.usage_limit) {
    say(fmt::format("no plan fits: every node at its least memory still peaks at {} bytes",
                    peak_floor));
    r.status = SolveStatus::kInfeasible;
    r.method = "memory floor";
    r.objective = kInfCost;
    r.lower_bound = kInfCost;
    r.gap = 0;
    if (evaluate_cost(bp, least) < kInfCost) {
      r.min_peak_usage = peak_floor;  // the floor is reached: proven minimum
      r.min_peak_proven = true;
    } else {
      // Edges forbid the least-usage layout: the tied problem's minimal-peak search gives an
      // upper bound (its memory model never under-estimates), within a few seconds.
      SolverOptions mo = so;
      mo.time_limit_s = std::min(remaining(), kMinPeakSeconds);
      mo.warm_start.clear();
      const SolveResult m = solve(cp.problem, mo);
      r.min_peak_usage = m.min_peak_usage;
      r.min_peak_proven = m.min_peak_proven && cp.memory_exact;
      r.phase_seconds = m.phase_seconds;
    }
  } else {
    Problem relaxed_problem = cp.problem;
    if (!has_shadows) {
      relaxed_problem.usage_limit = -1;
      keep_all_activations(bp, cp.class_of, relaxed_problem);  // exact without memory
    }
    // When memory may bind, the relaxed solve gets half of the time: the second solve needs room.
    so.time_limit_s = memory_may_bind && !has_shadows ? remaining() / 2 : remaining();
    if (!warm_start_.empty() && static_cast<PNodeIdx>(warm_start_.size()) == bp.problem.num_nodes())
      so.warm_start = cp.restrict(warm_start_);
    say(fmt::format("built {} nodes, {} edges; tied into {} nodes", bp.problem.num_nodes(),
                    bp.edges.size(), cp.problem.num_nodes()));
    SolverOptions relaxed_so = so;
    if (!has_shadows) lower_kept_choice(bp, cp.class_of, relaxed_so.warm_start);
    r = solve(relaxed_problem, relaxed_so);
    if (!has_shadows) lift_kept_choice(bp, cp.class_of, cp.problem, r.choice);
    bool relaxed = memory_may_bind && !has_shadows;
    if (relaxed && !r.choice.empty() &&
        peak_usage(bp.problem, cp.expand(r.choice)) <= bp.problem.usage_limit)
      relaxed = false;  // the relaxed optimum fits: done
    if (relaxed && r.lower_bound >= options_.cutoff_us) {
      // Even without memory nothing beats the cutoff: stop.  The memory-free choice does not
      // fit, so there is no plan, only the bound.
      relaxed = false;
      r.choice.clear();
      r.objective = kInfCost;
      r.status = SolveStatus::kTimedOut;
    }
    if (relaxed) {
      say(fmt::format("the memory-free optimum ({}) does not fit: solving with the memory limit",
                      r.choice.empty() ? std::string("none") : fmt::format("{:.1f} us", r.objective)));
      Cost relaxed_bound = r.choice.empty() ? -kInfCost : r.lower_bound;
      so.time_limit_s = remaining();
      auto phases = r.phase_seconds;
      // Where the tied memory model over-estimates, the memory-limited solve works on its exact
      // model instead (exact_tied.h): plans that the over-estimate would reject stay open
      // (llama3-8b 2x8 at 20 GiB: 2 % faster) and the solve's bounds hold for every tied plan.
      bool exact = cp.memory_exact, solved = false;
      if (!exact) {
        try {
          r = solve_exact_tied_model(bp, cp, options_.recompute == RecomputePolicy::kAuto, so, remaining, say);
          solved = exact = !r.choice.empty();
        } catch (const std::invalid_argument& e) {
          say(std::string("no exact tied memory model: ") + e.what());
        }
      }
      if (!solved) {
        so.time_limit_s = remaining();
        r = solve(cp.problem, so);
      }
      if (r.status == SolveStatus::kInfeasible && !cp.memory_exact) {
        // The tied memory model over-estimates: only the untied problem can prove infeasibility.
        auto t2 = std::chrono::steady_clock::now();
        cp = identity_cluster(bp);
        t_cluster += seconds_since(t2);
        so.time_limit_s = remaining();
        so.warm_start.clear();
        r = solve(cp.problem, so);
      }
      for (auto it = phases.rbegin(); it != phases.rend(); ++it)
        r.phase_seconds.insert(r.phase_seconds.begin(), {"relaxed " + it->first, it->second});
      if (!r.choice.empty()) {
        if (!exact && r.status == SolveStatus::kOptimal)
          r.status = SolveStatus::kFeasible;  // optimal only for the over-estimated memory
        if (relaxed_bound > r.lower_bound || !exact) r.lower_bound = relaxed_bound;
        r.gap = (r.objective - r.lower_bound) / std::max(std::abs(r.objective), 1e-9);
        if (r.gap <= std::max(options_.mip_gap, kProofTolerance)) r.status = SolveStatus::kOptimal;
      }
    }
  }

  Plan plan;
  if (!r.choice.empty()) {
    plan = evaluate(cp.expand(r.choice));
  } else {
    plan.nodes.resize(static_cast<size_t>(graph_.size()));
    plan.objective_us = kInfCost;  // no plan: no step time (JSON null, not 0)
    plan.memory_limit_bytes = bp.memory_limit;
    plan.graph_nodes = graph_.size();
    plan.problem_nodes = bp.problem.num_nodes();
    plan.problem_edges = static_cast<int32_t>(bp.edges.size());
    plan.alpa_variables = alpa_variables(bp);
  }
  plan.status = r.status;
  plan.lower_bound_us = r.lower_bound;
  plan.gap = plan.has_solution ? r.gap : kInfCost;
  plan.min_peak_memory_bytes = r.min_peak_usage;
  if (!plan.has_solution && r.status == SolveStatus::kInfeasible) {
    // Proven: the floor, or the solver's minimum when its memory model was exact (the tied
    // model over-estimates, so its minimum only bounds from above).
    const bool exact_min = r.min_peak_proven && r.min_peak_usage >= 0 && cp.memory_exact;
    plan.min_peak_lower_bound_bytes = exact_min ? std::max(peak_floor, r.min_peak_usage) : peak_floor;
  }
  plan.clustered_nodes = cp.problem.num_nodes();
  plan.layer_clusters = cp.num_classes_tied;
  plan.reduced_nodes = r.reduced_nodes;
  plan.reduced_edges = r.reduced_edges;
  plan.mip_variables = r.mip_variables;
  plan.phase_seconds.push_back({"build", t_build});
  plan.phase_seconds.push_back({"cluster", t_cluster});
  for (const auto& ph : r.phase_seconds) plan.phase_seconds.push_back({"solve." + ph.first, ph.second});
  if (plan.has_solution && options_.run_checks) {
    // Independent check: recompute the objective from the full problem and compare with what
    // the solver reported on the clustered one; check memory against the limit.
    std::vector<StrategyIdx> full = cp.expand(r.choice);
    Cost again = evaluate_cost(bp, full);
    double tol = 1e-6 * std::max(1.0, std::abs(again));
    if (std::abs(again - r.objective) > tol || std::abs(again - plan.objective_us) > tol)
      throw std::runtime_error(fmt::format(
          "check failed: solver objective {} but the plan costs {}", r.objective, again));
    if (bp.problem.usage_limit >= 0 && peak_usage(bp.problem, full) > bp.problem.usage_limit)
      throw std::runtime_error("check failed: the plan exceeds the memory limit");
    plan.checked = true;
  }
  plan.warnings.insert(plan.warnings.end(), file_warnings.begin(), file_warnings.end());
  solution_ = plan;
  solution_choice_ = r.choice.empty() ? std::vector<StrategyIdx>{} : cp.expand(r.choice);
  if (!options_.ilp_solution_file.empty() && plan.has_solution)
    save_solution_file(*this, plan, solution_choice_, options_.ilp_solution_file);
  return plan;
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
      bool same = s.outputs.size() == w.outputs.size() &&
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
  complete_recompute_choice(bp, choice);
  // Shadow nodes follow their parameter.
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v)
    if (choice[static_cast<size_t>(v)] < 0) {
      NodeIdx gi = bp.graph_node[static_cast<size_t>(v)];
      PNodeIdx main = bp.pnode[static_cast<size_t>(gi)];
      if (main != v) choice[static_cast<size_t>(v)] = choice[static_cast<size_t>(main)];
    }
  return choice;
}

}  // namespace autoshard

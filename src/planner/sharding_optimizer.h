#pragma once
/// The planner's API: graph + mesh + options -> Plan, with named constraints for what-if work.
///
///   ShardingOptimizer opt(graph, mesh, options);
///   opt.add_input_constraints({parse_placements("S(0)R")});
///   Plan plan = opt.get_solution();
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "planner/overlap.h"
#include "planner/problem_builder.h"
#include "planner/tied_solve.h"

namespace autoshard {

class ShardingOptimizer {
 public:
  ShardingOptimizer(Graph graph, Mesh mesh, PlannerOptions options = {});

  /// Placements of the graph's inputs (kind input, in node order); an empty entry leaves that
  /// input free.  Returns the names of the constraints added.
  std::vector<std::string> add_input_constraints(const std::vector<std::vector<Placement>>& p);
  /// Placements of the tensors the output node returns (in its input order).
  std::vector<std::string> add_output_constraints(const std::vector<std::vector<Placement>>& p);
  /// Parameter memory per device between low and high times the unsharded parameter bytes.
  std::string add_parameter_memory_constraint(double low, double high);
  /// Pins one node's output placements (and, optionally, its input placements).
  std::string pin(const std::string& node, const std::vector<Placement>& output,
                  std::optional<std::vector<std::vector<Placement>>> inputs = std::nullopt);
  /// Removes a constraint by name; false if there is none.
  bool remove_constraint(const std::string& name);
  void clear_constraints() {
    constraints_.clear();
    built_.reset();
    spare_built_.reset();
  }
  const std::vector<Constraint>& constraints() const { return constraints_; }
  void add_constraint(Constraint c);

  /// Builds (if needed) and solves; throws std::runtime_error on constraint errors.  The plan
  /// is kept (solution()).  With options().ilp_solution_file, writes the solution file after
  /// solving and, with preload_solution, reuses a matching one instead of solving.
  Plan get_solution();
  /// The last plan get_solution() produced (nullopt before the first solve).
  const std::optional<Plan>& solution() const { return solution_; }
  /// Full problem assignment of solution() (empty if none).
  std::vector<StrategyIdx> solution_choice() const { return solution_choice_; }
  /// The problem when it is built, else nullptr (saving a state must not build it).
  const BuiltProblem* built_problem() const { return built_.get(); }
  /// An optimizer from saved parts (io/state.h) without generating strategies or costs again:
  /// `problem` must be what build_problem gives for the other parts (not re-checked here).
  static ShardingOptimizer from_parts(Graph graph, Mesh mesh, PlannerOptions options,
                                      std::vector<Constraint> constraints,
                                      std::optional<BuiltProblem> problem,
                                      std::optional<Plan> solution,
                                      std::vector<StrategyIdx> choice);
  /// Starts the next solve from this assignment (graph node name -> strategy index order is
  /// given by problem()).  Used by --preload.
  void set_warm_start(std::vector<StrategyIdx> choice) { warm_start_ = std::move(choice); }

  // What-if (defined in planner/whatif.cc).
  /// Pins `node` (output placements, optionally input placements); returns the names of the
  /// constraints added (for remove_constraints).
  std::vector<std::string> add_node_constraint(
      const std::string& node, const std::vector<Placement>& output,
      std::optional<std::vector<std::vector<Placement>>> inputs = std::nullopt);
  /// Removes constraints by name; throws std::runtime_error naming an unknown one (and then
  /// removes none).
  void remove_constraints(const std::vector<std::string>& names);
  /// Solves again under the current constraints, warm-started from solution() (its
  /// strategies are found by their specs in the rebuilt problem).
  Plan resolve();
  /// Makes `plan` (with its full assignment) the current solution, e.g. a plan loaded from
  /// placements or one restored after a what-if probe.
  void set_solution(Plan plan, std::vector<StrategyIdx> choice) {
    solution_ = std::move(plan);
    solution_choice_ = std::move(choice);
  }

  const Graph& graph() const { return graph_; }
  const Mesh& mesh() const { return mesh_; }
  const PlannerOptions& options() const { return options_; }
  PlannerOptions& mutable_options() {
    built_.reset();
    spare_built_.reset();
    recompute_escalated_ = false;
    return options_;
  }
  /// The policy problem() is built with: options().recompute, except kIfNeeded, which builds
  /// as kNone until get_solution() finds that memory binds without recomputation, then as
  /// kAuto (recompute_escalated()).  A state or solution file restores it with its problem.
  RecomputePolicy built_policy() const;
  bool recompute_escalated() const { return recompute_escalated_; }
  /// Switches kIfNeeded's problem to (or back from) the kAuto one, mapping a pending warm start
  /// across by graph node; no effect under another policy.
  void set_recompute_escalated(bool on);
  /// The problem for the current constraints (built on first use).
  const BuiltProblem& problem();
  /// Turns a full problem assignment into a plan (costs, memory); used by get_solution and to
  /// evaluate hand-written or loaded plans with the same cost model.
  Plan evaluate(const std::vector<StrategyIdx>& choice);
  /// Finds, per graph node, the strategy whose specs equal the given ones; for loading saved
  /// placements.  Returns -1 entries where nothing matches.
  std::vector<StrategyIdx> match_strategies(
      const std::vector<std::optional<Strategy>>& wanted);

 private:
  /// What one objective's solve found: the full assignment and the proof.
  struct Solved {
    TiedSolve tied;                       ///< the (last) tied solve, for statistics
    std::vector<StrategyIdx> choice;      ///< full assignment; empty if none
    SolveStatus status = SolveStatus::kInfeasible;
    double objective_us = kInfCost;
    double lower_bound_us = -kInfCost;
    double gap = kInfCost;
    std::vector<std::pair<std::string, double>> phase_seconds;
    int32_t objective_solves = 0;         ///< solves of the overlap dual; 0: additive
    bool clock_stopped = false;           ///< Plan::clock_stopped
  };
  Solved solve_additive(const TiedSolveInput& in);
  Solved solve_overlap_objective(const TiedSolveInput& in, const OverlapModel& model);
  Plan plan_of(const Solved& s, const BuiltProblem& bp);
  void check_plan(Plan& plan, const Solved& s, const BuiltProblem& bp);
  std::string unique_name(const std::string& base) const;
  /// The objective's solve (additive or overlap-aware) of in.bp.
  Solved solve_objective(const TiedSolveInput& in);
  /// kIfNeeded under binding memory, after planning with recomputation (`s`): solves the
  /// problem without it and keeps whichever plan is cheaper, bounds merged.
  void keep_everything_if_better(Solved& s, bool has_shadows, std::chrono::steady_clock::time_point deadline);

  Graph graph_;
  Mesh mesh_;
  PlannerOptions options_;
  std::vector<Constraint> constraints_;
  std::unique_ptr<BuiltProblem> built_;
  /// kIfNeeded: problem() is built with kAuto (memory binds without recomputation).
  bool recompute_escalated_ = false;
  /// kIfNeeded: the other policy's problem while get_solution() switches between the two.
  std::unique_ptr<BuiltProblem> spare_built_;
  std::vector<StrategyIdx> warm_start_;
  std::optional<Plan> solution_;
  std::vector<StrategyIdx> solution_choice_;
};

}  // namespace autoshard

/// Commands on saved plans (state files, io/state.h): show, explain, pin, diff and export;
/// and the files `plan -o DIR` writes.  Every output goes to a temporary and is renamed.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "cli/common.h"
#include "cli/state_commands.h"
#include "io/placements_json.h"
#include "io/plan_export.h"
#include "io/plan_json.h"
#include "io/state.h"
#include "ir/file_util.h"
#include "planner/simulate.h"
#include "planner/whatif.h"
#include "problem/iopddl.h"
#include "report/report.h"
#include "report/trace.h"

namespace autoshard::cli {

void write_plan_outputs(ShardingOptimizer& opt, const Plan& plan, const std::string& dir,
                        ScheduleOptions schedule) {
  schedule.planned_paths = opt.options().comm_model == CommModel::kNccl;
  write_file_atomic(dir + "/placements.json",
                    write_placements_json(plan, opt.graph(), opt.mesh(), schedule));
  write_file_atomic(dir + "/plan.json", plan_json_text(opt, plan));
  save_state(opt, dir + "/plan.ap");
}

namespace {

/// A loaded state with a solution (the commands below need one).
ShardingOptimizer load_solved(const std::string& path) {
  ShardingOptimizer opt = load_state(path);
  if (!opt.solution() || !opt.solution()->has_solution)
    throw std::runtime_error(fmt::format("{}: the state holds no solution (plan it first)", path));
  return opt;
}

std::vector<Placement> placements_arg(const std::string& option, const std::string& s) {
  return parse_placements_option(option, s);
}

// ---- show ---------------------------------------------------------------------------------------

struct ShowArgs {
  std::string path;
  bool json = false;
  bool show_nodes = false;
};

void run_show(const ShowArgs& a) {
  ShardingOptimizer opt = load_solved(a.path);
  const Plan& plan = *opt.solution();
  if (a.json) {
    std::cout << plan_summary_json(plan, opt.graph(), opt.mesh()).dump(2) << "\n";
    return;
  }
  StepSimulation sim = simulate_step(opt, plan);
  print_summary(plan, opt.graph(), opt.mesh(), &sim);
  if (a.show_nodes) print_nodes(plan, opt.graph());
}

// ---- explain ------------------------------------------------------------------------------------

struct ExplainArgs {
  std::string path;
  std::string node;
  std::string placement;
};

void run_explain(const ExplainArgs& a) {
  ShardingOptimizer opt = load_solved(a.path);
  if (a.placement.empty()) {
    fmt::print("{}", print_costs_for_node(opt, a.node));
    return;
  }
  Explanation e = explain_placement(opt, a.node, placements_arg("--placement", a.placement));
  fmt::print("{}", format_explanation(e));
  if (!e.feasible) throw std::runtime_error(fmt::format("no plan with {} = {}: {}", a.node, a.placement,
                                                        one_line(e.infeasible_reason)));
}

// ---- pin ----------------------------------------------------------------------------------------

struct PinArgs {
  std::string path;
  std::vector<std::string> nodes;
  std::vector<std::string> placements;
  std::string out;
};

void run_pin(const PinArgs& a) {
  if (a.nodes.size() != a.placements.size())
    throw std::invalid_argument(fmt::format("pin: {} --node but {} --placement (give one placement per node)",
                                            a.nodes.size(), a.placements.size()));
  ShardingOptimizer opt = load_solved(a.path);
  const Plan before = *opt.solution();
  for (size_t k = 0; k < a.nodes.size(); ++k)
    opt.add_node_constraint(a.nodes[k], placements_arg("--placement", a.placements[k]));
  Plan after = opt.resolve();
  if (!after.has_solution)
    throw std::runtime_error(fmt::format("no plan with the pin ({})", solve_status_name(after.status)));
  fmt::print("pinned plan: {} (status {})\n", format_us(after.objective_us), solve_status_name(after.status));
  fmt::print("{}", format_diff(diff_solutions(opt, before, after), 60));
  save_state(opt, a.out);
  fmt::print("wrote {}\n", a.out);
}

// ---- diff ---------------------------------------------------------------------------------------

struct DiffArgs {
  std::string a, b;
  size_t max_nodes = 60;
};

void run_diff(const DiffArgs& a) {
  ShardingOptimizer oa = load_solved(a.a);
  ShardingOptimizer ob = load_solved(a.b);
  if (graph_fingerprint(oa.graph()) != graph_fingerprint(ob.graph()))
    throw std::runtime_error(fmt::format("{} and {} plan different graphs ({} vs {})", a.a, a.b,
                                         oa.graph().name, ob.graph().name));
  if (oa.mesh().shape() != ob.mesh().shape())
    throw std::runtime_error(fmt::format("{} and {} plan different meshes ({} vs {})", a.a, a.b,
                                         oa.mesh().describe(), ob.mesh().describe()));
  fmt::print("{} -> {}\n", a.a, a.b);
  fmt::print("{}", format_diff(diff_solutions(oa, *oa.solution(), *ob.solution()), a.max_nodes));
}

// ---- export -------------------------------------------------------------------------------------

struct ExportArgs {
  std::string path;
  std::string json, placements, mps, iopddl, html, trace;
};

void run_export(const ExportArgs& a) {
  if (a.json.empty() && a.placements.empty() && a.mps.empty() && a.iopddl.empty() && a.html.empty() &&
      a.trace.empty())
    throw std::invalid_argument("export: nothing to write (give --json, --placements, --mps, --iopddl, "
                                "--html or --trace)");
  ShardingOptimizer opt = load_solved(a.path);
  const Plan& plan = *opt.solution();
  if (!a.json.empty()) write_file_atomic(a.json, plan_json_text(opt, plan));
  if (!a.placements.empty()) save_placements(opt, a.placements);
  if (!a.mps.empty()) write_file_atomic(a.mps, write_mps(opt));
  if (!a.iopddl.empty()) write_problem_iopddl(opt, a.iopddl);
  // The report and the trace ([report]'s src/report).
  if (!a.html.empty() || !a.trace.empty()) {
    StepSimulation sim = simulate_step(opt, plan);
    if (!a.html.empty()) write_file_atomic(a.html, render_report_html(opt, plan, sim));
    if (!a.trace.empty()) write_file_atomic(a.trace, chrome_trace_json(opt, plan, sim));
  }
}

}  // namespace

void register_state_commands(CLI::App& app) {
  {
    auto a = std::make_shared<ShowArgs>();
    CLI::App* sub = app.add_subcommand("show", "print the summary of a saved plan (PLAN.ap)");
    sub->add_option("state", a->path, "state file written by plan -o DIR (DIR/plan.ap)")->required();
    sub->add_flag("--json", a->json, "print the summary as JSON");
    sub->add_flag("--show-nodes", a->show_nodes, "print every node's placement and costs (us)");
    sub->callback([a] { run_show(*a); });
  }
  {
    auto a = std::make_shared<ExplainArgs>();
    CLI::App* sub = app.add_subcommand(
        "explain", "a node's strategies and costs, or why a placement was not chosen (--placement)");
    sub->add_option("state", a->path, "state file (PLAN.ap)")->required();
    sub->add_option("--node", a->node, "graph node name")->required();
    sub->add_option("--placement", a->placement,
                    "output placement to explain, e.g. 'S(0)R': the best plan with it and what changes");
    sub->callback([a] { run_explain(*a); });
  }
  {
    auto a = std::make_shared<PinArgs>();
    CLI::App* sub = app.add_subcommand("pin", "pin node placements, re-solve and print the diff");
    sub->add_option("state", a->path, "state file (PLAN.ap)")->required();
    sub->add_option("--node", a->nodes, "graph node name (repeatable, with one --placement each)")->required();
    sub->add_option("--placement", a->placements, "output placement, e.g. 'S(0)R'")->required();
    sub->add_option("-o,--out", a->out, "the new state file")->required();
    sub->callback([a] { run_pin(*a); });
  }
  {
    auto a = std::make_shared<DiffArgs>();
    CLI::App* sub = app.add_subcommand("diff", "compare two saved plans of the same graph");
    sub->add_option("a", a->a, "first state file")->required();
    sub->add_option("b", a->b, "second state file")->required();
    sub->add_option("--max-nodes", a->max_nodes, "node lines to print (0: all)")->capture_default_str();
    sub->callback([a] { run_diff(*a); });
  }
  {
    auto a = std::make_shared<ExportArgs>();
    CLI::App* sub = app.add_subcommand("export", "write a saved plan or its problem in other formats");
    sub->add_option("state", a->path, "state file (PLAN.ap)")->required();
    sub->add_option("--json", a->json, "plan JSON (AutoParallel get_json fields + autoshard's)");
    sub->add_option("--placements", a->placements, "placements JSON (AutoParallel save_placements)");
    sub->add_option("--mps", a->mps, "the full problem as Alpa's MIP with memory rows (MPS)");
    sub->add_option("--iopddl", a->iopddl, "the full problem as IOPDDL JSON (costs in ps)");
    sub->add_option("--html", a->html, "the HTML report");
    sub->add_option("--trace", a->trace, "the simulated step as a Chrome trace");
    sub->callback([a] { run_export(*a); });
  }
}

}  // namespace autoshard::cli

/// `autoshard plan`: the main job.  Plans a model on a mesh and prints the placements, the
/// estimated step time and the proof of quality.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cli/common.h"
#include "cli/pipeline_cli.h"
#include "cli/recipes_cli.h"
#include "cli/state_commands.h"
#include "io/placements_json.h"
#include "io/plan_json.h"
#include "io/simulation_json.h"
#include "io/state.h"
#include "ir/file_util.h"
#include "planner/fit_advice.h"
#include "planner/parallelism.h"
#include "planner/parameter_share.h"
#include "pipeline/pipeline_stage.h"
#include "planner/recompute.h"
#include "planner/sharding_optimizer.h"
#include "planner/schedule_memory.h"
#include "planner/simulate.h"
#include "report/report.h"
#include "report/trace.h"

namespace autoshard::cli {

namespace {

/// `plan`'s default --time-limit per stage solve with a pp dim and --fitted-solves (seconds):
/// the memory-limited stage solves run to it.
constexpr double kFittedStageTimeLimitS = 10;

struct PlanArgs {
  GraphSource src;
  MeshSource mesh;
  std::string comm_model = "nccl";
  std::string memory_limit;
  double time_limit = 60;
  double mip_gap = 0;
  int threads = 1;
  int prefetch_layers = 1;  ///< --prefetch-layers: the schedule's parameter prefetch depth
  std::string bucket = "layer";  ///< --bucket: how prefetched collectives are grouped
  bool skip_fully_replicated = false;
  bool no_cluster = false;
  bool require_divisible = false;
  bool no_context_parallel = false;
  bool shard_orders = false;
  bool no_checks = false;
  std::string out_dir;
  std::string preload;
  std::string placements;
  bool json = false;
  std::vector<std::string> pins;
  std::string param_memory;  ///< --param-memory [LOW,]HIGH: add_parameter_memory_constraint
  bool show_nodes = false;
  bool overlap = false;
  std::string objective = "overlap";
  bool verbose = false;
  bool quiet = false;  ///< --quiet: no progress on stderr, even on a terminal
  std::string recompute = "if-needed";
  std::string algo = "alpa";  ///< --algo: the optimum or a named recipe (planner/recipes.h)
  bool compare = false;       ///< --compare: every recipe beside the optimum
  // State files (io/state.h).
  std::string replay;         ///< plan from this replay instead of --model/--graph
  bool save_replay = false;   ///< with -o DIR: DIR/plan.replay
  std::string solution_file;  ///< MASE's ilp_solution_file
  bool preload_solution = false;
  bool time_limit_given = false, threads_given = false, objective_given = false;
  PipelineArgs pipeline;  ///< a mesh with a pp dim: --microbatches, --schedule, --stages-per-rank
  bool pipeline_given = false;
};

}  // namespace

// Shared with cmd_state.cc (cli/state_commands.h).
void print_nodes(const Plan& plan, const Graph& g) {
  fmt::print("\n{:<40} {:<36} {:<16} {:>10} {:>10}  {}\n", "node", "op", "output", "compute", "comm",
             "inputs");
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    std::string ins;
    for (size_t k = 0; k < np->chosen.inputs.size(); ++k)
      ins += (k ? ", " : "") + np->chosen.inputs[k].to_string();
    const Node& n = g.node(i);
    fmt::print("{:<40} {:<36} {:<16} {:>10.2f} {:>10.2f}  {}\n", n.name,
               n.kind == NodeKind::kOp ? n.op : std::string(node_kind_name(n.kind)),
               output_spec_string(np->chosen), np->compute_us, np->comm_us, ins);
  }
}

/// What an infeasible plan says about the smallest achievable peak: the proven lower bound,
/// and the best layout found when it is above it ("" when neither is known).
std::string min_peak_text(const Plan& plan) {
  const int64_t lo = plan.min_peak_lower_bound_bytes, hi = plan.min_peak_memory_bytes;
  if (lo >= 0 && hi == lo) return fmt::format("needs at least {}, which some layout reaches", format_bytes(lo));
  std::string t;
  if (lo >= 0) t = fmt::format("needs at least {}", format_bytes(lo));
  if (hi >= 0) t += fmt::format("{}the best layout found peaks at {}", t.empty() ? "" : "; ", format_bytes(hi));
  return t;
}

void print_summary(const Plan& plan, const Graph& g, const Mesh& mesh,
                   const StepSimulation* sim, const std::vector<std::string>& fit) {
  fmt::print("autoshard plan: {} on mesh {} of {} ({} devices)\n", g.name, mesh.describe(),
             mesh.hardware().name, mesh.num_devices());
  fmt::print("problem: {} graph nodes -> {} problem nodes, {} edges ({} variables in Alpa's form)\n",
             plan.graph_nodes, plan.problem_nodes, plan.problem_edges, plan.alpa_variables);
  fmt::print("         {} repeated-layer classes -> {} nodes; after reductions {} nodes, {} edges; "
             "MIP {} variables\n",
             plan.layer_clusters, plan.clustered_nodes, plan.reduced_nodes, plan.reduced_edges,
             plan.mip_variables);
  fmt::print("status: {}\n", solve_status_name(plan.status));
  for (const std::string& w : plan.warnings) fmt::print("warning: {}\n", w);
  if (!plan.has_solution) {
    if (const std::string t = min_peak_text(plan); plan.status == SolveStatus::kInfeasible && !t.empty())
      fmt::print("no plan fits in {} per device: it {}\n", format_bytes(plan.memory_limit_bytes), t);
    for (const std::string& s : fit) fmt::print("to fit, {}\n", s);
    return;
  }
  if (plan.overlap_aware)
    fmt::print("estimated step time: {} overlap-aware ({} of communication hidden; additive {}: compute {}, "
               "communication {})\n",
               format_us(plan.objective_us), format_us(plan.overlapped_us), format_us(plan.additive_us),
               format_us(plan.compute_us), format_us(plan.comm_us));
  else
    fmt::print("estimated step time: {} (compute {}, communication {})\n",
               format_us(plan.objective_us), format_us(plan.compute_us), format_us(plan.comm_us));
  if (sim)
    fmt::print("simulated step time: {} (exposed communication {}, {} overlapped; MFU {:.1f}%)\n",
               format_us(sim->step_us), format_us(sim->exposed_comm_us),
               format_us(sim->comm_us - sim->exposed_comm_us), sim->mfu * 100);
  fmt::print("lower bound: {}  gap: {:.4f}%{}\n", format_us(plan.lower_bound_us), plan.gap * 100,
             plan.checked ? "  (verified independently)" : "");
  fmt::print("peak memory per device: {}{}\n", format_bytes(plan.peak_memory_bytes),
             plan.memory_limit_bytes > 0 ? fmt::format(" of {}", format_bytes(plan.memory_limit_bytes))
                                         : std::string());
  if (const std::string cp = describe_context_parallel(mesh, plan); !cp.empty())
    fmt::print("context parallelism: {}\n", cp);
  if (!plan.layer_recompute.empty()) {
    std::map<std::string, int> by_mode;
    for (const auto& [layer, mode] : plan.layer_recompute) ++by_mode[mode];
    std::string modes;
    for (const auto& [mode, k] : by_mode) modes += fmt::format("{}{} {}", modes.empty() ? "" : ", ", k, mode);
    fmt::print("activation recomputation: {} of {} layers ({} of the step time)\n", modes,
               plan.layer_recompute.size(), format_us(plan.recompute_us));
  }
  std::string phases;
  for (const auto& [name, s] : plan.phase_seconds) phases += fmt::format(" {} {:.3f}s", name, s);
  // A loaded state holds no timings (its bytes must not depend on the machine).
  if (!phases.empty()) fmt::print("time per phase:{}\n", phases);
  // The parameter table.
  size_t wname = 9;
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kParameter) wname = std::max(wname, g.node(i).name.size());
  fmt::print("\n{:<{}}  {:<18} {:<12} {}\n", "parameter", wname, "shape", "placement", "parallelism");
  const ParallelismLabeler labels(g, mesh, plan);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kParameter || !plan.nodes[static_cast<size_t>(i)]) continue;
    fmt::print("{:<{}}  {:<18} {:<12} {}\n", n.name, wname,
               fmt::format("[{}]", fmt::join(n.out().shape, ",")),
               output_spec_string(plan.nodes[static_cast<size_t>(i)]->chosen),
               labels.describe(i));
  }
}

namespace {

/// One bound of --param-memory: a decimal ("0.125") or a fraction ("1/8").
double parse_share(const std::string& whole, const std::string& s) {
  const auto bad = [&] {
    return std::invalid_argument(fmt::format(
        "--param-memory '{}': expected [LOW,]HIGH shares of the unsharded parameter bytes, "
        "e.g. 0.125, 1/8 or 0,1/8",
        whole));
  };
  const size_t slash = s.find('/');
  double v = 0;
  try {
    size_t pos = 0;
    v = std::stod(s.substr(0, slash), &pos);
    if (pos != s.substr(0, slash).size()) throw bad();
    if (slash != std::string::npos) {
      const std::string den = s.substr(slash + 1);
      const double d = std::stod(den, &pos);
      if (pos != den.size() || !(d > 0)) throw bad();
      v /= d;
    }
  } catch (const std::logic_error&) {  // stod's invalid_argument / out_of_range
    throw bad();
  }
  if (!(v >= 0) || !std::isfinite(v)) throw bad();
  return v;
}

/// --param-memory [LOW,]HIGH -> (low, high); LOW defaults to 0, as in AutoParallel.
std::pair<double, double> parse_param_memory(const std::string& s) {
  const size_t comma = s.find(',');
  if (comma == std::string::npos) return {0.0, parse_share(s, s)};
  const double lo = parse_share(s, s.substr(0, comma)), hi = parse_share(s, s.substr(comma + 1));
  if (lo > hi)
    throw std::invalid_argument(fmt::format("--param-memory '{}': LOW is above HIGH", s));
  return {lo, hi};
}

int run_plan(const PlanArgs& a) {
  // Fail on an unusable output directory before spending time on the solve.
  if (!a.out_dir.empty()) check_output_dir(a.out_dir);
  const Recipe recipe = parse_algo_option(a.algo);  // a bad --algo fails before any work
  if (a.save_replay && a.out_dir.empty()) throw std::invalid_argument("--save-replay: needs -o DIR");
  if (a.preload_solution && a.solution_file.empty())
    throw std::invalid_argument("--preload-solution: needs --solution-file FILE");
  // --replay: graph, mesh, options and constraints from the replay, regenerated with this code.
  std::optional<ShardingOptimizer> replayed;
  if (!a.replay.empty()) {
    ReplayInfo info;
    replayed.emplace(load_replay(a.replay, &info));
    fmt::print(stderr, "autoshard: note: {}\n", info.note);
  }
  Mesh mesh = replayed ? replayed->mesh() : make_mesh(a.mesh);
  const bool pipelined = pp_dim_of(mesh) >= 0;
  if (a.pipeline_given && !pipelined)
    throw std::invalid_argument("--microbatches, --schedule and --stages-per-rank need a mesh dim named pp (--mesh-dims)");
  if (pipelined && (replayed || (a.algo != "alpa" && a.compare) || !a.preload.empty() || !a.placements.empty() ||
                    !a.pins.empty() || a.save_replay || !a.solution_file.empty() ||
                    !a.param_memory.empty()))
    throw std::invalid_argument(
        "a mesh with a pp dim plans pipeline stages: --replay, --algo with --compare, --preload, --placements, "
        "--pin, --param-memory, --save-replay and --solution-file are not supported with it");
  std::optional<Graph> full;
  if (!pipelined) full = replayed ? replayed->graph() : load_graph(a.src);
  PlannerOptions opt;
  auto cm = parse_comm_model(a.comm_model);
  if (!cm) throw std::invalid_argument(fmt::format("--comm-model: expected nccl or dtensor, got '{}'", a.comm_model));
  opt.comm_model = *cm;
  if (!a.memory_limit.empty()) opt.memory_limit_bytes = parse_bytes(a.memory_limit);
  if (a.threads < 1) throw std::invalid_argument(fmt::format("--threads: expected >= 1, got {}", a.threads));
  if (!(a.time_limit > 0)) throw std::invalid_argument(fmt::format("--time-limit: expected > 0, got {}", a.time_limit));
  if (!(a.mip_gap >= 0)) throw std::invalid_argument(fmt::format("--mip-gap: expected >= 0, got {}", a.mip_gap));
  opt.time_limit_s = a.time_limit;
  // A pipeline solves one problem per stage size and memory budget, so the limit is per stage
  // solve.  Those stop on their work limits (PlannerOptions::work_limited) and the limit is a
  // safety net, but --fitted-solves' memory-limited solves run to it (llama3-405b 8x16x8: about
  // 180 of them): kFittedStageTimeLimitS by default there (1021 s for that plan, where 60 s
  // each would be some 80 minutes, estimated; 2 s gave 421 s and a 1.9 % slower step).
  const bool fitted = a.pipeline.fitted_solves || a.pipeline.price_memory;
  if (pipelined && fitted && !a.time_limit_given) opt.time_limit_s = kFittedStageTimeLimitS;
  opt.mip_gap = a.mip_gap;
  opt.threads = a.threads;
  opt.skip_fully_replicated = a.skip_fully_replicated;
  opt.cluster = !a.no_cluster;
  opt.require_divisible = a.require_divisible;
  opt.context_parallel = !a.no_context_parallel;
  opt.shard_orders = a.shard_orders;
  opt.overlap = a.overlap;
  if (a.objective == "overlap") opt.objective = Objective::kOverlap;
  else if (a.objective == "additive") opt.objective = Objective::kAdditive;
  else throw std::invalid_argument(fmt::format("--objective: expected overlap or additive, got '{}'", a.objective));
  opt.run_checks = !a.no_checks;
  opt.recompute = parse_recompute_policy_or_throw(a.recompute, "--recompute");
  if (replayed) {  // the replay's options; --time-limit, --threads, --objective and
                   // --shard-orders may override
    PlannerOptions r = replayed->options();
    if (a.shard_orders) r.shard_orders = true;
    if (a.time_limit_given) r.time_limit_s = opt.time_limit_s;
    if (a.objective_given) r.objective = opt.objective;
    if (a.threads_given) r.threads = opt.threads;
    opt = r;
  }
  // --algo fsdp+tp (FSDP2 over TP) pins strided weights: its problem needs the ordered
  // strategies.  --compare keeps the optimum's options; each recipe adds what it needs.
  if (!a.compare && recipe_uses_shard_orders(recipe, mesh)) opt.shard_orders = true;
  opt.ilp_solution_file = a.solution_file;
  opt.preload_solution = a.preload_solution;
  const bool tty = isatty(STDERR_FILENO) && !a.quiet;
  // A pipeline's many stage solves show as one status line on a terminal; -v lists them.
  if (a.verbose || (tty && !pipelined))
    opt.progress = [](std::string_view m) { fmt::print(stderr, "  {}\n", m); };
  PipelineArgs pa = a.pipeline;
  pa.algo = a.algo;
  pa.progress_line = tty && !a.verbose;
  if (pipelined && a.compare) return run_pipeline_compare(a.src, mesh, opt, pa, a.json);
  if (pipelined) {
    ScheduleOptions schedule;
    schedule.prefetch_layers = a.prefetch_layers;
    schedule.bucketing = *parse_bucketing(a.bucket);
    schedule.planned_paths = false;  // the stages' paths are over the stage mesh, not the file's
    return run_pipeline_plan(a.src, mesh, opt, pa, a.json, a.out_dir, schedule);
  }
  const Graph& g = *full;
  if (tty) fmt::print(stderr, "building the problem for {} nodes...\n", g.size());
  ShardingOptimizer so(g, mesh, opt);
  if (replayed)
    for (const Constraint& c : replayed->constraints()) so.add_constraint(c);
  if (!a.param_memory.empty()) {
    const auto [lo, hi] = parse_param_memory(a.param_memory);
    so.add_parameter_memory_constraint(lo, hi);
  }
  for (const std::string& p : a.pins) {
    auto eq = p.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument(fmt::format("--pin '{}': expected NODE=PLACEMENTS", p));
    so.pin(p.substr(0, eq), parse_placements_option("--pin", p.substr(eq + 1)));
  }
  if (a.compare) return run_compare(so, a.json);
  for (const std::string& n : apply_recipe(so, recipe))
    fmt::print(stderr, "autoshard: note: --algo {}: {}\n", a.algo, n);
  if (!a.preload.empty()) {
    auto wanted = read_placements_json(read_text_file(a.preload), a.preload, so.graph(), mesh);
    auto choice = so.match_strategies(wanted);
    // A saved entry that matches none of the node's strategies (another graph, or options such
    // as --skip-fully-replicated or a --pin that removed it) cannot be a starting point: say so
    // rather than silently starting elsewhere.
    const BuiltProblem& bp = so.problem();
    int unmatched = 0;
    std::string first;
    for (NodeIdx i = 0; i < so.graph().size(); ++i) {
      const auto& w = wanted[static_cast<size_t>(i)];
      PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
      if (!w || v < 0 || choice[static_cast<size_t>(v)] >= 0) continue;
      if (unmatched++ == 0) {
        std::string ins;
        for (size_t k = 0; k < w->inputs.size(); ++k) ins += (k ? ", " : "") + w->inputs[k].to_string();
        first = fmt::format("/placements/{}: output {}, inputs [{}]", so.graph().node(i).name,
                            output_spec_string(*w), ins);
      }
    }
    if (unmatched > 0)
      fmt::print(stderr,
                 "autoshard: warning: {}: {} saved placements match no strategy under the current "
                 "options and are ignored (first: {})\n",
                 a.preload, unmatched, first);
    for (size_t v = 0; v < choice.size(); ++v)
      if (choice[v] < 0) choice[v] = 0;
    so.set_warm_start(choice);
  }
  if (a.save_replay) {  // before solving, so that a failing solve can be replayed
    create_output_dir(a.out_dir);
    save_replay(so, a.out_dir + "/plan.replay");
  }
  if (tty) fmt::print(stderr, "solving (time limit {} s)...\n", opt.time_limit_s);
  // --placements: evaluate a saved placement set with this cost model instead of solving.
  // The simulated step (overlap of communication with compute) next to the additive objective;
  // a solved plan's peak counts the schedule's buffers (planner/schedule_memory.h).
  SimulationOptions sim_options;
  sim_options.prefetch_layers = a.prefetch_layers;
  sim_options.bucketing = *parse_bucketing(a.bucket);  // CLI11 checked the name
  Plan plan;
  std::optional<StepSimulation> sim;
  if (a.placements.empty()) {
    ScheduledPlan sp = solve_within_schedule_memory(so, sim_options);
    plan = std::move(sp.plan);
    sim = std::move(sp.sim);
  } else {
    plan = load_placements(so, a.placements);
    if (plan.has_solution) {
      sim = simulate_step(so, plan, sim_options);
      count_schedule_peak(so, plan, *sim);
    }
  }
  if (!a.out_dir.empty() && plan.has_solution) {
    create_output_dir(a.out_dir);
    write_plan_outputs(so, plan, a.out_dir, sim_options);  // placements.json, plan.json, plan.ap
    write_file_atomic(a.out_dir + "/report.html", render_report_html(so, plan, *sim));
    write_file_atomic(a.out_dir + "/trace.json", chrome_trace_json(so, plan, *sim));
  }
  // An infeasible budget: what would make it fit (planner/fit_advice.h).
  const std::vector<std::string> fit = fit_suggestions(so, plan);
  if (a.json) {
    auto j = plan_summary_json(plan, so.graph(), mesh);
    if (sim) j["simulation"] = simulation_summary_json(*sim, sim_options);
    if (!fit.empty()) j["fit_suggestions"] = fit;
    std::cout << j.dump(2) << "\n";
    // The text summary prints warnings inline; with --json they would be easy to miss.
    for (const std::string& w : plan.warnings) fmt::print(stderr, "autoshard: warning: {}\n", one_line(w));
  } else {
    print_summary(plan, so.graph(), mesh, sim ? &*sim : nullptr, fit);
  }
  if (a.show_nodes && plan.has_solution && !a.json) print_nodes(plan, so.graph());
  if (!plan.has_solution) {
    if (const std::string t = min_peak_text(plan); plan.status == SolveStatus::kInfeasible && !t.empty())
      throw std::runtime_error(fmt::format("infeasible memory budget: no plan fits in {} per device ({})",
                                           format_bytes(plan.memory_limit_bytes), t));
    // A parameter-memory bound out of reach (checked before the solve): say which.
    const auto shares = unreachable_shares(so.graph(), mesh, so.problem(), so.constraints());
    if (plan.status == SolveStatus::kInfeasible && !shares.empty())
      throw std::runtime_error(fmt::format("no plan found (infeasible): {}", shares[0].why()));
    throw std::runtime_error(fmt::format("no plan found ({})", solve_status_name(plan.status)));
  }
  return 0;
}

}  // namespace

void register_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand(
      "plan", "plan the sharding of a model on a device mesh (default: llama3-8b on 2x8 H100, dims dp,tp)");
  add_graph_options(sub, a->src, "llama3-8b");
  add_mesh_options(sub, a->mesh, "2x8", "dp,tp");
  sub->add_option("--comm-model", a->comm_model, "nccl (measured bandwidths) or dtensor (DTensor's model)")
      ->capture_default_str();
  sub->add_option("--memory-limit", a->memory_limit, "per-device memory budget, e.g. 80GiB (default: the hardware's; 0: none)");
  sub->add_option("--time-limit", a->time_limit,
                  fmt::format("solver time limit in seconds (with a pp dim: per stage solve, whose own work limits end it first "
                              "unless --fitted-solves, where it is {} by default)",
                              kFittedStageTimeLimitS))
      ->capture_default_str();
  sub->add_option("--mip-gap", a->mip_gap, "relative MIP gap at which to stop")->capture_default_str();
  sub->add_option("--threads", a->threads, "solver threads")->capture_default_str();
  sub->add_option("--prefetch-layers", a->prefetch_layers,
                  "issue parameter redistributions this many layers ahead of their use, in the "
                  "simulated step and in placements.json's schedule (0: at the use's layer)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  sub->add_option("--bucket", a->bucket,
                  "layer: a layer's prefetched parameter collectives, and its gradient reductions, "
                  "on one mesh dim run as one collective on a flat buffer (FSDP2); none: one "
                  "collective each")
      ->capture_default_str()
      ->check(CLI::IsMember({"layer", "none"}));
  sub->add_flag("--skip-fully-replicated", a->skip_fully_replicated,
                "drop fully replicated strategies where a sharded one exists");
  sub->add_flag("--no-cluster", a->no_cluster, "do not tie repeated layers");
  sub->add_flag("--require-divisible", a->require_divisible, "only shard dims that split evenly");
  sub->add_flag("--no-context-parallel", a->no_context_parallel,
                "never split attention's sequence over a mesh dim (ring / all-gather attention)");
  sub->add_flag("--shard-orders", a->shard_orders,
                "also offer non-default shard orders (strided shards such as FSDP2-over-TP's "
                "_S(0,tp)S(0)) on the parameters' chains (casts, gradients, optimizer state); --algo fsdp+tp turns it on for "
                "its FSDP2-over-TP layout");
  sub->add_flag("--no-checks", a->no_checks, "skip the independent verification of the solution");
  sub->add_option("--pin", a->pins, "pin a node's output placements: NODE=PLACEMENTS (repeatable)");
  sub->add_option("--param-memory", a->param_memory,
                  "parameter bytes per device within [LOW, HIGH] x the unsharded total "
                  "(AutoParallel's add_parameter_memory_constraint), e.g. 1/8 or 0,0.25; "
                  "a bound no layout reaches is infeasible at once");
  sub->add_option("--preload", a->preload, "placements JSON of an earlier plan to start from");
  sub->add_option("--placements", a->placements,
                  "placements JSON to evaluate instead of solving (every node must match)");
  sub->add_option("-o,--out", a->out_dir,
                  "write DIR/placements.json (AutoParallel schema), DIR/plan.json, DIR/plan.ap (state), "
                  "DIR/report.html and DIR/trace.json");
  sub->add_flag("--overlap", a->overlap,
                "additive objective with parameter redistributions discounted (FSDP-style prefetch); "
                "implies --objective additive");
  sub->add_option("--objective", a->objective,
                  "what the solver minimises: overlap (the step time with the communication compute "
                  "hides; proven bound) or additive (compute + every redistribution)")
      ->capture_default_str();
  sub->add_flag("--json", a->json, "print the result as JSON");
  sub->add_option("--algo", a->algo, "the optimum or a named recipe pinned on the same problem: " + recipe_help())
      ->capture_default_str();
  sub->add_flag("--compare", a->compare,
                "plan every recipe beside the optimum and print step time, memory and the optimum's saving");
  sub->add_flag("-v,--verbose", a->verbose, "print solver progress on stderr (default on a terminal)");
  sub->add_flag("-q,--quiet", a->quiet,
                "no progress on stderr, even on a terminal (where a pipelined plan draws a status line: stage "
                "solves, best step and bound so far, elapsed time)");
  sub->add_option("--recompute", a->recompute,
                  "activation recomputation per layer region: none, selective (matmul and attention "
                  "outputs kept), selective-op (torchtitan's op-level policy: every other matmul "
                  "recomputed too), full, auto (the solver decides), or if-needed (none when the "
                  "memory-free optimum fits, else auto)")
      ->capture_default_str();
  sub->add_flag("--show-nodes", a->show_nodes, "print every node's placement and costs (us)");
  sub->add_option("--replay", a->replay,
                  "plan from a replay file (graph, mesh, options, constraints) instead of --model/--graph");
  sub->add_flag("--save-replay", a->save_replay, "with -o DIR, also write DIR/plan.replay");
  sub->add_option("--solution-file", a->solution_file,
                  "write the solution there, keyed by the problem's fingerprint (MASE's ilp_solution_file)");
  sub->add_flag("--preload-solution", a->preload_solution,
                "reuse --solution-file without solving when its fingerprint matches");
  sub->add_option("--microbatches", a->pipeline.microbatches,
                  "with a pp mesh dim: microbatches per step (default: the pp size); a built-in model's "
                  "--batch is split into them");
  sub->add_option("--schedule", a->pipeline.schedule,
                  "with a pp mesh dim: auto (the fastest), GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, "
                  "ZBVZeroBubble or DualPipeV (torch.distributed.pipelining's Schedule<name>)")
      ->capture_default_str();
  sub->add_option("--stages-per-rank", a->pipeline.stages_per_rank,
                  "with a pp mesh dim and an interleaved schedule: stages per pp rank (default: the best of 2-4; "
                  "ZBVZeroBubble, DualPipeV: 2)");
  sub->add_flag("--price-memory", a->pipeline.price_memory,
                "with a pp mesh dim: bound each memory-limited stage of a one-stage-per-rank schedule by pricing its "
                "memory (Lagrangian relaxation, both memory models): tighter proven bounds, slower planning; implies "
                "--fitted-solves");
  sub->add_flag("--no-rank-bound", a->pipeline.no_rank_bound,
                "with a pp mesh dim: bound schedules with several stages per rank without pricing the ranks' memory "
                "(their memory-free stage bounds only): faster where memory binds, a weaker proven bound");
  sub->add_flag("--no-refit", a->pipeline.no_refit,
                "with a pp mesh dim: keep the stage plans made for their kind's most in flight at assembly "
                "(no rank refit: each rank's limit shared among its stages, recomputation re-chosen per rank; "
                "nor its trade: a rank's stages re-choosing their recomputation together)");
  sub->add_flag("--no-rank-pattern", a->pipeline.no_rank_pattern,
                "with a pp mesh dim and a memory limit: refit the ranks from their stages' own shardings only "
                "(no sharding priced for half a rank's layers under its share of the limit: one Kelley pricing less)");
  sub->add_flag("--fitted-solves", a->pipeline.fitted_solves,
                "with a pp mesh dim and a memory limit: solve a stage whose memory-free plan does not fit under its "
                "budget (by default the plan at hand is kept: its memory-free plan or torchtitan's layout, with the least "
                "recomputation that fits, and a stage none of them fits has no plan); the solves run to --time-limit on "
                "large stages, so the plan then depends on the machine's speed and load");
  sub->add_option("--param-gather", a->pipeline.param_gather,
                  "with a pp mesh dim: auto (plan gathered once, and per use too where memory shaped that plan; keep "
                  "the faster that fits), per-use (each microbatch "
                  "gathers its stage's parameters) or once (gathered at the first microbatch and kept over the "
                  "step, as FSDP2 under torchtitan's pipeline; the kept copies count in memory); with --algo, once unless "
                  "per-use is given")
      ->capture_default_str();
  sub->callback([a, sub] {
    a->pipeline_given = sub->count("--microbatches") + sub->count("--schedule") + sub->count("--stages-per-rank") +
                            sub->count("--param-gather") +
                            sub->count("--price-memory") + sub->count("--no-rank-bound") +
                            sub->count("--no-refit") + sub->count("--no-rank-pattern") + sub->count("--fitted-solves") > 0;
    a->time_limit_given = sub->count("--time-limit") > 0;
    a->threads_given = sub->count("--threads") > 0;
    a->objective_given = sub->count("--objective") > 0;
    run_plan(*a);
  });
}

}  // namespace autoshard::cli

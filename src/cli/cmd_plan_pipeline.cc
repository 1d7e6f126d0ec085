/// `autoshard plan --mesh-dims pp,...`: the pipelined plan's text, JSON and files.
#include <fmt/format.h>

#include <iostream>
#include <map>
#include <optional>

#include "cli/pipeline_cli.h"
#include "cli/progress_line.h"
#include "cli/recipes_cli.h"
#include "io/pipeline_json.h"
#include "ir/file_util.h"
#include "models/models.h"
#include "pipeline/pipeline.h"
#include "planner/sharding_optimizer.h"
#include "report/pipeline_report.h"

namespace autoshard::cli {

namespace {

std::string layer_range(const PipelinePlan& pl, const PipelineStage& st) {
  const std::string& a = pl.layers[static_cast<size_t>(st.lo)];
  if (st.hi - st.lo == 1) return fmt::format("{} (1)", a);
  return fmt::format("{}..{} ({})", a, pl.layers[static_cast<size_t>(st.hi - 1)], st.hi - st.lo);
}

/// A stage's recomputation: "full 3, selective 1" (layers per mode), "-" for none.
std::string recompute_label(const Plan& p) {
  std::map<std::string, int> by_mode;
  for (const auto& [layer, mode] : p.layer_recompute)
    if (mode != "none") ++by_mode[mode];
  std::string r;
  for (const auto& [mode, n] : by_mode) r += fmt::format("{}{} {}", r.empty() ? "" : ", ", mode, n);
  return r.empty() ? "-" : r;
}

void print_pipeline(const PipelinePlan& pl, const Graph& g, const Mesh& mesh) {
  fmt::print("autoshard plan: {} on mesh {} of {} ({} devices), pipelined over {}\n", g.name,
             mesh.describe(), mesh.hardware().name, mesh.num_devices(), mesh.dim(pl.pp_dim).name);
  fmt::print("schedule: {}, {} microbatches, {} stage{} per pp rank, stages planned on {}\n",
             schedule_name(pl.schedule), pl.M, pl.v, pl.v > 1 ? "s" : "", pl.stage_mesh.describe());
  for (const std::string& w : pl.warnings) fmt::print("warning: {}\n", w);
  fmt::print("pipelined step time: {} (bubble {})\n", format_us(pl.step_us), format_us(pl.bubble_us));
  fmt::print("lower bound: {}  gap: {:.4f}%\n", format_us(pl.lower_bound_us), pl.gap * 100);
  const int64_t peak = *std::max_element(pl.rank_peak_bytes.begin(), pl.rank_peak_bytes.end());
  fmt::print("peak memory per device: {}{}\n", format_bytes(peak),
             pl.memory_limit_bytes > 0 ? fmt::format(" of {}", format_bytes(pl.memory_limit_bytes)) : std::string());
  fmt::print("stage parameters gathered: {}\n", pl.params_gathered_once ? "once per step (kept over the microbatches)" : "at each use");
  fmt::print("intra-op solves: {} in {:.3f}s\n", pl.intra_op_solves, pl.seconds);
  if (pl.clock_stopped_solves > 0)
    fmt::print("warning: {} of them stopped at --time-limit, not on their work limits: the plan may differ on a "
               "faster or less loaded machine (a larger --time-limit avoids it)\n",
               pl.clock_stopped_solves);
  std::string tried;
  for (const auto& c : pl.candidates)
    tried += fmt::format("{}{}{} {} (bound {})", tried.empty() ? "" : ", ", schedule_name(c.schedule),
                         c.v > 1 ? fmt::format(" v={}", c.v) : "", format_us(c.step_us), format_us(c.lower_bound_us));
  fmt::print("schedules tried: {}\n", tried);
  fmt::print("\n{:>5} {:>7}  {:<34} {:>7} {:>14} {:>12} {:>12} {:>9} {:>12}  {}\n", "stage", "pp rank", "layers",
             "devices", "per microbatch", "p2p", "once/step", "in flight", "memory", "recompute");
  for (const PipelineStage& st : pl.stages) {
    std::string ends = st.first && st.last ? " +first+last" : st.first ? " +first" : st.last ? " +last" : "";
    fmt::print("{:>5} {:>7}  {:<34} {:>7} {:>14} {:>12} {:>12} {:>9.2f} {:>12}  {}\n", st.index, st.pp_rank,
               layer_range(pl, st) + ends, pl.stage_mesh.num_devices(), format_us(st.solve->microbatch_us),
               format_us(st.solve->p2p_us), format_us(st.solve->once_us), st.inflight,
               format_bytes(pl.rank_peak_bytes[static_cast<size_t>(st.pp_rank)]), recompute_label(st.solve->plan));
  }
}

/// One row of the pipelined --compare: torchtitan's recipe (equal stages, FSDP + TP on each)
/// or the optimum.
struct CompareRow {
  std::string name;
  std::optional<PipelinePlan> plan;
  std::string error;
};

std::vector<CompareRow> compare_rows(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                                     const PipelineOptions& po) {
  std::vector<CompareRow> rows;
  auto run = [&](std::string name, const PlannerOptions& planner, const PipelineOptions& o) {
    CompareRow r{std::move(name), std::nullopt, ""};
    try {
      r.plan = plan_pipeline(g, mesh, planner, o);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    rows.push_back(std::move(r));
  };
  run("alpa (stages, schedule, intra-op searched)", opt, po);
  const int32_t P = static_cast<int32_t>(mesh.size(pp_dim_of(mesh)));
  const int32_t L = map_layers(g).num_layers();
  // torchtitan's recipes: PP with equal stages, FSDP + TP inside each stage (FSDP without a tp
  // dim), with a cp dim its context parallelism too (FSDP over dp x cp: Table 6's layout).
  const Mesh sub = stage_mesh(mesh, pp_dim_of(mesh));
  const bool tp = tensor_parallel_dim(sub) >= 0;
  const Recipe recipe = context_parallel_dim(sub) >= 0 ? Recipe::kCpFsdp : tp ? Recipe::kFsdpTp : Recipe::kFsdp;
  // The recipe's own layout, as --algo plans it: FSDP2 over TP is strided (shard orders on).
  PlannerOptions ropt = opt;
  if (recipe_uses_shard_orders(recipe, mesh)) ropt.shard_orders = true;
  for (int32_t v : {1, 2}) {
    PipelineOptions o = po;
    o.schedule = v == 1 ? PipelineSchedule::k1F1B : PipelineSchedule::kInterleaved1F1B;
    o.stages_per_rank = v;
    if (P * v > L) continue;
    pin_recipe_layout(o, recipe, P, L);
    run(fmt::format("torchtitan PP {} x {}", v == 1 ? "1F1B" : "Interleaved1F1B v=2", recipe_name(recipe)), ropt, o);
  }
  return rows;
}

}  // namespace

PipelineOptions pipeline_options(int32_t pp_size, const PipelineArgs& pa) {
  PipelineOptions po;
  po.microbatches = pa.microbatches > 0 ? pa.microbatches : pp_size;
  if (pa.microbatches < 0)
    throw std::invalid_argument(fmt::format("--microbatches: expected >= 1, got {}", pa.microbatches));
  if (pa.schedule != "auto") {
    po.schedule = parse_schedule(pa.schedule);
    if (!po.schedule)
      throw std::invalid_argument(fmt::format(
          "--schedule: unknown schedule '{}' (expected auto, GPipe, 1F1B, Interleaved1F1B, "
          "InterleavedZeroBubble, ZBVZeroBubble or DualPipeV)", pa.schedule));
  }
  if (pa.stages_per_rank < 0)
    throw std::invalid_argument(fmt::format("--stages-per-rank: expected >= 1, got {}", pa.stages_per_rank));
  po.stages_per_rank = pa.stages_per_rank;
  po.price_memory = pa.price_memory;
  po.rank_memory_bound = !pa.no_rank_bound;
  po.refit_ranks = !pa.no_refit;
  po.rank_pattern = !pa.no_rank_pattern;
  po.solve_fitted = pa.fitted_solves || pa.price_memory;  // pricing is the memory-aware solve's first step
  if (pa.param_gather != "auto" && pa.param_gather != "per-use" && pa.param_gather != "once")
    throw std::invalid_argument(
        fmt::format("--param-gather: unknown value '{}' (expected auto, per-use or once)", pa.param_gather));
  po.choose_params_gathered_once = pa.param_gather == "auto";
  po.params_gathered_once = pa.param_gather == "once";
  return po;
}

void pin_recipe_layout(PipelineOptions& po, Recipe recipe, int32_t P, int32_t L) {
  if (!po.schedule) po.schedule = PipelineSchedule::k1F1B;
  const int32_t v = po.stages_per_rank > 0 ? po.stages_per_rank : is_interleaved(*po.schedule) ? 2 : 1;
  if (P * v > L)
    throw std::invalid_argument(fmt::format("--algo {}: {} x {} stages exceed the {} layers", recipe_name(recipe), P, v, L));
  po.stages_per_rank = v;
  po.fixed_layers = equal_split(L, P * v);
  po.stage_hook = [recipe](ShardingOptimizer& so) { apply_recipe(so, recipe); };
  po.params_gathered_once = true;  // FSDP2 under torchtitan's PP: gathered at the first microbatch
  po.choose_params_gathered_once = false;
  // Over a stage's budget: the recipe with the least recomputation that fits, or with its
  // memory priced (the placements the recipe leaves free, such as gradient state, chosen to
  // save memory; pipeline/stage_lagrange.cc).  No memory-limited solve, which runs to
  // --time-limit and so depends on the machine.
  po.solve_fitted = false;
}

Graph microbatch_graph(const GraphSource& src, int32_t M) {
  if (!src.graph_file.empty()) return load_graph(src);  // a traced graph is one microbatch
  ModelOptions mo;
  mo.batch = src.batch;
  mo.seq = src.seq;
  mo.layers = src.layers;
  if (!src.dtype.empty()) mo.dtype = parse_dtype_option(src.dtype);
  const int64_t batch = resolve_model_options(src.model, mo).batch;
  if (batch % M != 0)
    throw std::invalid_argument(
        fmt::format("--microbatches: {} does not divide the batch {} (--batch)", M, batch));
  GraphSource one = src;
  one.batch = batch / M;
  return load_graph(one);
}

int run_pipeline_compare(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                         const PipelineArgs& pa, bool json) {
  PipelineOptions po = pipeline_options(static_cast<int32_t>(mesh.size(pp_dim_of(mesh))), pa);
  const Graph g = microbatch_graph(src, po.microbatches);
  std::optional<ProgressLine> line;
  if (pa.progress_line) po.on_progress = line.emplace(stderr).callback();
  const std::vector<CompareRow> rows = compare_rows(g, mesh, opt, po);
  line.reset();  // erased before the table
  const double best = rows.front().plan ? rows.front().plan->step_us : 0;
  if (json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const CompareRow& r : rows) {
      nlohmann::ordered_json e = r.plan ? pipeline_summary_json(*r.plan, g, mesh) : nlohmann::ordered_json::object();
      e["recipe"] = r.name;
      if (!r.error.empty()) e["error"] = r.error;
      j.push_back(e);
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  fmt::print("autoshard plan --compare: {} on mesh {} of {}, {} microbatches\n\n", g.name, mesh.describe(),
             mesh.hardware().name, po.microbatches);
  fmt::print("{:<48} {:<20} {:<24} {:>12} {:>12} {:>12} {:>10}\n", "recipe", "schedule", "layers per stage",
             "step", "bound", "peak memory", "vs alpa");
  for (const CompareRow& r : rows) {
    if (!r.plan) {
      fmt::print("{:<48} not applicable: {}\n", r.name, one_line(r.error));
      continue;
    }
    const PipelinePlan& p = *r.plan;
    std::string sizes;
    for (const PipelineStage& st : p.stages) sizes += fmt::format("{}{}", sizes.empty() ? "" : ",", st.hi - st.lo);
    if (sizes.size() > 24) sizes = sizes.substr(0, 21) + "...";
    const int64_t peak = *std::max_element(p.rank_peak_bytes.begin(), p.rank_peak_bytes.end());
    fmt::print("{:<48} {:<20} {:<24} {:>12} {:>12} {:>12} {:>9.1f}%\n", r.name,
               fmt::format("{}{}", schedule_name(p.schedule), p.v > 1 ? fmt::format(" v={}", p.v) : ""), sizes,
               format_us(p.step_us), format_us(p.lower_bound_us), format_bytes(peak),
               best > 0 ? (p.step_us / best - 1) * 100 : 0.0);
  }
  return 0;
}

int run_pipeline_plan(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                      const PipelineArgs& pa, bool json, const std::string& out_dir,
                      const ScheduleOptions& schedule) {
  PipelineOptions po = pipeline_options(static_cast<int32_t>(mesh.size(pp_dim_of(mesh))), pa);
  const Graph g = microbatch_graph(src, po.microbatches);
  const Recipe recipe = parse_algo_option(pa.algo);
  if (recipe != Recipe::kAlpa) {
    pin_recipe_layout(po, recipe, static_cast<int32_t>(mesh.size(pp_dim_of(mesh))), map_layers(g).num_layers());
    // Asked for, per use is the recipe's other FSDP2 setting (reshard_after_forward=True,
    // torchtitan's fsdp_reshard_after_forward "always"): a what-if of the gathered copies' memory.
    if (pa.param_gather == "per-use") po.params_gathered_once = false;
  }
  std::optional<ProgressLine> line;
  if (pa.progress_line) po.on_progress = line.emplace(stderr).callback();
  const PipelinePlan pl = plan_pipeline(g, mesh, opt, po);
  line.reset();  // erased before the summary
  if (!out_dir.empty()) {
    create_output_dir(out_dir);
    write_file_atomic(out_dir + "/placements.json", write_pipeline_placements_json(pl, g, mesh, schedule));
    write_file_atomic(out_dir + "/plan.json", pipeline_summary_json(pl, g, mesh).dump(1) + "\n");
    const int32_t shown = bottleneck_stage(pl);
    const StageSolve& s = *pl.stages[static_cast<size_t>(shown)].solve;
    if (s.plan.has_solution)
      write_file_atomic(out_dir + "/report.html",
                        render_pipeline_report_html(*s.optimizer, s.plan, pl, shown));
  }
  if (json) std::cout << pipeline_summary_json(pl, g, mesh).dump(2) << "\n";
  else print_pipeline(pl, g, mesh);
  return 0;
}

}  // namespace autoshard::cli

/// `autoshard plan --mesh-dims pp,...`: the pipelined plan's text, JSON and files.
#include <fmt/format.h>

#include <iostream>

#include "cli/pipeline_cli.h"
#include "io/pipeline_json.h"
#include "ir/file_util.h"
#include "models/models.h"
#include "planner/pipeline.h"

namespace autoshard::cli {

namespace {

/// The graph of one microbatch: a built-in model's --batch is the global batch, split in M.
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

std::string layer_range(const PipelinePlan& pl, const PipelineStage& st) {
  const std::string& a = pl.layers[static_cast<size_t>(st.lo)];
  if (st.hi - st.lo == 1) return fmt::format("{} (1)", a);
  return fmt::format("{}..{} ({})", a, pl.layers[static_cast<size_t>(st.hi - 1)], st.hi - st.lo);
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
  fmt::print("intra-op solves: {} in {:.3f}s\n", pl.intra_op_solves, pl.seconds);
  std::string tried;
  for (const auto& c : pl.candidates)
    tried += fmt::format("{}{}{} {} (bound {})", tried.empty() ? "" : ", ", schedule_name(c.schedule),
                         c.v > 1 ? fmt::format(" v={}", c.v) : "", format_us(c.step_us), format_us(c.lower_bound_us));
  fmt::print("schedules tried: {}\n", tried);
  fmt::print("\n{:>5} {:>7}  {:<34} {:>7} {:>14} {:>12} {:>12} {:>9} {:>12}\n", "stage", "pp rank", "layers",
             "devices", "per microbatch", "p2p", "once/step", "in flight", "memory");
  for (const PipelineStage& st : pl.stages) {
    std::string ends = st.first && st.last ? " +first+last" : st.first ? " +first" : st.last ? " +last" : "";
    fmt::print("{:>5} {:>7}  {:<34} {:>7} {:>14} {:>12} {:>12} {:>9.2f} {:>12}\n", st.index, st.pp_rank,
               layer_range(pl, st) + ends, pl.stage_mesh.num_devices(), format_us(st.solve->microbatch_us),
               format_us(st.solve->p2p_us), format_us(st.solve->once_us), st.inflight,
               format_bytes(pl.rank_peak_bytes[static_cast<size_t>(st.pp_rank)]));
  }
}

}  // namespace

int run_pipeline_plan(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                      const PipelineArgs& pa, bool json, const std::string& out_dir) {
  PipelineOptions po;
  po.microbatches = pa.microbatches > 0 ? pa.microbatches : static_cast<int32_t>(mesh.size(pp_dim_of(mesh)));
  if (pa.microbatches < 0)
    throw std::invalid_argument(fmt::format("--microbatches: expected >= 1, got {}", pa.microbatches));
  if (pa.schedule != "auto") {
    po.schedule = parse_schedule(pa.schedule);
    if (!po.schedule)
      throw std::invalid_argument(fmt::format(
          "--schedule: unknown schedule '{}' (expected auto, GPipe, 1F1B or Interleaved1F1B)", pa.schedule));
  }
  if (pa.stages_per_rank < 0)
    throw std::invalid_argument(fmt::format("--stages-per-rank: expected >= 1, got {}", pa.stages_per_rank));
  po.stages_per_rank = pa.stages_per_rank;
  const Graph g = microbatch_graph(src, po.microbatches);
  const PipelinePlan pl = plan_pipeline(g, mesh, opt, po);
  if (!out_dir.empty()) {
    create_output_dir(out_dir);
    write_file_atomic(out_dir + "/placements.json", write_pipeline_placements_json(pl, g, mesh));
    write_file_atomic(out_dir + "/plan.json", pipeline_summary_json(pl, g, mesh).dump(1) + "\n");
  }
  if (json) std::cout << pipeline_summary_json(pl, g, mesh).dump(2) << "\n";
  else print_pipeline(pl, g, mesh);
  return 0;
}

}  // namespace autoshard::cli

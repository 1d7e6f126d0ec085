#pragma once
/// `autoshard plan` on a mesh with a `pp` dim: pipeline stages (pipeline/pipeline.h).
#include <string>

#include "cli/common.h"
#include "planner/options.h"
#include "pipeline/pipeline.h"
#include "planner/prefetch_schedule.h"
#include "planner/recipes.h"

namespace autoshard::cli {

struct PipelineArgs {
  int microbatches = 0;          ///< 0: the pp size
  std::string schedule = "auto";
  int stages_per_rank = 0;       ///< 0: auto
  bool price_memory = false;     ///< PipelineOptions::price_memory
  bool no_rank_bound = false;    ///< !PipelineOptions::rank_memory_bound
  bool no_refit = false;         ///< !PipelineOptions::refit_ranks
  bool no_rank_pattern = false;  ///< !PipelineOptions::rank_pattern
  bool fitted_solves = false;    ///< PipelineOptions::solve_fitted (the library's default; off here)
  /// auto (PipelineOptions::choose_params_gathered_once), per-use or once (params_gathered_once).
  std::string param_gather = "auto";
  /// --algo: alpa (stages, schedule and intra-op searched) or a recipe pinned in torchtitan's
  /// pipeline layout (equal stages, the recipe inside each; pin_recipe_layout).
  std::string algo = "alpa";
  /// Draw the search's progress as a status line on stderr (a terminal, without --quiet).
  bool progress_line = false;
};

/// The pipeline options of the command line (`plan` and `search --pp` plan alike);
/// microbatches default to `pp_size`.  Throws std::invalid_argument for a bad value.
PipelineOptions pipeline_options(int32_t pp_size, const PipelineArgs& pa);

/// The graph of one microbatch of M: a built-in model's --batch (the global batch) split in M
/// (must divide); a graph file is one microbatch already.
Graph microbatch_graph(const GraphSource& src, int32_t M);

/// torchtitan's pipeline layout for `recipe` on P pp ranks and L layers: the schedule given
/// (1F1B by default, torchtitan's `pipeline_parallel_schedule` default), v stages per rank as
/// given or, for a multi-stage schedule, 2 (torchtitan's generate_split_points default), equal
/// stages (pipeline/pipeline.h equal_split, the split generate_split_points makes), the
/// recipe pinned in every stage, its parameters gathered once per step, and no memory-limited
/// solves (PipelineOptions::solve_fitted off).
void pin_recipe_layout(PipelineOptions& po, Recipe recipe, int32_t P, int32_t L);

/// Plans `src` on `mesh` (which has a pp dim) with pipeline stages; prints the text or JSON
/// summary and, with `out_dir`, writes placements.json and plan.json there.  Returns 0.
int run_pipeline_plan(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                      const PipelineArgs& pa, bool json, const std::string& out_dir,
                      const ScheduleOptions& schedule = {});

/// `plan --compare` on a mesh with a pp dim: the optimum beside torchtitan's PP x FSDP x TP
/// recipe (equal stages, pipeline/pipeline.h equal_split; FSDP + TP pinned in every stage) with
/// 1F1B and with Interleaved1F1B (v = 2).  Returns 0.
int run_pipeline_compare(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                         const PipelineArgs& pa, bool json);

}  // namespace autoshard::cli

#pragma once
/// `autoshard plan` on a mesh with a `pp` dim: pipeline stages (planner/pipeline.h).
#include <string>

#include "cli/common.h"
#include "planner/options.h"
#include "planner/prefetch_schedule.h"

namespace autoshard::cli {

struct PipelineArgs {
  int microbatches = 0;          ///< 0: the pp size
  std::string schedule = "auto";
  int stages_per_rank = 0;       ///< 0: auto
  bool price_memory = false;     ///< PipelineOptions::price_memory
  bool no_rank_bound = false;    ///< !PipelineOptions::rank_memory_bound
  bool no_refit = false;         ///< !PipelineOptions::refit_ranks
  bool no_rank_pattern = false;  ///< !PipelineOptions::rank_pattern
};

/// The graph of one microbatch of M: a built-in model's --batch (the global batch) split in M
/// (must divide); a graph file is one microbatch already.
Graph microbatch_graph(const GraphSource& src, int32_t M);

/// Plans `src` on `mesh` (which has a pp dim) with pipeline stages; prints the text or JSON
/// summary and, with `out_dir`, writes placements.json and plan.json there.  Returns 0.
int run_pipeline_plan(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                      const PipelineArgs& pa, bool json, const std::string& out_dir,
                      const ScheduleOptions& schedule = {});

/// `plan --compare` on a mesh with a pp dim: the optimum beside torchtitan's PP x FSDP x TP
/// recipe (equal stages, planner/pipeline.h equal_split; FSDP + TP pinned in every stage) with
/// 1F1B and with Interleaved1F1B (v = 2).  Returns 0.
int run_pipeline_compare(const GraphSource& src, const Mesh& mesh, const PlannerOptions& opt,
                         const PipelineArgs& pa, bool json);

}  // namespace autoshard::cli

#pragma once
/// One parameter-gathering variant of the pipeline search (gathered once per step, or per use),
/// planned whole: plan_pipeline (pipeline_gather.cc) plans one, or both and keeps the better.
#include "ir/graph.h"
#include "mesh/mesh.h"
#include "pipeline/pipeline.h"
#include "planner/options.h"

namespace autoshard::pipeline_detail {

/// A variant's plan, and whether memory cost its search anything.
struct VariantPlan {
  PipelinePlan plan;
  /// Memory shaped the plan or its bound: a stage plan was fitted to a budget, a rank's work was
  /// priced (rank floors), the ranks do not fit, or a stage's plan costs more than its kind's
  /// memory-free plan (a rank refit recomputes).  false: the plan and its bound are the
  /// memory-free search's.
  bool memory_bound = true;
};

/// The pipelined plan with the stages' parameters gathered as popt.params_gathered_once says
/// (popt.choose_params_gathered_once ignored).  Throws std::invalid_argument on bad options and
/// std::runtime_error when nothing fits.
VariantPlan plan_with_gather(const Graph& g, const Mesh& mesh, const PlannerOptions& opt, const PipelineOptions& popt);

}  // namespace autoshard::pipeline_detail

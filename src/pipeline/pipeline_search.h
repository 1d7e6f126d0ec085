#pragma once
/// `autoshard search --pp SIZES`: meshes with a pipeline dim.  For each pp size P (dividing the
/// GPUs, at most the layers) and each stage mesh of N / P devices the mesh search would
/// consider (one per symmetry class, enumerate_meshes), the mesh P x (stage mesh) with `pp`
/// outermost — so the pp neighbours are the farthest apart and the stage dims keep the fast
/// links, as torchtitan lays out PP — is planned with pipeline stages (pipeline/pipeline.h) and
/// ranked by its pipelined step.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/options.h"
#include "pipeline/pipeline.h"

namespace autoshard {

struct PipelineSearchRow {
  Mesh mesh;
  std::optional<PipelinePlan> plan;  ///< nullopt: `error` says why
  std::string error;
  double seconds = 0;
};

/// `graph_for(M)` gives the graph of one microbatch when the step has M microbatches.  Rows are
/// ranked by step time (plans that fit the memory limit first), errors last.
std::vector<PipelineSearchRow> search_pipeline_meshes(const std::function<Graph(int32_t)>& graph_for,
                                                      int64_t gpus, int max_dims, const Hardware& hw,
                                                      CommBackend backend, const PlannerOptions& opt,
                                                      const std::vector<int32_t>& pp_sizes,
                                                      int32_t microbatches);

}  // namespace autoshard

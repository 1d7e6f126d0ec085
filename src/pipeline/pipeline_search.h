#pragma once
/// `autoshard search --pp SIZES`: meshes with a pipeline dim.  For each pp size P (dividing the
/// GPUs, at most the layers) and each stage mesh of N / P devices the mesh search would
/// consider (one per symmetry class, enumerate_meshes), the mesh P x (stage mesh) with `pp`
/// outermost — so the pp neighbours are the farthest apart and the stage dims keep the fast
/// links, as torchtitan lays out PP — is planned with pipeline stages (pipeline/pipeline.h) and
/// ranked by its pipelined step.
///
/// Branch and bound over meshes, as the flat mesh search (planner/mesh_search.h): each mesh is
/// planned with the best step that fits so far as its cutoff (PipelineOptions::cutoff_us, the
/// flat meshes' best to start with), and a mesh whose bound reaches it is listed as pruned with
/// that bound -- its stage solves' bounds are known long before its plan.  The meshes are
/// planned one after the other (each plan uses the cores itself), in a fixed order, so the
/// ranking does not depend on timing.
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
  std::optional<PipelinePlan> plan;  ///< nullopt: pruned (bound_us) or `error` says why
  /// Pruned: a proven bound of every plan on the mesh, at or above the step it had to beat.
  std::optional<double> pruned_bound_us;
  std::string error;
  double seconds = 0;
  /// A plan every pp rank of which fits the memory limit (or there is none).
  bool fits() const;
};

/// `graph_for(M)` gives the graph of one microbatch when the step has M microbatches; `popt`
/// the pipeline search's options (its microbatches and cutoff set per mesh: `microbatches`, 0
/// for the pp size; `cutoff_us`, infinite to plan every mesh).  Rows are ranked by step time
/// (plans that fit the memory limit first), then pruned ones by bound, errors last.
std::vector<PipelineSearchRow> search_pipeline_meshes(const std::function<Graph(int32_t)>& graph_for,
                                                      int64_t gpus, int max_dims, const Hardware& hw,
                                                      CommBackend backend, const PlannerOptions& opt,
                                                      const PipelineOptions& popt,
                                                      const std::vector<int32_t>& pp_sizes,
                                                      int32_t microbatches, double cutoff_us);

}  // namespace autoshard

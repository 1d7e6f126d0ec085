#pragma once
/// Mixture-of-Experts structure of a traced graph, for the expert-parallel recipe ("ep").
///
/// A stacked expert weight is a parameter of rank 3 ([E, in, out] or [E, out, in]) that
/// reaches a grouped or batched matmul (`_grouped_mm`, `bmm`, `baddbmm`) through ops that keep
/// its leading expert dim (transposes of the last two dims, casts, copies, views that keep
/// dim 0).  The matmul is
/// - batched when its output keeps the expert dim ([E, M, N]: a capacity-padded dispatch, as
///   in GShard / the example autoshard.tracer.examples.moe): splitting E over a mesh dim is
///   expert parallelism, the tokens reaching it by an all-to-all;
/// - jagged when it returns token rows ([M, N] from 2-D x 3-D `_grouped_mm` over tokens
///   sorted by expert, as Hugging Face's and torchtitan's experts do): the rows of one expert
///   are a data-dependent range, so the experts cannot be split as a placement.
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"

namespace autoshard {

struct ExpertAnalysis {
  std::vector<char> expert_param;  ///< per graph node: 1 for a stacked expert weight
  std::vector<NodeIdx> batched;    ///< forward expert matmuls whose output keeps the expert dim
  int64_t jagged = 0;              ///< forward expert matmuls over jagged token rows
  int64_t n_params = 0;            ///< number of stacked expert weights
};

ExpertAnalysis expert_analysis(const Graph& g);

/// The mesh dim named ep / expert / experts; -1 when none.
MeshDimIdx expert_parallel_dim(const Mesh& mesh);

}  // namespace autoshard

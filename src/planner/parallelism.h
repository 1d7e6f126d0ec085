#pragma once
/// Names the parallelism a parameter's placement amounts to, per mesh dim, in the words users
/// know: data parallel (replicated weight, batch-sharded activations), FSDP / ZeRO-3 (weight
/// stored sharded, gathered for use), column- or row-parallel tensor parallelism (weight used
/// sharded, Megatron-LM's terms for nn.Linear's [out, in] weight), or plain replication.
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/plan.h"

namespace autoshard {

/// Labels the parameters of one plan; what all labels share (whether the batch is split on
/// each mesh dim) is found once, so labelling every parameter is not quadratic in the graph.
class ParallelismLabeler {
 public:
  ParallelismLabeler(const Graph& g, const Mesh& mesh, const Plan& plan);
  /// As describe_parallelism / parallelism_on_dim below.
  std::string describe(NodeIdx param) const;
  std::string on_dim(NodeIdx param, MeshDimIdx dim) const;

 private:
  const Graph& g_;
  const Mesh& mesh_;
  const Plan& plan_;
  std::vector<char> batch_sharded_;  ///< per mesh dim: some graph input is sharded on it
};

/// E.g. "dp: FSDP, tp: TP column-parallel".  `param` must be a parameter node with a plan.
std::string describe_parallelism(const Graph& g, const Mesh& mesh, const Plan& plan,
                                 NodeIdx param);
/// Short label for one mesh dim ("DP", "FSDP", "TP column", "TP row", "TP", "replicated").
std::string parallelism_on_dim(const Graph& g, const Mesh& mesh, const Plan& plan, NodeIdx param,
                               MeshDimIdx dim);

}  // namespace autoshard

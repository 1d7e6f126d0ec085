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

/// Context parallelism of a plan, per (mesh dim, kind, load balance): how many attention ops
/// split their sequence that way.  Parameters do not show it (their placements are FSDP /
/// TP / DP as usual), so the plan summary, its JSON and the mesh search report it apart.
struct ContextParallelUse {
  MeshDimIdx dim = -1;
  CpKind kind = CpKind::kRing;
  bool load_balance = false;
  int32_t nodes = 0;
};
std::vector<ContextParallelUse> context_parallel_use(const Plan& plan);
/// "cp: ring attention, load-balanced (4 attention ops)"; "" when the plan has none.
std::string describe_context_parallel(const Mesh& mesh, const Plan& plan);

}  // namespace autoshard

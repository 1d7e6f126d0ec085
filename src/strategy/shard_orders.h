#pragma once
/// Ordered variants of strategies: the same placements with another shard order (strided
/// shards, placement/placement.h), for the ops where the order cannot change what the op
/// computes per device: leaves (parameters, inputs, buffers) and ops whose tensors all have the
/// same shape, scalars aside (elementwise ops, casts, the optimizer update), and dim
/// permutations (t, transpose, permute: every cut moves with its dim).  FSDP2 over TP stores a
/// column-parallel weight as _S(0,tp)S(0); its gradient and optimizer state follow it.
///
/// A variant reorders the cuts of a set of mesh dims that together cut one tensor dim -- one of
/// them first, the others after it in mesh order (FSDP2 sharding the shard of TP or EP over its
/// flattened mesh dims; on 3-D sets the other permutations are not offered) -- and applies the
/// same order to every tensor of the strategy where exactly that set cuts a dim, so the tensors
/// of one strategy keep one layout.  Other ops keep the default order: their
/// inputs are resharded to it (one all-gather for FSDP's unshard, cost/redistribute.h).
#include <vector>

#include "mesh/mesh.h"
#include "strategy/strategy.h"

namespace autoshard {

/// Appends to `strategies` every ordered variant of each of them that is valid on `mesh` (and
/// splits evenly with `require_divisible`) and not already listed (by Strategy::name()).
void add_shard_order_variants(const Mesh& mesh, bool require_divisible,
                              std::vector<Strategy>& strategies);

/// Whether node `n`'s strategies get ordered variants (see the file comment).
bool keeps_layout(const Graph& g, const Node& n);

/// Per node: whether it lies on a parameter's chain -- keeps_layout() nodes joined to a
/// parameter through keeps_layout() nodes only: the parameter, its casts and transposes, the
/// optimizer update with its state buffers, the gradient's casts and transposes that feed it,
/// and a gradient that Graph::grad_pairs ties to the parameter's placement, with its own chain.
/// FSDP2's strided layout lives there; activations reach it only through ops that do not keep
/// the layout (matmuls, norms), so the planner offers ordered variants on these nodes alone:
/// on every same-shape op they would grow the problem past its planning-time budget (llama3-70b
/// 8x8x8: 2.4x, docs/benchmarks.md "Shard orders").
std::vector<char> parameter_chain_nodes(const Graph& g);

}  // namespace autoshard

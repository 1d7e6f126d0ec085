#pragma once
/// The sequence order a load-balanced context-parallel plan runs in, as the runtime must lay
/// out the step's inputs and buffers.
///
/// Load-balanced CP attention (strategy.h ContextParallel::load_balance) holds the sequence in
/// head-tail order: of 2P chunks, rank r holds r and 2P-1-r, so causal attention's work is even.
/// That order is established at the step's sources: every input and buffer with a dim of the
/// attention's sequence length S cut over the load-balanced mesh dims is permuted to head-tail
/// order before its shards are cut (head_tail), and the whole step then sees the permuted
/// sequence.  When some sequence-indexed source is not cut on its sequence over those dims (a
/// replicated rope table sliced later, a batch-split input), the sequence is split later in the
/// step, in natural order, and the attention runs with contiguous positions: the same numbers
/// without the balance (head_tail false, nothing permuted).  Dims longer than S (a rope table of
/// max_seq_len rows) do not mark a source as sequence-indexed.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "strategy/strategy.h"

namespace autoshard {

struct SequencePermute {
  NodeIdx node = kNoNode;  ///< an input or buffer
  /// (tensor dim, mesh dim size) per load-balanced mesh dim, in the order the dims first
  /// appear on a CP node: the permutations to apply, in that order.
  std::vector<std::pair<int32_t, int64_t>> dims;
};

struct SequenceLayout {
  bool head_tail = false;
  std::vector<SequencePermute> permute;  ///< in graph order
};

/// The layout of a plan whose chosen strategy of node i is chosen[i] (nullopt: none), over
/// `mesh` (the mesh the strategies' placements and CP dims index).
SequenceLayout sequence_layout(const Graph& g, const std::vector<const Strategy*>& chosen,
                               const Mesh& mesh);

}  // namespace autoshard

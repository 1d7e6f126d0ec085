#pragma once
/// Pipeline stages as subgraphs: which layer every node of a training graph belongs to, and
/// the graph of one stage (a contiguous range of layers) cut out of the full one.
///
/// Layers are the repeated modules layer_key() names ("layers.3"), in the order their forward
/// ops first appear.  The first stage also holds what runs before the first layer (embedding,
/// inputs), the last what runs after the last (final norm, head, loss); a module outside the
/// layers goes before or after them by where its first forward op is.  Ops without a module
/// path follow their first op input (the backward of a layer follows its forward's data), the
/// optimizer update of a parameter follows the parameter; ops that read placeholders only and
/// placeholders used by several stages (rope tables) are *shared*: every stage that uses them
/// gets a copy (docs/pipeline-format.md's "stage": -1).
///
/// A stage graph keeps the nodes of its layers in graph order; a tensor it reads from another
/// stage becomes an input placeholder of the same name (what it receives: the previous stage's
/// activation in the forward, the next stage's gradient in the backward), and the tensors
/// other stages read become outputs (what it sends).  Stages of equally many identical layers
/// with the same ends (holds-first, holds-last) give the same graph up to names, node by node.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"

namespace autoshard {

struct LayerMap {
  static constexpr int32_t kShared = -1000000;  ///< pos of a node every user stage copies
  std::vector<std::string> layers;  ///< layer keys in forward order ("layers.0", ...)
  /// Per graph node: -1 before the first layer, 0..L-1 its layer, L after the last; kShared.
  std::vector<int32_t> pos;
  /// Per graph node with pos kShared: the positions of the stages' nodes that use it.
  std::vector<std::vector<int32_t>> shared_users;
  int32_t num_layers() const { return static_cast<int32_t>(layers.size()); }
};

/// Throws std::invalid_argument when the graph has no repeated layers or its layers differ
/// (pipeline stages need identical layers).
LayerMap map_layers(const Graph& g);

struct StageGraph {
  Graph graph;
  /// Per stage-graph node: the full graph's node (received tensors: their producer; -1 for the
  /// output node).
  std::vector<NodeIdx> origin;
  /// Per stage-graph node: it is a received tensor (input placeholder for a cut edge).
  std::vector<char> received;
  /// The stage's output tensors that other stages read (what it sends), in output order.
  std::vector<TensorRef> sent;
};

/// The graph of the stage holding layers [lo, hi) (first iff lo == 0, last iff hi == L).
StageGraph extract_stage(const Graph& g, const LayerMap& m, int32_t lo, int32_t hi);

/// Node by node, `a` and `b` are the same graph up to names (op, kind, phase, attributes,
/// output metas and input positions).
bool same_structure(const Graph& a, const Graph& b);

/// The index of the mesh dim named "pp", or -1.
int32_t pp_dim_of(const Mesh& mesh);
/// `mesh` without dim `drop`, every other dim with its link figures (bandwidth, latency,
/// inter-node) as in the full mesh: a stage's devices.
Mesh stage_mesh(const Mesh& mesh, int32_t drop);

}  // namespace autoshard

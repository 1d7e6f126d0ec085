#include "planner/sequence_layout.h"

#include <algorithm>
#include <set>

namespace autoshard {

namespace {

/// Load-balanced CP mesh dims with their sizes, in first-use order, and the sequence lengths
/// of those attentions (dim 2 of the query).
void balanced_dims(const Graph& g, const std::vector<const Strategy*>& chosen, const Mesh& mesh,
                   std::vector<std::pair<MeshDimIdx, int64_t>>& dims, std::set<int64_t>& seqs) {
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Strategy* s = chosen[static_cast<size_t>(i)];
    if (!s || !s->cp.active() || !s->cp.load_balance) continue;
    const MeshDimIdx md = s->cp.mesh_dim;
    if (std::none_of(dims.begin(), dims.end(), [&](const auto& d) { return d.first == md; }))
      dims.emplace_back(md, mesh.size(md));
    const Node& n = g.node(i);
    if (n.inputs.empty()) continue;
    const TensorRef q = n.inputs[0];
    const auto& shape = g.node(q.node).outputs.at(static_cast<size_t>(q.output)).shape;
    if (shape.size() > 2) seqs.insert(shape[2]);
  }
}

}  // namespace

SequenceLayout sequence_layout(const Graph& g, const std::vector<const Strategy*>& chosen,
                               const Mesh& mesh) {
  std::vector<std::pair<MeshDimIdx, int64_t>> dims;
  std::set<int64_t> seqs;
  balanced_dims(g, chosen, mesh, dims, seqs);
  SequenceLayout out;
  if (dims.empty() || seqs.size() != 1) return out;
  const int64_t seq = *seqs.begin();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    const Strategy* s = chosen[static_cast<size_t>(i)];
    if ((n.kind != NodeKind::kInput && n.kind != NodeKind::kBuffer) || !s || n.outputs.empty()) continue;
    const auto& shape = n.outputs[0].shape;
    if (std::none_of(shape.begin(), shape.end(), [&](int64_t x) { return x >= seq; })) continue;
    SequencePermute p{i, {}};
    for (const auto& [md, world] : dims) {
      const Placement& pl = s->outputs.at(0).placements.at(static_cast<size_t>(md));
      if (!pl.is_shard() || shape.at(static_cast<size_t>(pl.dim)) != seq)
        return SequenceLayout{};  // a sequence not cut at its source: natural order
      p.dims.emplace_back(pl.dim, world);
    }
    out.permute.push_back(std::move(p));
  }
  out.head_tail = !out.permute.empty();
  return out;
}

}  // namespace autoshard

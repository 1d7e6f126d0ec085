#include "strategy/shard_orders.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <string_view>

namespace autoshard {

namespace {

/// The distinct sets of mesh dims (sorted) that cut one tensor dim together in some tensor of
/// `s`, each with the default order of its cuts (ascending: the strategies are enumerated
/// in the default order).
std::vector<std::vector<int32_t>> joint_cuts(const Strategy& s, const Mesh& mesh) {
  std::vector<std::vector<int32_t>> sets;
  for (const auto* specs : {&s.outputs, &s.inputs})
    for (const ShardingSpec& sp : *specs) {
      const auto order = decode_shard_order(sp.placements, mesh);
      if (!order) continue;
      for (const ShardOrderEntry& e : *order) {
        if (e.mesh_dims.size() < 2) continue;
        std::vector<int32_t> key = e.mesh_dims;
        std::sort(key.begin(), key.end());
        if (std::find(sets.begin(), sets.end(), key) == sets.end()) sets.push_back(std::move(key));
      }
    }
  return sets;
}

/// `sp` with every dim cut by exactly the mesh dims of `sets[k]` cut in order `orders[k]`.
ShardingSpec reorder(const ShardingSpec& sp, const Mesh& mesh,
                     const std::vector<std::vector<int32_t>>& sets,
                     const std::vector<std::vector<int32_t>>& orders) {
  auto order = decode_shard_order(sp.placements, mesh);
  if (!order) return sp;
  for (ShardOrderEntry& e : *order) {
    std::vector<int32_t> key = e.mesh_dims;
    std::sort(key.begin(), key.end());
    for (size_t k = 0; k < sets.size(); ++k)
      if (key == sets[k]) e.mesh_dims = orders[k];
  }
  std::vector<Placement> plain = sp.placements;
  for (Placement& p : plain) p.split_factor = 1;
  return ShardingSpec{encode_shard_order(std::move(plain), *order, mesh), sp.meta};
}

}  // namespace

void add_shard_order_variants(const Mesh& mesh, bool require_divisible,
                              std::vector<Strategy>& strategies) {
  std::set<std::string> seen;
  for (const Strategy& s : strategies) seen.insert(s.name());
  const size_t n = strategies.size();
  for (size_t i = 0; i < n; ++i) {
    const std::vector<std::vector<int32_t>> sets = joint_cuts(strategies[i], mesh);
    if (sets.empty()) continue;
    // Per set, the orders offered: each mesh dim of the set cutting first, the rest after it in
    // mesh order (rotation r of the set; r = 0 is the default order).  That is how the
    // reference systems layer their parallelisms -- one (TP, EP) cuts first, FSDP shards its
    // shard over the flattened rest -- and it keeps a 3-D set at 3 orders instead of 6.
    std::vector<size_t> rot(sets.size(), 0);  // odometer over the rotations
    while (true) {
      size_t k = 0;
      while (k < rot.size() && ++rot[k] == sets[k].size()) rot[k++] = 0;
      if (k == rot.size()) break;  // back at all-default: every combination seen
      std::vector<std::vector<int32_t>> orders = sets;
      for (size_t j = 0; j < sets.size(); ++j)
        std::rotate(orders[j].begin(), orders[j].begin() + static_cast<std::ptrdiff_t>(rot[j]),
                    orders[j].begin() + static_cast<std::ptrdiff_t>(rot[j]) + 1);
      Strategy v = strategies[i];
      bool ok = true;
      for (auto* specs : {&v.outputs, &v.inputs})
        for (ShardingSpec& sp : *specs) {
          sp = reorder(sp, mesh, sets, orders);
          ok = ok && sp.valid(mesh, require_divisible);
        }
      if (ok && seen.insert(v.name()).second) strategies.push_back(std::move(v));
    }
  }
}

bool keeps_layout(const Graph& g, const Node& n) {
  if (n.kind == NodeKind::kParameter || n.kind == NodeKind::kInput || n.kind == NodeKind::kBuffer)
    return n.inputs.empty() && n.outputs.size() == 1;
  if (n.kind != NodeKind::kOp || n.outputs.empty()) return false;
  // Dim permutations move every cut with its dim: a transposed weight keeps its order.
  const std::string_view op = std::string_view(n.op).substr(0, n.op.find('.'));
  if (op == "t" || op == "transpose" || op == "permute") return n.outputs.size() == 1;
  // Scalars (an optimizer's step count) have no cuts to order and do not count.
  const std::vector<int64_t>* shape = nullptr;
  auto same = [&](const TensorMeta& m) {
    if (m.rank() == 0) return true;
    if (shape == nullptr) shape = &m.shape;
    return m.shape == *shape;
  };
  for (const TensorMeta& m : n.outputs)
    if (!same(m)) return false;
  for (const auto& ref : n.inputs)
    if (!same(g.meta(ref))) return false;
  return shape != nullptr;
}

std::vector<char> parameter_chain_nodes(const Graph& g) {
  const size_t n = static_cast<size_t>(g.size());
  std::vector<char> keeps(n, 0);
  for (NodeIdx i = 0; i < g.size(); ++i) keeps[static_cast<size_t>(i)] = keeps_layout(g, g.node(i));
  // Union-find over the edges whose both ends keep the layout.
  std::vector<size_t> root(n);
  std::iota(root.begin(), root.end(), size_t{0});
  auto find = [&](size_t x) {
    while (root[x] != x) x = root[x] = root[root[x]];
    return x;
  };
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (!keeps[static_cast<size_t>(i)]) continue;
    for (const TensorRef& in : g.node(i).inputs)
      if (keeps[static_cast<size_t>(in.node)]) root[find(static_cast<size_t>(i))] = find(static_cast<size_t>(in.node));
  }
  // A gradient takes its parameter's placement (Graph::grad_pairs): it is on the chain.
  for (const GradPair& gp : g.grad_pairs)
    if (gp.param != kNoNode && keeps[static_cast<size_t>(gp.param)] && keeps[static_cast<size_t>(gp.grad.node)])
      root[find(static_cast<size_t>(gp.grad.node))] = find(static_cast<size_t>(gp.param));
  std::vector<char> has_param(n, 0);
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (g.node(i).kind == NodeKind::kParameter && keeps[static_cast<size_t>(i)]) has_param[find(static_cast<size_t>(i))] = 1;
  std::vector<char> out(n, 0);
  for (size_t i = 0; i < n; ++i) out[i] = keeps[i] && has_param[find(i)];
  return out;
}

}  // namespace autoshard

#include "planner/cp_cost.h"

#include <map>
#include <string>

#include "cost/compute.h"

namespace autoshard {

namespace {

std::vector<TensorMeta> local_metas(const std::vector<ShardingSpec>& specs, const Mesh& mesh) {
  std::vector<TensorMeta> r;
  r.reserve(specs.size());
  for (const ShardingSpec& s : specs) r.push_back({s.local_shape(mesh), s.meta.dtype});
  return r;
}

}  // namespace

CpAttentionInput cp_attention_input(const Node& x, const Strategy& s, const Mesh& mesh) {
  const bool backward = aten_packet(x.op).ends_with("_backward");
  const size_t k = backward ? 2 : 1;  // (grad_out, q, k, v, ...) or (q, k, v, ...)
  std::vector<TensorMeta> in = local_metas(s.inputs, mesh);
  std::vector<TensorMeta> out = local_metas(s.outputs, mesh);
  CpAttentionInput r;
  r.kind = s.cp.kind;
  r.backward = backward;
  r.causal = x.attr_bool("is_causal", false);
  r.load_balance = s.cp.load_balance;
  r.kv_bytes = static_cast<double>(in.at(k).bytes() + in.at(k + 1).bytes());
  if (backward) r.dkv_bytes = static_cast<double>(out.at(1).bytes() + out.at(2).bytes());
  // Over the whole op every rank meets every key/value chunk: its compute is that of its
  // local queries against the full-length K and V.
  const int64_t p = mesh.dim(s.cp.mesh_dim).size;
  in[k].shape[2] *= p;
  in[k + 1].shape[2] *= p;
  r.compute_us = compute_time_us(x, in, out, mesh.hardware());
  return r;
}

int64_t cp_buffer_bytes(const Node& x, const Strategy& s, const Mesh& mesh) {
  if (x.kind != NodeKind::kOp || !s.cp.active()) return 0;
  return cp_buffer_bytes(cp_attention_input(x, s, mesh), mesh.dim(s.cp.mesh_dim).size);
}

void drop_dominated_cp_kinds(const Node& x, std::vector<Strategy>& strategies, const Mesh& mesh,
                             CommModel model) {
  // Per spec signature (the name without the kind), the CP strategies that carry it.
  std::map<std::string, std::vector<size_t>> pairs;
  std::vector<double> cost(strategies.size(), 0.0);
  std::vector<int64_t> bytes(strategies.size(), 0);
  for (size_t k = 0; k < strategies.size(); ++k) {
    const Strategy& s = strategies[k];
    if (!s.cp.active()) continue;
    cost[k] = node_cost(x, s, mesh, model).total_us();
    bytes[k] = cp_buffer_bytes(x, s, mesh);
    Strategy plain = s;
    plain.cp.kind = CpKind::kRing;
    pairs[plain.name()].push_back(k);
  }
  if (pairs.empty()) return;
  // a dominates b: no worse in time and memory, and better in one (or a ring in a full tie).
  auto dominates = [&](size_t a, size_t b) {
    if (cost[a] > cost[b] || bytes[a] > bytes[b]) return false;
    return cost[a] < cost[b] || bytes[a] < bytes[b] || strategies[a].cp.kind == CpKind::kRing;
  };
  std::vector<char> keep(strategies.size(), 1);
  for (const auto& [key, ks] : pairs)
    for (size_t b : ks)
      for (size_t a : ks)
        if (a != b && keep[a] && dominates(a, b)) keep[b] = 0;
  size_t w = 0;
  for (size_t k = 0; k < strategies.size(); ++k) {
    if (!keep[k]) continue;
    if (w != k) strategies[w] = std::move(strategies[k]);  // never a self-move
    ++w;
  }
  strategies.resize(w);
}

NodeCost node_cost(const Node& x, const Strategy& s, const Mesh& mesh, CommModel model) {
  NodeCost c;
  if (x.kind != NodeKind::kOp) return c;
  if (!s.cp.active()) {
    c.compute_us = compute_time_us(x, local_metas(s.inputs, mesh), local_metas(s.outputs, mesh),
                                   mesh.hardware());
    return c;
  }
  const CpAttentionTime t = cp_attention_time(cp_attention_input(x, s, mesh), mesh, s.cp.mesh_dim, model);
  c.compute_us = t.compute_us;
  c.op_comm_us = t.exposed_us;
  c.transfer_us = t.transfer_us;
  return c;
}

}  // namespace autoshard

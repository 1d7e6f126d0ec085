#include "pipeline/pipeline_stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "planner/overlap.h"

namespace autoshard {

namespace {

constexpr int32_t kUnsetPos = -2000000;
size_t ssz(NodeIdx i) { return static_cast<size_t>(i); }

/// "layers.3" -> true: a layer key ending in a number is a repeated layer.
bool is_repeated_key(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || dot + 1 == key.size()) return false;
  return std::all_of(key.begin() + static_cast<std::ptrdiff_t>(dot) + 1, key.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

/// Positions of the op nodes from their module paths (kUnsetPos where there is none to go by).
void place_by_module(const Graph& g, LayerMap& m) {
  std::map<std::string, int32_t> layer_index;
  std::map<std::string, NodeIdx> first_forward;  // non-layer module -> its first forward op
  NodeIdx first_layer_op = g.size();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.module_path.empty()) continue;
    const std::string key = layer_key(x.module_path);
    if (is_repeated_key(key)) {
      if (x.phase == Phase::kForward && layer_index.try_emplace(key, m.num_layers()).second)
        m.layers.push_back(key);
      if (x.phase == Phase::kForward) first_layer_op = std::min(first_layer_op, i);
    } else if (x.phase == Phase::kForward) {
      first_forward.try_emplace(key, i);
    }
  }
  const int32_t L = m.num_layers();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || x.module_path.empty()) continue;
    const std::string key = layer_key(x.module_path);
    if (auto it = layer_index.find(key); it != layer_index.end()) {
      m.pos[ssz(i)] = it->second;
    } else if (auto f = first_forward.find(key); f != first_forward.end()) {
      m.pos[ssz(i)] = f->second < first_layer_op ? -1 : L;
    }
  }
}

/// Ops left without a position follow their first placed op input (an optimizer update its
/// parameter, below); ops reading placeholders or shared ops only are shared.
void place_by_data(const Graph& g, LayerMap& m) {
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kOp || m.pos[ssz(i)] != kUnsetPos) continue;
    int32_t p = LayerMap::kShared;
    for (const TensorRef& r : x.inputs) {
      const int32_t q = m.pos[ssz(r.node)];
      if (g.node(r.node).kind == NodeKind::kOp && q != LayerMap::kShared && q != kUnsetPos) {
        p = q;
        break;
      }
    }
    m.pos[ssz(i)] = p;
  }
}

/// Placeholders: the position of their users when all agree, else shared.  Shared nodes that
/// no placed node uses (transitively) go to the first stage.
void place_placeholders(const Graph& g, LayerMap& m) {
  const auto uses = g.uses();
  // Positions of the placed users reachable through shared ops, in reverse graph order.
  std::vector<std::set<int32_t>> users(ssz(g.size()));
  for (NodeIdx i = g.size(); i-- > 0;) {
    for (const auto& u : uses[ssz(i)]) {
      const Node& c = g.node(u.consumer);
      if (c.kind == NodeKind::kOutput) continue;
      const int32_t q = m.pos[ssz(u.consumer)];
      if (q == LayerMap::kShared) users[ssz(i)].insert(users[ssz(u.consumer)].begin(), users[ssz(u.consumer)].end());
      else users[ssz(i)].insert(q);
    }
    const Node& x = g.node(i);
    const bool placeholder = x.kind != NodeKind::kOp && x.kind != NodeKind::kOutput;
    if (placeholder) m.pos[ssz(i)] = users[ssz(i)].size() == 1 ? *users[ssz(i)].begin() : LayerMap::kShared;
    if (m.pos[ssz(i)] == LayerMap::kShared && users[ssz(i)].empty()) m.pos[ssz(i)] = -1;
    if (m.pos[ssz(i)] == LayerMap::kShared) m.shared_users[ssz(i)].assign(users[ssz(i)].begin(), users[ssz(i)].end());
  }
}

/// One layer's ops as text (op, phase, metas, attributes): equal for identical layers.
std::vector<std::string> layer_signatures(const Graph& g, const LayerMap& m) {
  std::vector<std::string> sig(m.layers.size());
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t p = m.pos[ssz(i)];
    if (p < 0 || p >= m.num_layers()) continue;
    const Node& x = g.node(i);
    std::string& s = sig[static_cast<size_t>(p)];
    s += fmt::format("{}|{}|{}|", x.op, static_cast<int>(x.kind), static_cast<int>(x.phase));
    for (const TensorMeta& t : x.outputs) s += fmt::format("{}:{},", fmt::join(t.shape, "x"), static_cast<int>(t.dtype));
    for (const TensorRef& r : x.inputs) s += fmt::format("<{}", fmt::join(g.meta(r).shape, "x"));
    s += ";";
  }
  return sig;
}

}  // namespace

LayerMap map_layers(const Graph& g) {
  LayerMap m;
  m.pos.assign(ssz(g.size()), kUnsetPos);
  m.shared_users.assign(ssz(g.size()), {});
  place_by_module(g, m);
  if (m.layers.empty())
    throw std::invalid_argument(fmt::format(
        "graph '{}': pipeline stages need repeated layers (module paths such as layers.0, layers.1), "
        "and it has none", g.name));
  place_by_data(g, m);
  place_placeholders(g, m);
  const std::vector<std::string> sig = layer_signatures(g, m);
  for (size_t k = 1; k < sig.size(); ++k)
    if (sig[k] != sig[0])
      throw std::invalid_argument(fmt::format(
          "graph '{}': pipeline stages need identical repeated layers, and {} differs from {}", g.name,
          m.layers[k], m.layers[0]));
  return m;
}

StageGraph extract_stage(const Graph& g, const LayerMap& m, int32_t lo, int32_t hi) {
  const int32_t L = m.num_layers();
  auto in_range = [&](int32_t p) {
    const int32_t c = std::clamp(p, 0, L - 1);
    return c >= lo && c < hi;
  };
  std::vector<char> inc(ssz(g.size()), 0);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t p = m.pos[ssz(i)];
    if (g.node(i).kind == NodeKind::kOutput) continue;
    if (p != LayerMap::kShared) inc[ssz(i)] = in_range(p);
    else
      for (int32_t q : m.shared_users[ssz(i)]) inc[ssz(i)] = inc[ssz(i)] || in_range(q);
  }
  StageGraph sg;
  sg.graph.name = fmt::format("{}[{}:{}]", g.name, lo, hi);
  std::map<TensorRef, TensorRef> remap;  // full-graph tensor -> stage tensor
  // Received tensors first (placeholders come first in a graph).
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (!inc[ssz(i)]) continue;
    for (const TensorRef& r : g.node(i).inputs) {
      if (inc[ssz(r.node)] || remap.count(r)) continue;
      Node p;
      p.kind = NodeKind::kInput;
      p.name = r.output == 0 ? g.node(r.node).name : fmt::format("{}.{}", g.node(r.node).name, r.output);
      p.outputs = {g.meta(r)};
      p.phase = g.node(r.node).phase;
      remap[r] = {sg.graph.add(std::move(p)), 0};
      sg.origin.push_back(r.node);
      sg.received.push_back(1);
    }
  }
  const auto uses = g.uses();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (!inc[ssz(i)]) continue;
    Node x = g.node(i);
    for (TensorRef& r : x.inputs) r = remap.at(r);
    const NodeIdx j = sg.graph.add(std::move(x));
    for (int32_t k = 0; k < static_cast<int32_t>(g.node(i).outputs.size()); ++k) remap[{i, k}] = {j, k};
    sg.origin.push_back(i);
    sg.received.push_back(0);
    for (const auto& u : uses[ssz(i)]) {
      if (m.pos[ssz(i)] == LayerMap::kShared) break;  // every stage using it has its own copy
      const TensorRef t{j, u.output};
      if (!inc[ssz(u.consumer)] && g.node(u.consumer).kind != NodeKind::kOutput &&
          std::find(sg.sent.begin(), sg.sent.end(), t) == sg.sent.end())
        sg.sent.push_back(t);
    }
  }
  Node out;
  out.kind = NodeKind::kOutput;
  out.name = "output";
  out.inputs = sg.sent;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    if (g.node(i).kind != NodeKind::kOutput) continue;
    out.name = g.node(i).name;
    for (const TensorRef& r : g.node(i).inputs)
      if (inc[ssz(r.node)] && std::find(out.inputs.begin(), out.inputs.end(), remap.at(r)) == out.inputs.end())
        out.inputs.push_back(remap.at(r));
  }
  sg.graph.add(std::move(out));
  sg.origin.push_back(-1);
  sg.received.push_back(0);
  for (const GradPair& gp : g.grad_pairs)
    if (inc[ssz(gp.param)] && remap.count(gp.grad)) sg.graph.grad_pairs.push_back({remap.at({gp.param, 0}).node, remap.at(gp.grad)});
  if (g.loss && inc[ssz(g.loss->node)]) sg.graph.loss = remap.at(*g.loss);
  for (NodeIdx t : g.tangents)
    if (inc[ssz(t)]) sg.graph.tangents.push_back(remap.at({t, 0}).node);
  if (std::string e = sg.graph.validate(); !e.empty())
    throw std::logic_error(fmt::format("pipeline stage [{}, {}) of '{}': {}", lo, hi, g.name, e));
  return sg;
}

bool same_structure(const Graph& a, const Graph& b) {
  if (a.size() != b.size()) return false;
  for (NodeIdx i = 0; i < a.size(); ++i) {
    const Node& x = a.node(i);
    const Node& y = b.node(i);
    if (x.kind != y.kind || x.op != y.op || x.phase != y.phase || x.outputs != y.outputs ||
        x.inputs != y.inputs || x.attrs != y.attrs)
      return false;
  }
  return true;
}

int32_t pp_dim_of(const Mesh& mesh) {
  for (int32_t d = 0; d < mesh.ndim(); ++d)
    if (mesh.dim(d).name == "pp") return d;
  return -1;
}

Mesh stage_mesh(const Mesh& mesh, int32_t drop) {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  for (int32_t d = 0; d < mesh.ndim(); ++d)
    if (d != drop) {
      shape.push_back(mesh.size(d));
      names.push_back(mesh.dim(d).name);
    }
  if (shape.empty()) {  // a 1-D pp mesh: each stage is one device
    shape.push_back(1);
    names.push_back("dp");
  }
  Mesh sub(shape, names, mesh.hardware(), mesh.backend());
  for (int32_t d = 0, k = 0; d < mesh.ndim(); ++d) {
    if (d == drop) continue;
    sub.dim(k).inter_node = mesh.dim(d).inter_node;
    sub.dim(k).busbw_gbps = mesh.dim(d).busbw_gbps;
    sub.dim(k).latency_us = mesh.dim(d).latency_us;
    ++k;
  }
  return sub;
}

}  // namespace autoshard

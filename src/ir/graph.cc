#include "ir/graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

namespace autoshard {

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string_view node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::kInput: return "input";
    case NodeKind::kParameter: return "parameter";
    case NodeKind::kBuffer: return "buffer";
    case NodeKind::kOp: return "op";
    case NodeKind::kOutput: return "output";
  }
  return "?";
}

std::optional<NodeKind> parse_node_kind(std::string_view s) {
  for (NodeKind k : {NodeKind::kInput, NodeKind::kParameter, NodeKind::kBuffer, NodeKind::kOp,
                     NodeKind::kOutput})
    if (node_kind_name(k) == s) return k;
  return std::nullopt;
}

bool is_alias_op(std::string_view op) {
  static constexpr std::string_view kViews[] = {
      "_reshape_alias", "_unsafe_view", "alias",        "as_strided",   "detach",
      "diagonal",       "expand",       "expand_as",    "narrow",       "permute",
      "select.int",     "slice.Tensor", "split.Tensor", "split_with_sizes", "squeeze",
      "squeeze.dim",    "squeeze.dims", "t",            "transpose.int", "unbind.int",
      "unflatten.int",  "unsqueeze",    "view",         "view_as",      "view_as_real",
      "view_as_complex"};
  for (std::string_view v : kViews)
    if (op == v) return true;
  return false;
}

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
  }
  return "?";
}

std::optional<Phase> parse_phase(std::string_view s) {
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer})
    if (phase_name(p) == s) return p;
  return std::nullopt;
}

int64_t Node::attr_int(std::string_view key, int64_t fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* b = std::get_if<bool>(&it->second)) return *b ? 1 : 0;
  if (auto* l = std::get_if<std::vector<int64_t>>(&it->second); l && l->size() == 1)
    return l->front();
  return fallback;
}

double Node::attr_double(std::string_view key, double fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return fallback;
}

bool Node::attr_bool(std::string_view key, bool fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fallback;
  if (auto* v = std::get_if<bool>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i != 0;
  return fallback;
}

std::string Node::attr_string(std::string_view key, std::string_view fallback) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return std::string(fallback);
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return std::string(fallback);
}

std::vector<int64_t> Node::attr_ints(std::string_view key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* i = std::get_if<int64_t>(&it->second)) return {*i};
  return {};
}

NodeIdx Graph::add(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<NodeIdx>(nodes.size() - 1);
}

NodeIdx Graph::add_op(std::string name, std::string op, std::vector<TensorRef> inputs,
                      TensorMeta out, Phase phase, Attrs attrs, std::string module_path) {
  Node n;
  n.name = std::move(name);
  n.kind = NodeKind::kOp;
  n.op = std::move(op);
  n.phase = phase;
  n.inputs = std::move(inputs);
  n.outputs.push_back(std::move(out));
  n.attrs = std::move(attrs);
  n.module_path = std::move(module_path);
  return add(std::move(n));
}

std::optional<NodeIdx> Graph::find(std::string_view name) const {
  for (NodeIdx i = 0; i < size(); ++i)
    if (nodes[static_cast<size_t>(i)].name == name) return i;
  return std::nullopt;
}

std::vector<std::vector<Graph::Use>> Graph::uses() const {
  std::vector<std::vector<Use>> result(nodes.size());
  for (NodeIdx i = 0; i < size(); ++i) {
    const Node& n = node(i);
    for (int32_t s = 0; s < static_cast<int32_t>(n.inputs.size()); ++s) {
      const TensorRef& r = n.inputs[static_cast<size_t>(s)];
      if (r.node < 0 || r.node >= size()) continue;  // invalid graph; validate() reports it
      result[static_cast<size_t>(r.node)].push_back({i, s, r.output});
    }
  }
  return result;
}

std::string Graph::validate() const {
  std::unordered_set<std::string_view> names;
  for (NodeIdx i = 0; i < size(); ++i) {
    const Node& n = node(i);
    if (n.name.empty()) return fmt::format("node #{}: empty name", i);
    if (!names.insert(n.name).second) return fmt::format("node '{}': duplicate name", n.name);
    if (n.kind == NodeKind::kOp && n.op.empty())
      return fmt::format("node '{}': op node without an op", n.name);
    if (n.kind != NodeKind::kOutput && n.outputs.empty())
      return fmt::format("node '{}': produces no tensor", n.name);
    if (n.kind == NodeKind::kOutput && !n.outputs.empty())
      return fmt::format("node '{}': an output node produces no tensors", n.name);
    if ((n.kind == NodeKind::kInput || n.kind == NodeKind::kParameter ||
         n.kind == NodeKind::kBuffer) &&
        !n.inputs.empty())
      return fmt::format("node '{}': a {} takes no inputs", n.name, node_kind_name(n.kind));
    for (const TensorMeta& m : n.outputs)
      for (int64_t d : m.shape)
        if (d < 0) return fmt::format("node '{}': negative dimension {}", n.name, d);
    for (size_t s = 0; s < n.inputs.size(); ++s) {
      const TensorRef& r = n.inputs[s];
      if (r.node < 0 || r.node >= i)
        return fmt::format("node '{}': input {} refers to node #{} which is not earlier", n.name,
                           s, r.node);
      const Node& p = node(r.node);
      if (r.output < 0 || r.output >= static_cast<int32_t>(p.outputs.size()))
        return fmt::format("node '{}': input {} refers to output {} of '{}' which has {}",
                           n.name, s, r.output, p.name, p.outputs.size());
    }
  }
  auto ref_ok = [&](const TensorRef& r) {
    return r.node >= 0 && r.node < size() && r.output >= 0 &&
           r.output < static_cast<int32_t>(node(r.node).outputs.size());
  };
  for (size_t k = 0; k < grad_pairs.size(); ++k) {
    const GradPair& g = grad_pairs[k];
    if (g.param < 0 || g.param >= size())
      return fmt::format("gradient pair {}: parameter #{} does not exist", k, g.param);
    const Node& p = node(g.param);
    if (p.kind != NodeKind::kParameter)
      return fmt::format("gradient pair {}: '{}' is not a parameter (kind {})", k, p.name,
                         node_kind_name(p.kind));
    if (!ref_ok(g.grad))
      return fmt::format("gradient pair of '{}': bad gradient reference (node #{}, output {})",
                         p.name, g.grad.node, g.grad.output);
    if (meta(g.grad).shape != p.out().shape)
      return fmt::format(
          "gradient pair of '{}': gradient '{}' output {} has shape [{}], parameter has [{}]",
          p.name, node(g.grad.node).name, g.grad.output, fmt::join(meta(g.grad).shape, ", "),
          fmt::join(p.out().shape, ", "));
  }
  if (loss && !ref_ok(*loss))
    return fmt::format("loss refers to a missing tensor (node #{}, output {})", loss->node,
                       loss->output);
  for (NodeIdx t : tangents)
    if (t < 0 || t >= size()) return fmt::format("tangent node #{} does not exist", t);
  return {};
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const Node& x : nodes)
    if (x.kind == NodeKind::kParameter) n += x.out().numel();
  return n;
}

}  // namespace autoshard

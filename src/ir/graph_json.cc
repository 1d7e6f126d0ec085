#include "ir/graph_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "ir/file_util.h"
#include "ir/graph_json_value.h"

namespace autoshard {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

/// A location inside the document, kept as a chain of stack frames so that the JSON pointer
/// string is only built when an error is reported.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;              ///< object member name (when index < 0)
  int64_t index = -1;                ///< array index
  const std::string* node = nullptr; ///< name of the node this frame enters, if any

  Path at(std::string_view k) const { return Path{this, k, -1, nullptr}; }
  Path at(size_t i) const { return Path{this, {}, static_cast<int64_t>(i), nullptr}; }

  std::string pointer() const {
    std::string head = parent ? parent->pointer() : std::string();
    if (!parent) return head;
    head += '/';
    if (index >= 0) return head + std::to_string(index);
    for (char c : key) {  // RFC 6901 escaping
      if (c == '~') head += "~0";
      else if (c == '/') head += "~1";
      else head += c;
    }
    return head;
  }
  const std::string* node_name() const {
    for (const Path* p = this; p; p = p->parent)
      if (p->node) return p->node;
    return nullptr;
  }
};

class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  Graph graph(const json& j);

 private:
  [[noreturn]] void fail(const Path& p, std::string_view why) const {
    std::string where = p.pointer();
    if (where.empty()) where = "top level";
    if (const std::string* n = p.node_name()) where += fmt::format(" (node '{}')", *n);
    throw std::runtime_error(one_line(fmt::format("{}: {}: {}", origin_, where, why)));
  }

  static std::string describe(const json& v) {
    if (v.is_number_float()) return fmt::format("number {}", v.dump());
    if (v.is_number()) return fmt::format("integer {}", v.dump());
    return std::string(v.type_name());
  }

  void expect_object(const json& v, const Path& p) const {
    if (!v.is_object()) fail(p, fmt::format("expected an object, got {}", describe(v)));
  }
  void expect_array(const json& v, const Path& p) const {
    if (!v.is_array()) fail(p, fmt::format("expected an array, got {}", describe(v)));
  }
  /// Unknown members are errors (they are usually typos); members starting with '_' are free
  /// for comments and tool-specific extras.
  void check_keys(const json& obj, const Path& p,
                  std::initializer_list<std::string_view> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const std::string& k = it.key();
      if (!k.empty() && k[0] == '_') continue;
      bool ok = false;
      for (std::string_view a : allowed) ok = ok || a == k;
      if (!ok) fail(p.at(k), "unknown field");
    }
  }
  const json& field(const json& obj, const Path& p, std::string_view key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(p, fmt::format("missing field '{}'", key));
    return *it;
  }
  const json* optional_field(const json& obj, std::string_view key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  std::string string(const json& v, const Path& p) const {
    if (!v.is_string()) fail(p, fmt::format("expected a string, got {}", describe(v)));
    return v.get<std::string>();
  }
  int64_t integer(const json& v, const Path& p) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(p, fmt::format("integer {} out of range", v.dump()));
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (!v.is_number_integer()) fail(p, fmt::format("expected an integer, got {}", describe(v)));
    return v.get<int64_t>();
  }

  TensorMeta tensor_meta(const json& v, const Path& p) const;
  AttrValue attr_value(const json& v, const Path& p) const;
  /// Resolves a tensor reference: "name" (output 0) or {"node": name, "output": k}.  The node
  /// must be one of the first `limit` nodes (earlier than the node being read).
  TensorRef ref(const Graph& g, const json& v, const Path& p, NodeIdx limit) const;
  Node node(const Graph& g, const json& v, const Path& p, NodeIdx index) const;

  std::string_view origin_;
  std::unordered_map<std::string, NodeIdx> index_;  ///< node name -> position in "nodes"
};

TensorMeta Reader::tensor_meta(const json& v, const Path& p) const {
  expect_object(v, p);
  // "none": true marks an output the op did not produce (Python None, e.g. a masked-off
  // gradient of convolution_backward); exporters give it shape [0], so it is a zero-byte
  // tensor and the flag needs no storage.
  check_keys(v, p, {"shape", "dtype", "none"});
  if (const json* none = optional_field(v, "none"); none && !none->is_boolean())
    fail(p.at("none"), fmt::format("expected true or false, got {}", describe(*none)));
  TensorMeta m;
  Path ps = p.at("shape");
  const json& shape = field(v, p, "shape");
  expect_array(shape, ps);
  // The product of the non-zero dims is bounded (not only numel, which a single 0 makes 0),
  // so products over any subset of dims stay in range too.
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = integer(shape[i], ps.at(i));
    if (d < 0) fail(ps.at(i), fmt::format("negative dimension {}", d));
    // Overflow-free: extent * d > limit, tested by division (extent >= 1).
    if (d > 0 && extent > kMaxTensorElements / d)
      fail(ps.at(i), fmt::format("tensor too large: more than 2^48 elements (dimension {} is {})",
                                 i, d));
    if (d > 0) extent *= d;
    m.shape.push_back(d);
  }
  Path pd = p.at("dtype");
  std::string dt = string(field(v, p, "dtype"), pd);
  auto t = parse_dtype(dt);
  if (!t) fail(pd, fmt::format("unknown dtype '{}' (expected f32, bf16, f16, f8, i64, i32 or bool)", dt));
  m.dtype = *t;
  return m;
}

AttrValue Reader::attr_value(const json& v, const Path& p) const {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return integer(v, p);
  if (v.is_number_float()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::vector<int64_t> r;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        fail(p.at(i), fmt::format("attribute lists hold integers only, got {}", describe(v[i])));
      r.push_back(integer(v[i], p.at(i)));
    }
    return r;
  }
  if (v.is_object()) {
    // Non-finite floats, which JSON cannot spell: {"float": "inf" | "-inf" | "nan"}.
    check_keys(v, p, {"float"});
    Path pf = p.at("float");
    std::string s = string(field(v, p, "float"), pf);
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    fail(pf, fmt::format("expected \"inf\", \"-inf\" or \"nan\", got '{}'", s));
  }
  fail(p, fmt::format("unsupported attribute value {} (expected a bool, number, string or list "
                      "of integers)", describe(v)));
}

TensorRef Reader::ref(const Graph& g, const json& v, const Path& p, NodeIdx limit) const {
  std::string name;
  int64_t output = 0;
  Path pn = p;
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object()) {
    check_keys(v, p, {"node", "output"});
    pn = p.at("node");
    name = string(field(v, p, "node"), pn);
    if (const json* o = optional_field(v, "output")) {
      output = integer(*o, p.at("output"));
      if (output < 0) fail(p.at("output"), fmt::format("negative output index {}", output));
    }
  } else {
    fail(p, fmt::format("expected a node name or {{\"node\": name, \"output\": k}}, got {}",
                        describe(v)));
  }
  auto it = index_.find(name);
  if (it == index_.end()) fail(pn, fmt::format("refers to unknown node '{}'", name));
  NodeIdx idx = it->second;
  if (idx >= limit) {
    if (idx == limit) fail(pn, fmt::format("node '{}' refers to itself", name));
    fail(pn, fmt::format("refers to node '{}' defined later at /nodes/{} (nodes must be listed "
                         "in topological order)", name, idx));
  }
  const Node& src = g.node(idx);
  if (output >= static_cast<int64_t>(src.outputs.size()))
    fail(p, fmt::format("refers to output {} of '{}', which has {} output{}", output, name,
                        src.outputs.size(), src.outputs.size() == 1 ? "" : "s"));
  return TensorRef{idx, static_cast<int32_t>(output)};
}

Node Reader::node(const Graph& g, const json& v, const Path& p, NodeIdx index) const {
  check_keys(v, p,
             {"name", "kind", "op", "phase", "inputs", "attrs", "outputs", "module", "source"});
  Node n;
  n.name = v["name"].get<std::string>();  // checked by the first pass
  Path pk = p.at("kind");
  std::string kind = string(field(v, p, "kind"), pk);
  auto k = parse_node_kind(kind);
  if (!k)
    fail(pk, fmt::format("unknown kind '{}' (expected input, parameter, buffer, op or output)",
                         kind));
  n.kind = *k;
  if (n.kind == NodeKind::kOp) {
    n.op = string(field(v, p, "op"), p.at("op"));
    if (n.op.empty()) fail(p.at("op"), "empty op name");
  } else if (const json* op = optional_field(v, "op")) {
    n.op = string(*op, p.at("op"));
  }
  if (const json* ph = optional_field(v, "phase")) {
    std::string s = string(*ph, p.at("phase"));
    auto phase = parse_phase(s);
    if (!phase)
      fail(p.at("phase"),
           fmt::format("unknown phase '{}' (expected forward, backward or optimizer)", s));
    n.phase = *phase;
  }
  if (const json* in = optional_field(v, "inputs")) {
    Path pi = p.at("inputs");
    expect_array(*in, pi);
    if (!in->empty() && (n.kind == NodeKind::kInput || n.kind == NodeKind::kParameter ||
                         n.kind == NodeKind::kBuffer))
      fail(pi, fmt::format("a {} node takes no inputs", kind));
    for (size_t s = 0; s < in->size(); ++s) n.inputs.push_back(ref(g, (*in)[s], pi.at(s), index));
  }
  if (const json* at = optional_field(v, "attrs")) {
    Path pa = p.at("attrs");
    expect_object(*at, pa);
    for (auto it = at->begin(); it != at->end(); ++it) {
      if (it->is_null()) continue;  // Python None: the attribute is absent
      n.attrs.emplace(it.key(), attr_value(*it, pa.at(it.key())));
    }
  }
  const json* outs = optional_field(v, "outputs");
  if (n.kind == NodeKind::kOutput) {
    if (outs && !(outs->is_array() && outs->empty()))
      fail(p.at("outputs"), "an output node produces no tensors");
  } else {
    if (!outs) fail(p, "missing field 'outputs'");
    Path po = p.at("outputs");
    expect_array(*outs, po);
    if (outs->empty()) fail(po, "a node must produce at least one tensor");
    for (size_t i = 0; i < outs->size(); ++i)
      n.outputs.push_back(tensor_meta((*outs)[i], po.at(i)));
  }
  if (const json* m = optional_field(v, "module")) n.module_path = string(*m, p.at("module"));
  if (const json* s = optional_field(v, "source")) n.source = string(*s, p.at("source"));
  return n;
}

Graph Reader::graph(const json& j) {
  Path root;
  expect_object(j, root);
  check_keys(j, root, {"format", "version", "name", "nodes", "grad_pairs", "loss", "tangents"});
  std::string format = string(field(j, root, "format"), root.at("format"));
  if (format != kGraphFormatName)
    fail(root.at("format"), fmt::format("not an autoshard graph: format '{}', expected '{}'",
                                        format, kGraphFormatName));
  int64_t version = integer(field(j, root, "version"), root.at("version"));
  if (version != kGraphFormatVersion)
    fail(root.at("version"), fmt::format("unsupported version {} (this build reads version {})",
                                         version, kGraphFormatVersion));
  Graph g;
  if (const json* name = optional_field(j, "name")) g.name = string(*name, root.at("name"));

  Path pn = root.at("nodes");
  const json& nodes = field(j, root, "nodes");
  expect_array(nodes, pn);
  if (nodes.size() > static_cast<size_t>(std::numeric_limits<NodeIdx>::max()))
    fail(pn, "too many nodes");
  // First pass: names, so that references to later nodes get a precise message.
  for (size_t i = 0; i < nodes.size(); ++i) {
    Path p = pn.at(i);
    expect_object(nodes[i], p);
    std::string name = string(field(nodes[i], p, "name"), p.at("name"));
    if (name.empty()) fail(p.at("name"), "empty node name");
    auto [it, inserted] = index_.emplace(name, static_cast<NodeIdx>(i));
    if (!inserted)
      fail(p.at("name"),
           fmt::format("duplicate node name '{}' (first defined at /nodes/{})", name, it->second));
  }
  g.nodes.reserve(nodes.size());
  int64_t total_bytes = 0;  // each tensor is <= 2^51 bytes, so the sum is checked before overflow
  for (size_t i = 0; i < nodes.size(); ++i) {
    Path p = pn.at(i);
    const std::string& name = nodes[i]["name"].get_ref<const std::string&>();
    p.node = &name;
    g.nodes.push_back(node(g, nodes[i], p, static_cast<NodeIdx>(i)));
    for (const TensorMeta& m : g.nodes.back().outputs) {
      total_bytes += m.bytes();
      if (total_bytes > kMaxGraphBytes)
        fail(p.at("outputs"), "graph too large: its tensors hold more than 2^56 bytes in total");
    }
  }

  if (const json* gp = optional_field(j, "grad_pairs")) {
    Path pg = root.at("grad_pairs");
    expect_array(*gp, pg);
    for (size_t i = 0; i < gp->size(); ++i) {
      Path p = pg.at(i);
      const json& e = (*gp)[i];
      expect_object(e, p);
      check_keys(e, p, {"param", "grad"});
      Path pp = p.at("param");
      std::string param = string(field(e, p, "param"), pp);
      auto it = index_.find(param);
      if (it == index_.end()) fail(pp, fmt::format("refers to unknown node '{}'", param));
      if (g.node(it->second).kind != NodeKind::kParameter)
        fail(pp, fmt::format("'{}' is not a parameter (kind {})", param,
                             node_kind_name(g.node(it->second).kind)));
      GradPair pair;
      pair.param = it->second;
      pair.grad = ref(g, field(e, p, "grad"), p.at("grad"), g.size());
      g.grad_pairs.push_back(pair);
    }
  }
  if (const json* loss = optional_field(j, "loss"); loss && !loss->is_null())
    g.loss = ref(g, *loss, root.at("loss"), g.size());
  if (const json* tangents = optional_field(j, "tangents")) {
    const Path pt = root.at("tangents");
    if (!tangents->is_array()) fail(pt, "expected an array of node names");
    for (size_t k = 0; k < tangents->size(); ++k)
      g.tangents.push_back(ref(g, (*tangents)[k], pt.at(k), g.size()).node);
  }

  if (std::string err = g.validate(); !err.empty())
    throw std::runtime_error(one_line(fmt::format("{}: invalid graph: {}", origin_, err)));
  return g;
}

// ---- writer ----------------------------------------------------------------------------

ojson ref_json(const Graph& g, TensorRef r) {
  const std::string& name = g.node(r.node).name;
  if (r.output == 0) return name;
  ojson o = ojson::object();
  o["node"] = name;
  o["output"] = r.output;
  return o;
}

ojson attr_json(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> ojson {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>) {
          if (std::isfinite(x)) return x;
          ojson o = ojson::object();
          o["float"] = std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
          return o;
        } else {
          return x;
        }
      },
      v);
}

ojson node_json(const Graph& g, const Node& n) {
  ojson o = ojson::object();
  o["name"] = n.name;
  o["kind"] = node_kind_name(n.kind);
  if (!n.op.empty()) o["op"] = n.op;
  if (n.phase != Phase::kForward) o["phase"] = phase_name(n.phase);
  if (!n.inputs.empty()) {
    ojson in = ojson::array();
    for (const TensorRef& r : n.inputs) in.push_back(ref_json(g, r));
    o["inputs"] = std::move(in);
  }
  if (!n.attrs.empty()) {
    ojson at = ojson::object();  // Attrs is a sorted map, so the order is deterministic
    for (const auto& [k, v] : n.attrs) at[k] = attr_json(v);
    o["attrs"] = std::move(at);
  }
  if (!n.outputs.empty()) {
    ojson outs = ojson::array();
    for (const TensorMeta& m : n.outputs) {
      ojson t = ojson::object();
      t["shape"] = m.shape;
      t["dtype"] = dtype_name(m.dtype);
      outs.push_back(std::move(t));
    }
    o["outputs"] = std::move(outs);
  }
  if (!n.module_path.empty()) o["module"] = n.module_path;
  if (!n.source.empty()) o["source"] = n.source;
  return o;
}

}  // namespace

Graph read_graph_json(std::string_view text, std::string_view origin) {
  json j = parse_json_text(text, origin);
  return read_graph_json_value(j, origin);
}

Graph read_graph_json_value(const nlohmann::json& j, std::string_view origin) {
  Reader r(origin);
  return r.graph(j);
}

Graph load_graph_file(const std::string& path) {
  return read_graph_json(read_text_file(path), path);
}

std::string write_graph_json(const Graph& g) {
  if (std::string err = g.validate(); !err.empty())
    throw std::runtime_error(one_line(fmt::format("cannot write graph '{}': {}", g.name, err)));
  try {
    std::string out = fmt::format("{{\"format\": {}, \"version\": {}, \"name\": {},\n",
                                  ojson(kGraphFormatName).dump(), kGraphFormatVersion,
                                  ojson(g.name).dump());
    out += " \"nodes\": [";
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      out += i == 0 ? "\n  " : ",\n  ";
      out += node_json(g, g.nodes[i]).dump();
    }
    out += g.nodes.empty() ? "]" : "\n ]";
    if (!g.grad_pairs.empty()) {
      out += ",\n \"grad_pairs\": [";
      for (size_t i = 0; i < g.grad_pairs.size(); ++i) {
        const GradPair& p = g.grad_pairs[i];
        ojson o = ojson::object();
        o["param"] = g.node(p.param).name;
        o["grad"] = ref_json(g, p.grad);
        out += i == 0 ? "\n  " : ",\n  ";
        out += o.dump();
      }
      out += "\n ]";
    }
    if (g.loss) out += fmt::format(",\n \"loss\": {}", ref_json(g, *g.loss).dump());
    if (!g.tangents.empty()) {
      ojson t = ojson::array();
      for (NodeIdx i : g.tangents) t.push_back(g.node(i).name);
      out += fmt::format(",\n \"tangents\": {}", t.dump());
    }
    out += "}\n";
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(one_line(fmt::format("cannot write graph '{}': {}", g.name,
                                                  e.what())));
  }
}

void save_graph_file(const Graph& g, const std::string& path) {
  write_file_atomic(path, write_graph_json(g));
}

}  // namespace autoshard

#pragma once
/// The graph reader, written once over a document view so that it reads both parsed JSON text
/// (graph_json.cc) and a Python graph dict walked in place (src/python/graph_dict.cc): the same
/// checks, the same one-line messages, the same Graph.  Walking the dict in place spares the
/// hand-off an intermediate JSON tree (building it, then freeing ~10^5 small allocations: half
/// of the hand-off's time on LLaMA-3 8B, docs/benchmarks.md "Issue 24, item 4").
///
/// A view V is a cheap copyable handle on one value of the document, with
///   bool is_object(), is_array(), is_string(), is_boolean(), is_null();
///   bool is_integer()  -- an integer (the reader checks its range with int64());
///   bool is_float()    -- a finite floating-point number;
///   bool int64(int64_t& out)    -- false when the integer does not fit int64;
///   bool boolean(); double number();
///   bool text(std::string_view& out)  -- false when the string is not valid UTF-8;
///   size_t size(); V at(size_t i)     -- arrays;
///   std::optional<V> find(std::string_view key)  -- objects;
///   void members(F f, B bad)  -- objects: f(std::string_view key, V value) in document order;
///                                bad(std::string_view why) for a key the format cannot hold;
///   std::string describe()  -- "number 1.5", "integer 3", "string", "object", ... (messages);
///   std::string dump()      -- a number as JSON spells it (messages).
/// Values a view cannot express as JSON (a Python set, a non-finite float) are none of the
/// kinds above; the reader's messages then name them through describe().
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/file_util.h"
#include "ir/graph.h"
#include "ir/graph_json.h"

namespace autoshard::graph_reader {

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

/// Throws std::runtime_error "<origin>: <where>: <why>" on one line.
[[noreturn]] void fail_at(std::string_view origin, const Path& p, std::string_view why);

template <class V>
class Reader {
 public:
  explicit Reader(std::string_view origin) : origin_(origin) {}

  Graph graph(const V& j);

 private:
  [[noreturn]] void fail(const Path& p, std::string_view why) const { fail_at(origin_, p, why); }

  void expect_object(const V& v, const Path& p) const {
    if (!v.is_object()) fail(p, fmt::format("expected an object, got {}", v.describe()));
  }
  void expect_array(const V& v, const Path& p) const {
    if (!v.is_array()) fail(p, fmt::format("expected an array, got {}", v.describe()));
  }
  /// Unknown members are errors (they are usually typos); members starting with '_' are free
  /// for comments and tool-specific extras.
  void check_keys(const V& obj, const Path& p,
                  std::initializer_list<std::string_view> allowed) const {
    obj.members(
        [&](std::string_view k, const V&) {
          if (!k.empty() && k[0] == '_') return;
          for (std::string_view a : allowed)
            if (a == k) return;
          fail(p.at(k), "unknown field");
        },
        [&](std::string_view why) { fail(p, why); });
  }
  /// The members of `obj` named in `names` (in that order; nullopt when absent), with unknown
  /// members rejected as check_keys does, in one pass: looking each field up on its own would
  /// scan a Python dict once per field.
  template <size_t N>
  std::array<std::optional<V>, N> fields(const V& obj, const Path& p,
                                         const std::string_view (&names)[N]) const {
    std::array<std::optional<V>, N> out;
    obj.members(
        [&](std::string_view k, const V& value) {
          for (size_t i = 0; i < N; ++i)
            if (names[i] == k) {
              out[i] = value;
              return;
            }
          if (!k.empty() && k[0] == '_') return;
          fail(p.at(k), "unknown field");
        },
        [&](std::string_view why) { fail(p, why); });
    return out;
  }
  V required(const std::optional<V>& v, const Path& p, std::string_view key) const {
    if (!v) fail(p, fmt::format("missing field '{}'", key));
    return *v;
  }
  V field(const V& obj, const Path& p, std::string_view key) const {
    std::optional<V> v = obj.find(key);
    if (!v) fail(p, fmt::format("missing field '{}'", key));
    return *v;
  }
  std::string_view string_view(const V& v, const Path& p) const {
    if (!v.is_string()) fail(p, fmt::format("expected a string, got {}", v.describe()));
    std::string_view s;
    if (!v.text(s)) fail(p, "string is not valid UTF-8");
    return s;
  }
  std::string string(const V& v, const Path& p) const { return std::string(string_view(v, p)); }
  int64_t integer(const V& v, const Path& p) const {
    if (!v.is_integer()) fail(p, fmt::format("expected an integer, got {}", v.describe()));
    int64_t out = 0;
    if (!v.int64(out)) fail(p, fmt::format("integer {} out of range", v.dump()));
    return out;
  }

  TensorMeta tensor_meta(const V& v, const Path& p) const;
  AttrValue attr_value(const V& v, const Path& p) const;
  /// Resolves a tensor reference: "name" (output 0) or {"node": name, "output": k}.  The node
  /// must be one of the first `limit` nodes (earlier than the node being read).
  TensorRef ref(const Graph& g, const V& v, const Path& p, NodeIdx limit) const;
  Node node(const Graph& g, const V& v, const Path& p, NodeIdx index) const;
  void grad_pairs(Graph& g, const V& gp, const Path& pg) const;
  void islands(Graph& g, const V& v, const Path& pi) const;

  std::string_view origin_;
  /// Looked up by string_view: references are the bulk of a graph, and need no copy.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  /// node name -> position in "nodes"
  std::unordered_map<std::string, NodeIdx, NameHash, std::equal_to<>> index_;
  std::vector<const std::string*> names_;           ///< per node, its name (a key of index_)
};

template <class V>
TensorMeta Reader<V>::tensor_meta(const V& v, const Path& p) const {
  expect_object(v, p);
  // "none": true marks an output the op did not produce (Python None, e.g. a masked-off
  // gradient of convolution_backward); exporters give it shape [0], so it is a zero-byte
  // tensor and the flag needs no storage.
  const auto [shape_v, dtype_v, none] = fields(v, p, {"shape", "dtype", "none"});
  if (none && !none->is_boolean())
    fail(p.at("none"), fmt::format("expected true or false, got {}", none->describe()));
  TensorMeta m;
  Path ps = p.at("shape");
  V shape = required(shape_v, p, "shape");
  expect_array(shape, ps);
  // The product of the non-zero dims is bounded (not only numel, which a single 0 makes 0),
  // so products over any subset of dims stay in range too.
  int64_t extent = 1;
  const size_t rank = shape.size();
  m.shape.reserve(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t d = integer(shape.at(i), ps.at(i));
    if (d < 0) fail(ps.at(i), fmt::format("negative dimension {}", d));
    // Overflow-free: extent * d > limit, tested by division (extent >= 1).
    if (d > 0 && extent > kMaxTensorElements / d)
      fail(ps.at(i), fmt::format("tensor too large: more than 2^48 elements (dimension {} is {})",
                                 i, d));
    if (d > 0) extent *= d;
    m.shape.push_back(d);
  }
  Path pd = p.at("dtype");
  std::string_view dt = string_view(required(dtype_v, p, "dtype"), pd);
  auto t = parse_dtype(dt);
  if (!t) fail(pd, fmt::format("unknown dtype '{}' (expected f32, bf16, f16, f8, i64, i32, bool, c64 or c128)", dt));
  m.dtype = *t;
  return m;
}

template <class V>
AttrValue Reader<V>::attr_value(const V& v, const Path& p) const {
  if (v.is_boolean()) return v.boolean();
  if (v.is_integer()) return integer(v, p);
  if (v.is_float()) return v.number();
  if (v.is_string()) return string(v, p);
  if (v.is_array()) {
    std::vector<int64_t> r;
    const size_t n = v.size();
    r.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      V e = v.at(i);
      if (!e.is_integer())
        fail(p.at(i), fmt::format("attribute lists hold integers only, got {}", e.describe()));
      r.push_back(integer(e, p.at(i)));
    }
    return r;
  }
  if (v.is_object()) {
    // Non-finite floats, which JSON cannot spell: {"float": "inf" | "-inf" | "nan"}.
    check_keys(v, p, {"float"});
    Path pf = p.at("float");
    std::string_view s = string_view(field(v, p, "float"), pf);
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    fail(pf, fmt::format("expected \"inf\", \"-inf\" or \"nan\", got '{}'", s));
  }
  fail(p, fmt::format("unsupported attribute value {} (expected a bool, number, string or list "
                      "of integers)", v.describe()));
}

template <class V>
TensorRef Reader<V>::ref(const Graph& g, const V& v, const Path& p, NodeIdx limit) const {
  std::string_view name;
  int64_t output = 0;
  Path pn = p;
  if (v.is_string()) {
    name = string_view(v, p);
  } else if (v.is_object()) {
    const auto [node_v, output_v] = fields(v, p, {"node", "output"});
    pn = p.at("node");
    name = string_view(required(node_v, p, "node"), pn);
    if (const std::optional<V>& o = output_v) {
      output = integer(*o, p.at("output"));
      if (output < 0) fail(p.at("output"), fmt::format("negative output index {}", output));
    }
  } else {
    fail(p, fmt::format("expected a node name or {{\"node\": name, \"output\": k}}, got {}",
                        v.describe()));
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

template <class V>
Node Reader<V>::node(const Graph& g, const V& v, const Path& p, NodeIdx index) const {
  const auto [name_v, kind_v, op_v, phase_v, inputs_v, attrs_v, outputs_v, module_v, source_v] =
      fields(v, p, {"name", "kind", "op", "phase", "inputs", "attrs", "outputs", "module",
                    "source"});
  Node n;
  n.name = *names_[static_cast<size_t>(index)];  // checked by the first pass
  Path pk = p.at("kind");
  std::string_view kind = string_view(required(kind_v, p, "kind"), pk);
  auto k = parse_node_kind(kind);
  if (!k)
    fail(pk, fmt::format("unknown kind '{}' (expected input, parameter, buffer, op or output)",
                         kind));
  n.kind = *k;
  if (n.kind == NodeKind::kOp) {
    n.op = string(required(op_v, p, "op"), p.at("op"));
    if (n.op.empty()) fail(p.at("op"), "empty op name");
  } else if (const std::optional<V>& op = op_v) {
    n.op = string(*op, p.at("op"));
  }
  if (const std::optional<V>& ph = phase_v) {
    std::string_view s = string_view(*ph, p.at("phase"));
    auto phase = parse_phase(s);
    if (!phase)
      fail(p.at("phase"),
           fmt::format("unknown phase '{}' (expected forward, backward or optimizer)", s));
    n.phase = *phase;
  }
  if (const std::optional<V>& in = inputs_v) {
    Path pi = p.at("inputs");
    expect_array(*in, pi);
    const size_t count = in->size();
    if (count > 0 && (n.kind == NodeKind::kInput || n.kind == NodeKind::kParameter ||
                      n.kind == NodeKind::kBuffer))
      fail(pi, fmt::format("a {} node takes no inputs", kind));
    n.inputs.reserve(count);
    for (size_t s = 0; s < count; ++s) n.inputs.push_back(ref(g, in->at(s), pi.at(s), index));
  }
  if (const std::optional<V>& at = attrs_v) {
    Path pa = p.at("attrs");
    expect_object(*at, pa);
    at->members(
        [&](std::string_view key, const V& value) {
          if (value.is_null()) return;  // Python None: the attribute is absent
          n.attrs.emplace(std::string(key), attr_value(value, pa.at(key)));
        },
        [&](std::string_view why) { fail(pa, why); });
  }
  const std::optional<V>& outs = outputs_v;
  if (n.kind == NodeKind::kOutput) {
    if (outs && !(outs->is_array() && outs->size() == 0))
      fail(p.at("outputs"), "an output node produces no tensors");
  } else {
    if (!outs) fail(p, "missing field 'outputs'");
    Path po = p.at("outputs");
    expect_array(*outs, po);
    const size_t count = outs->size();
    if (count == 0) fail(po, "a node must produce at least one tensor");
    n.outputs.reserve(count);
    for (size_t i = 0; i < count; ++i) n.outputs.push_back(tensor_meta(outs->at(i), po.at(i)));
  }
  if (module_v) n.module_path = string(*module_v, p.at("module"));
  if (source_v) n.source = string(*source_v, p.at("source"));
  return n;
}

template <class V>
void Reader<V>::grad_pairs(Graph& g, const V& gp, const Path& pg) const {
  expect_array(gp, pg);
  const size_t count = gp.size();
  for (size_t i = 0; i < count; ++i) {
    Path p = pg.at(i);
    V e = gp.at(i);
    expect_object(e, p);
    check_keys(e, p, {"param", "grad"});
    Path pp = p.at("param");
    std::string_view param = string_view(field(e, p, "param"), pp);
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

template <class V>
void Reader<V>::islands(Graph& g, const V& v, const Path& pi) const {
  expect_array(v, pi);
  const size_t count = v.size();
  for (size_t i = 0; i < count; ++i) {
    const Path p = pi.at(i);
    const V e = v.at(i);
    expect_object(e, p);
    const auto [module_v, sources_v] = fields(e, p, {"module", "sources"});
    EagerIsland island;
    island.module = string(required(module_v, p, "module"), p.at("module"));
    if (sources_v) {
      const Path ps = p.at("sources");
      expect_array(*sources_v, ps);
      const size_t n = sources_v->size();
      for (size_t k = 0; k < n; ++k) island.sources.push_back(string(sources_v->at(k), ps.at(k)));
    }
    g.islands.push_back(std::move(island));
  }
}

template <class V>
Graph Reader<V>::graph(const V& j) {
  Path root;
  expect_object(j, root);
  check_keys(j, root,
             {"format", "version", "name", "nodes", "grad_pairs", "loss", "tangents", "islands"});
  std::string_view format = string_view(field(j, root, "format"), root.at("format"));
  if (format != kGraphFormatName)
    fail(root.at("format"), fmt::format("not an autoshard graph: format '{}', expected '{}'",
                                        format, kGraphFormatName));
  int64_t version = integer(field(j, root, "version"), root.at("version"));
  if (version != kGraphFormatVersion)
    fail(root.at("version"), fmt::format("unsupported version {} (this build reads version {})",
                                         version, kGraphFormatVersion));
  Graph g;
  if (std::optional<V> name = j.find("name")) g.name = string(*name, root.at("name"));

  Path pn = root.at("nodes");
  V nodes = field(j, root, "nodes");
  expect_array(nodes, pn);
  const size_t count = nodes.size();
  if (count > static_cast<size_t>(std::numeric_limits<NodeIdx>::max()))
    fail(pn, "too many nodes");
  // First pass: names, so that references to later nodes get a precise message.
  index_.reserve(count);
  names_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Path p = pn.at(i);
    V node_v = nodes.at(i);
    expect_object(node_v, p);
    std::string_view name = string_view(field(node_v, p, "name"), p.at("name"));
    if (name.empty()) fail(p.at("name"), "empty node name");
    auto [it, inserted] = index_.emplace(std::string(name), static_cast<NodeIdx>(i));
    if (!inserted)
      fail(p.at("name"),
           fmt::format("duplicate node name '{}' (first defined at /nodes/{})", name, it->second));
    names_.push_back(&it->first);
  }
  g.nodes.reserve(count);
  int64_t total_bytes = 0;  // each tensor is <= 2^51 bytes, so the sum is checked before overflow
  for (size_t i = 0; i < count; ++i) {
    Path p = pn.at(i);
    p.node = names_[i];
    g.nodes.push_back(node(g, nodes.at(i), p, static_cast<NodeIdx>(i)));
    for (const TensorMeta& m : g.nodes.back().outputs) {
      total_bytes += m.bytes();
      if (total_bytes > kMaxGraphBytes)
        fail(p.at("outputs"), "graph too large: its tensors hold more than 2^56 bytes in total");
    }
  }

  if (std::optional<V> gp = j.find("grad_pairs")) grad_pairs(g, *gp, root.at("grad_pairs"));
  if (std::optional<V> loss = j.find("loss"); loss && !loss->is_null())
    g.loss = ref(g, *loss, root.at("loss"), g.size());
  if (std::optional<V> tangents = j.find("tangents")) {
    const Path pt = root.at("tangents");
    if (!tangents->is_array()) fail(pt, "expected an array of node names");
    const size_t n = tangents->size();
    for (size_t k = 0; k < n; ++k)
      g.tangents.push_back(ref(g, tangents->at(k), pt.at(k), g.size()).node);
  }
  if (std::optional<V> isl = j.find("islands")) islands(g, *isl, root.at("islands"));

  if (std::string err = g.validate(); !err.empty())
    throw std::runtime_error(one_line(fmt::format("{}: invalid graph: {}", origin_, err)));
  return g;
}

}  // namespace autoshard::graph_reader

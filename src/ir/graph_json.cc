#include "ir/graph_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include <nlohmann/json.hpp>

#include "ir/file_util.h"
#include "ir/graph_reader.h"

namespace autoshard {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

/// The graph reader's view (ir/graph_reader.h) of a parsed JSON value.
class JsonView {
 public:
  explicit JsonView(const json& j) : j_(&j) {}

  bool is_object() const { return j_->is_object(); }
  bool is_array() const { return j_->is_array(); }
  bool is_string() const { return j_->is_string(); }
  bool is_boolean() const { return j_->is_boolean(); }
  bool is_null() const { return j_->is_null(); }
  bool is_integer() const { return j_->is_number_integer(); }
  bool is_float() const { return j_->is_number_float(); }
  bool int64(int64_t& out) const {
    if (j_->is_number_unsigned()) {
      uint64_t u = j_->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      out = static_cast<int64_t>(u);
      return true;
    }
    out = j_->get<int64_t>();
    return true;
  }
  bool boolean() const { return j_->get<bool>(); }
  double number() const { return j_->get<double>(); }
  bool text(std::string_view& out) const {
    out = j_->get_ref<const std::string&>();
    return true;  // the parser has checked the encoding
  }
  size_t size() const { return j_->size(); }
  JsonView at(size_t i) const { return JsonView((*j_)[i]); }
  std::optional<JsonView> find(std::string_view key) const {
    auto it = j_->find(key);
    if (it == j_->end()) return std::nullopt;
    return JsonView(*it);
  }
  template <class F, class Bad>
  void members(F&& f, Bad&& /*bad: JSON keys are always strings*/) const {
    for (auto it = j_->begin(); it != j_->end(); ++it) f(std::string_view(it.key()), JsonView(*it));
  }
  std::string describe() const {
    if (j_->is_number_float()) return fmt::format("number {}", j_->dump());
    if (j_->is_number()) return fmt::format("integer {}", j_->dump());
    return std::string(j_->type_name());
  }
  std::string dump() const { return j_->dump(); }

 private:
  const json* j_;
};

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
  return graph_reader::Reader<JsonView>(origin).graph(JsonView(j));
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
    if (!g.islands.empty()) {
      ojson a = ojson::array();
      for (const EagerIsland& island : g.islands)
        a.push_back({{"module", island.module}, {"sources", island.sources}});
      out += fmt::format(",\n \"islands\": {}", a.dump());
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

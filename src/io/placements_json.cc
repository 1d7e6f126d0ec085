#include "io/placements_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ir/file_util.h"

namespace autoshard {

std::string output_spec_string(const Strategy& s) {
  if (s.outputs.size() == 1) return s.outputs[0].to_string();
  std::string r = "(";
  for (size_t k = 0; k < s.outputs.size(); ++k) r += (k ? ", " : "") + s.outputs[k].to_string();
  return r + ")";
}

std::string write_placements_json(const Plan& plan, const Graph& g, const Mesh& mesh) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["mesh_shape"] = mesh.shape();
  j["mesh_dim_names"] = mesh.names();
  nlohmann::ordered_json pl = nlohmann::ordered_json::object();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    nlohmann::ordered_json e;
    e["output"] = output_spec_string(np->chosen);
    nlohmann::ordered_json ins = nlohmann::ordered_json::array();
    for (const ShardingSpec& s : np->chosen.inputs) ins.push_back(s.to_string());
    e["inputs"] = ins;
    pl[g.node(i).name] = e;
  }
  j["placements"] = pl;
  return j.dump(1) + "\n";
}

namespace {

std::vector<std::string> split_tuple(std::string_view s) {
  std::vector<std::string> parts;
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') {
    s = s.substr(1, s.size() - 2);
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i <= s.size(); ++i) {
      if (i == s.size() || (s[i] == ',' && depth == 0)) {
        std::string_view part = s.substr(start, i - start);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
        parts.emplace_back(part);
        start = i + 1;
      } else if (s[i] == '(') {
        ++depth;
      } else if (s[i] == ')') {
        --depth;
      }
    }
    return parts;
  }
  parts.emplace_back(s);
  return parts;
}

}  // namespace

std::vector<std::optional<Strategy>> read_placements_json(std::string_view text,
                                                          std::string_view origin,
                                                          const Graph& g, const Mesh& mesh) {
  nlohmann::json j = parse_json_text(text, origin);
  auto fail = [&](std::string_view where, std::string_view why) -> std::runtime_error {
    return std::runtime_error(fmt::format("{}: {}: {}", origin, where, why));
  };
  if (!j.is_object()) throw fail("/", "expected an object");
  if (!j.contains("version") || j["version"] != 1) throw fail("/version", "expected 1");
  if (!j.contains("mesh_shape") || !j["mesh_shape"].is_array())
    throw fail("/mesh_shape", "missing");
  std::vector<int64_t> shape;
  for (const auto& x : j["mesh_shape"]) {
    if (!x.is_number_integer()) throw fail("/mesh_shape", "expected integers");
    shape.push_back(x.get<int64_t>());
  }
  if (shape != mesh.shape())
    throw fail("/mesh_shape", fmt::format("saved for mesh {} but planning on {}",
                                          fmt::join(shape, "x"), mesh.describe()));
  if (j.contains("mesh_dim_names") && j["mesh_dim_names"].is_array()) {
    std::vector<std::string> names;
    for (const auto& x : j["mesh_dim_names"]) names.push_back(x.is_string() ? x.get<std::string>() : "");
    if (names != mesh.names())
      throw fail("/mesh_dim_names", fmt::format("saved for dims ({}) but planning on ({})",
                                                fmt::join(names, ", "), fmt::join(mesh.names(), ", ")));
  }
  if (!j.contains("placements") || !j["placements"].is_object())
    throw fail("/placements", "missing or not an object");
  std::vector<std::optional<Strategy>> out(static_cast<size_t>(g.size()));
  for (auto it = j["placements"].begin(); it != j["placements"].end(); ++it) {
    std::string where = "/placements/" + it.key();
    auto idx = g.find(it.key());
    if (!idx) throw fail(where, "no such node in the graph");
    const Node& n = g.node(*idx);
    const auto& e = it.value();
    if (!e.is_object() || !e.contains("output") || !e["output"].is_string())
      throw fail(where + "/output", "missing");
    Strategy s;
    // Parses one DTensor string; errors carry the exact JSON pointer of the string.
    auto parse_at = [&](const nlohmann::json& v, const std::string& at) {
      if (!v.is_string()) throw fail(at, fmt::format("expected a placement string, got {}", v.dump()));
      try {
        return parse_placements(v.get<std::string>());
      } catch (const std::invalid_argument& ex) {
        throw fail(at, one_line(ex.what()));
      }
    };
    auto parts = split_tuple(e["output"].get<std::string>());
    if (parts.size() != n.outputs.size())
      throw fail(where + "/output", fmt::format("{} specs for {} outputs", parts.size(),
                                                n.outputs.size()));
    for (size_t k = 0; k < parts.size(); ++k) {
      ShardingSpec sp;
      sp.placements = parts[k] == "None" ? std::vector<Placement>(static_cast<size_t>(mesh.ndim()))
                                         : parse_at(parts[k], where + "/output");
      sp.meta = n.outputs[k];
      s.outputs.push_back(std::move(sp));
    }
    if (e.contains("inputs")) {
      if (!e["inputs"].is_array() || e["inputs"].size() != n.inputs.size())
        throw fail(where + "/inputs",
                   fmt::format("expected {} input specs (node '{}' has {} inputs), got {}",
                               n.inputs.size(), n.name, n.inputs.size(),
                               e["inputs"].is_array() ? std::to_string(e["inputs"].size())
                                                      : std::string("no array")));
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const std::string at = fmt::format("{}/inputs/{}", where, k);
        ShardingSpec sp;
        sp.placements = parse_at(e["inputs"][k], at);
        sp.meta = g.meta(n.inputs[k]);
        if (sp.ndim_mesh() != mesh.ndim())
          throw fail(at, fmt::format("{} placements for a {}-D mesh", sp.ndim_mesh(), mesh.ndim()));
        s.inputs.push_back(std::move(sp));
      }
    }
    for (const ShardingSpec& sp : s.outputs)
      if (sp.ndim_mesh() != mesh.ndim())
        throw fail(where + "/output", fmt::format("{} placements for a {}-D mesh", sp.ndim_mesh(),
                                                  mesh.ndim()));
    out[static_cast<size_t>(*idx)] = std::move(s);
  }
  return out;
}

}  // namespace autoshard

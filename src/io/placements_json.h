#pragma once
/// Placements JSON in the schema of AutoParallel's save_placements (see
/// ../shared/reference/formats.md): mesh shape and dim names, then per node its output spec
/// and input specs as DTensor strings.  Reusing a saved file picks, for every node, the
/// strategy whose output *and* input specs match.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/plan.h"

namespace autoshard {

/// Deterministic JSON text of a plan's placements.
std::string write_placements_json(const Plan& plan, const Graph& g, const Mesh& mesh);

/// Parses placements JSON against a graph and mesh.  Returns, per graph node, the wanted
/// strategy specs (nullopt for nodes the file does not mention).  Throws std::runtime_error
/// naming `origin` and the JSON pointer on malformed files, a mesh mismatch or unknown nodes.
std::vector<std::optional<Strategy>> read_placements_json(std::string_view text,
                                                          std::string_view origin,
                                                          const Graph& g, const Mesh& mesh);

/// "S(0)R" for one output, "(S(0)R, RR)" for several.
std::string output_spec_string(const Strategy& s);

}  // namespace autoshard

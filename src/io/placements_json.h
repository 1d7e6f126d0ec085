#pragma once
/// Placements JSON in the schema of AutoParallel's save_placements (see
/// ../shared/reference/formats.md): mesh shape and dim names, then per node its output spec
/// and input specs as DTensor strings.  autoshard adds "autoshard_version" and
/// "graph_fingerprint" (readers of the plain schema ignore unknown keys).  Reusing a saved file
/// picks, for every node, the strategy whose output *and* input specs match.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/plan.h"
#include "planner/prefetch_schedule.h"

namespace autoshard {

class ShardingOptimizer;

/// Stable 16-hex-digit hash of the graph's structure (names, ops, inputs, tensor metas,
/// attributes): the "graph" component of the problem fingerprint (planner/solution_file.h).
std::string graph_fingerprint(const Graph& g);

/// Deterministic JSON text of a plan's placements.json; its "schedule" section is the
/// prefetch schedule (planner/prefetch_schedule.h) with `schedule`'s depth and buckets.
std::string write_placements_json(const Plan& plan, const Graph& g, const Mesh& mesh,
                                  const ScheduleOptions& schedule = {});

/// Parses placements JSON against a graph and mesh.  Returns, per graph node, the wanted
/// strategy specs (nullopt for nodes the file does not mention).  Throws std::runtime_error
/// naming `origin` and the JSON pointer on malformed files or a mesh mismatch; problems of
/// single nodes (unknown node, wrong spec counts, bad strings) are all collected into one
/// one-line message (see format_mismatches).
std::vector<std::optional<Strategy>> read_placements_json(std::string_view text,
                                                          std::string_view origin,
                                                          const Graph& g, const Mesh& mesh);

/// The keys every placements file starts with: version, mesh shape and dim names, autoshard's
/// version and the graph fingerprint.
nlohmann::ordered_json placements_header(const Graph& g, const Mesh& mesh);

/// docs/pipeline-format.md's "context_parallel" entry of a CP attention node (mesh dim by name).
nlohmann::ordered_json context_parallel_json(const ContextParallel& cp, const Mesh& mesh);

/// placements.json's "schedule" section of a prefetch schedule over `g` (its node names).
nlohmann::ordered_json schedule_json(const PrefetchSchedule& s, const Graph& g);

/// placements.json's "sequence_layout" of a plan whose node i has strategy chosen[i]
/// (planner/sequence_layout.h): {"head_tail": b, "permute": {name: [[tensor dim, mesh dim
/// size], ...]}}; nullopt when no node is load-balanced context-parallel attention.
std::optional<nlohmann::ordered_json> sequence_layout_json(const Graph& g,
                                                          const std::vector<const Strategy*>& chosen,
                                                          const Mesh& mesh);

/// "S(0)R" for one output, "(S(0)R, RR)" for several.
std::string output_spec_string(const Strategy& s);

/// The result of matching a placements file against an optimizer's problem.
struct PlacementsMatch {
  std::vector<StrategyIdx> choice;      ///< full problem assignment; -1 where nothing matched
  std::vector<std::string> mismatches;  ///< "/placements/NAME: why", one per bad node
  std::vector<std::string> warnings;    ///< e.g. the graph fingerprint differs
  std::string writer_version;           ///< "autoshard_version" of the file ("" if absent)
};
/// Parses `text` and matches every saved node to a strategy of `opt`'s problem (outputs and
/// inputs).  Global errors (malformed JSON, version, mesh) throw; per-node problems are
/// collected in `mismatches`.  With `require_all`, a planned node missing from the file is a
/// mismatch too (needed to evaluate a plan without solving).
PlacementsMatch match_placements(ShardingOptimizer& opt, std::string_view text,
                                 std::string_view origin, bool require_all);

/// "<origin>: <m1>; <m2>; ... (N mismatches)" -- at most `shown` listed, then "and K more".
std::string format_mismatches(std::string_view origin, const std::vector<std::string>& m,
                              size_t shown = 8);

/// Writes opt.solution()'s placements to `path` (temporary + rename); throws without one.
void save_placements(const ShardingOptimizer& opt, const std::string& path);
/// The plan of a saved placement set, evaluated with `opt`'s cost model without solving (same
/// objective, bit for bit, as the plan that was saved on the same problem).  The plan becomes
/// opt.solution().  Status is "feasible": evaluation proves no optimality (the lower bound is
/// the trivial 0).  Throws one line listing every mismatched node.
Plan load_placements(ShardingOptimizer& opt, const std::string& path);
/// Same, from text.
Plan placements_plan(ShardingOptimizer& opt, std::string_view text, std::string_view origin);

}  // namespace autoshard

#pragma once
/// Conversion between the planner's types and the protobuf messages of io/state.proto, and the
/// semantic validation of everything a file claims (every index, count and enum value is
/// checked before it is used, so a hostile payload yields an error, never a crash).
///
/// Placement codes: kind in the low 2 bits (0 R, 1 S, 2 P), then the shard dim (S) or the
/// reduce op (P).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/options.h"
#include "planner/plan.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// Everything a state file holds.
struct StateParts {
  std::string writer_version;
  Graph graph;
  Mesh mesh;
  PlannerOptions options;
  std::vector<Constraint> constraints;
  std::optional<BuiltProblem> problem;
  std::optional<Plan> solution;
  std::vector<StrategyIdx> solution_choice;  ///< full problem assignment of `solution`
};

/// What a replay holds: the inputs of planning only.
struct ReplayParts {
  std::string writer_version;
  Graph graph;
  Mesh mesh;
  PlannerOptions options;
  std::vector<Constraint> constraints;
};

/// What encode_state writes, by reference (a state can be large: no copies).
struct StateRef {
  std::string_view writer_version;
  const Graph* graph = nullptr;
  const Mesh* mesh = nullptr;
  const PlannerOptions* options = nullptr;
  const std::vector<Constraint>* constraints = nullptr;
  const BuiltProblem* problem = nullptr;  ///< optional
  const Plan* solution = nullptr;         ///< optional
  const std::vector<StrategyIdx>* solution_choice = nullptr;  ///< optional
};

/// Serialized protobuf bytes (deterministic for equal inputs).  Counters for tests:
/// `matrices_stored` receives the number of distinct edge matrices written.
std::string encode_state(const StateRef& s, size_t* matrices_stored = nullptr);
std::string encode_replay(const ReplayParts& r);

/// Parses and validates a payload; errors are "<origin>: <field path>: <why>".
StateParts decode_state(std::string_view payload, std::string_view origin);
ReplayParts decode_replay(std::string_view payload, std::string_view origin);

uint32_t placement_code(const Placement& p);

}  // namespace autoshard

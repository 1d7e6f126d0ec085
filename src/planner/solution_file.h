#pragma once
/// MASE's `preload_solution` + `ilp_solution_file`: a solved plan saved under a fingerprint of
/// the problem it solves, so that planning the same problem again skips the solve.
///
/// The fingerprint hashes five components separately (so a mismatch can say what changed):
///   graph        every node (name, kind, op, phase, inputs, output metas, attributes, module
///                path, source), gradient pairs, loss;
///   mesh         dim names, sizes, inter-node flags, bandwidths, latencies, backend;
///   hardware     every Hardware field;
///   options      what defines the problem and its accepted optimum: comm model, memory
///                limit, mip_gap, skip_fully_replicated, cluster, require_divisible, optimizer,
///                recompute, overlap and its discount (not time limit, threads, run_checks or the file options);
///   constraints  every field of every constraint, in order.
/// Hashes are 64-bit FNV-1a over a canonical byte encoding (doubles by their bits), printed as
/// 16 hex digits; deterministic across runs and machines.
///
/// The file (JSON) stores the fingerprint and its components, the solver's figures and, per
/// planned graph node, its name, strategy index and strategy name ("S(0)R <- S(0)R, RR"), plus
/// the full assignment for auxiliary problem nodes.  Reuse needs a matching fingerprint and
/// every node's strategy found by name; the plan is then re-evaluated with the current cost
/// model.
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/options.h"
#include "planner/plan.h"

namespace autoshard {

class ShardingOptimizer;

inline constexpr int kSolutionFileVersion = 1;

struct ProblemFingerprint {
  std::string graph, mesh, hardware, options, constraints;
  /// Hash of the five component hashes.
  std::string combined() const;
  /// Names of the components that differ from `o` ("graph, options"), empty if none.
  std::string differences(const ProblemFingerprint& o) const;
};

ProblemFingerprint fingerprint_parts(const Graph& g, const Mesh& mesh, const PlannerOptions& o,
                                     const std::vector<Constraint>& constraints);
/// 16 hex digits identifying the optimizer's problem (graph, mesh, hardware, options,
/// constraints).
std::string problem_fingerprint(const ShardingOptimizer& opt);

/// Writes the solution file (temporary + rename).  `choice` is the full problem assignment.
void save_solution_file(const ShardingOptimizer& opt, const Plan& plan,
                        const std::vector<StrategyIdx>& choice, const std::string& path);

struct SolutionFileLoad {
  std::optional<Plan> plan;        ///< the reused plan, when the file matches
  std::vector<StrategyIdx> choice;  ///< its full assignment
  std::string warning;             ///< why the file was not used (empty if used or absent)
};
/// Reuses the file when it matches the optimizer's problem; a missing file is not an error
/// (nothing to reuse yet), a malformed one gives a warning, never an exception.
SolutionFileLoad try_load_solution_file(ShardingOptimizer& opt, const std::string& path);

}  // namespace autoshard

#pragma once
/// Which shares of the parameter bytes a device can hold at all: the reach of a
/// parameter-memory constraint (ShardingOptimizer::add_parameter_memory_constraint).
///
/// A bound outside that reach has no layout, whatever the solver does: a model with one bias
/// of 10 elements on 8 devices under --require-divisible holds that bias whole on every device,
/// so "at most 1/8 of the parameters" is out of reach by the bias's share.  Checked before any
/// solve, such a bound answers `infeasible` at once with the share that is reachable, instead
/// of a search that times out without saying why.
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// The least and most bytes of parameters one device holds, over the problem's strategies
/// (each parameter at its smallest or largest local shard), and the unsharded total.
struct ParameterShare {
  double least_bytes = 0;
  double most_bytes = 0;
  double total_bytes = 0;
  double least() const { return total_bytes > 0 ? least_bytes / total_bytes : 0; }
  double most() const { return total_bytes > 0 ? most_bytes / total_bytes : 0; }
};

ParameterShare parameter_share(const Graph& g, const Mesh& mesh, const BuiltProblem& bp);

/// A parameter-memory constraint no layout can meet, and the bound that is reachable.
struct UnreachableShare {
  std::string constraint;  ///< its name
  bool high = true;        ///< the upper bound is out of reach (else the lower one)
  double asked = 0;        ///< the bound asked for, a share of the unsharded bytes
  double reachable = 0;    ///< the least (high) or most (low) share any layout holds
  double other = 0;        ///< the constraint's other bound (low when `high`, else high)

  /// "constraint 'parameter_memory': at most 12.50 % of the parameter bytes per device is out
  /// of reach: every layout holds at least 12.89 %"
  std::string why() const;
  /// "parameter memory: allow at least 12.89 % (--param-memory 0.1289,
  /// add_parameter_memory_constraint(high=0.1289))": the CLI's option and the Python call, as
  /// the device-memory remedies name --memory-limit.
  std::string remedy() const;
};

/// The parameter-memory constraints among `constraints` that no strategy choice meets.
std::vector<UnreachableShare> unreachable_shares(const Graph& g, const Mesh& mesh,
                                                 const BuiltProblem& bp,
                                                 const std::vector<Constraint>& constraints);

}  // namespace autoshard

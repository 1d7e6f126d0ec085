#pragma once
/// Which mesh for N GPUs?  Enumerates the mesh shapes of N devices and how their dims map onto
/// the machines (the last dims inside a node, as DTensor lays a mesh out over ranks), plans the
/// model on each with the exact planner, and ranks them by step time.
///
/// Meshes that differ only by the order of dims of the same kind (both inside a node, or both
/// across nodes) are the same problem up to renaming the dims — strategies are symmetric in the
/// dims and the cost model sees a dim only through its size and link — so one of each class is
/// planned (dims of a kind in ascending size).
///
/// Pruning (branch and bound over meshes): every candidate first gets a cheap lower bound, the
/// sum over nodes of the cheapest strategy's compute cost plus the cheapest possible gradient
/// reduction, computed from the problem's node costs alone (no edges, no solve); candidates are
/// planned in increasing bound order, and one whose bound is no better than the best step time
/// found so far is not solved: it cannot win.  The others are solved with that best time as a
/// cutoff (PlannerOptions::cutoff_us): the solver stops as soon as its own, much stronger,
/// lower bound proves the mesh cannot win, and the mesh is listed as pruned with that bound.
/// A 3-D mesh whose solve the time limit stops is never reported worse than the Megatron
/// recipe on it (solved exactly, pinned), which is one of its assignments.  The table shows
/// each plan's proven bound beside its step: a solve the time limit stopped early holds a first
/// incumbent that can be far above what the mesh can do (its bound says how far at most).
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/options.h"
#include "planner/plan.h"

namespace autoshard {

/// How far a search is (reporting only: nothing the search decides reads it).
struct MeshSearchProgress {
  int32_t done = 0;   ///< meshes planned, pruned or failed
  int32_t total = 0;  ///< candidate meshes
  double best_us = std::numeric_limits<double>::infinity();  ///< the best step that fits so far
  double elapsed_s = 0;
};

struct MeshSearchOptions {
  int64_t gpus = 8;
  int max_dims = 3;
  /// Hardware, with gpus_per_node deciding which dims cross nodes.
  Hardware hardware;
  CommBackend backend = CommBackend::kNccl;
  PlannerOptions planner;
  /// Meshes planned at once (0: the machine's cores).
  int threads = 0;
  /// Skip candidates whose lower bound cannot beat the best plan found.
  bool prune = true;
  /// Called after each mesh, from the search's threads, one call at a time.
  std::function<void(const MeshSearchProgress&)> on_progress;
};

/// The candidate meshes, one per symmetry class, in a deterministic order (fewer dims first).
/// Dims are named d0, d1, ... (1-D: dp).  Throws std::invalid_argument for gpus < 1.
std::vector<Mesh> enumerate_meshes(int64_t gpus, int max_dims, const Hardware& hw,
                                   CommBackend backend = CommBackend::kNccl);

/// "2 across nodes x 8 within a node" style description of how a mesh maps onto machines.
std::string describe_topology(const Mesh& mesh);

struct MeshSearchRow {
  Mesh mesh;
  enum class Outcome : uint8_t { kPlanned, kOverBudget, kPruned, kTimedOut, kError } outcome = Outcome::kError;
  /// kPlanned: the plan (fits); kOverBudget: the fastest plan without the limit (its peak is
  /// what the mesh would need).
  std::optional<Plan> plan;
  double bound_us = 0;       ///< the cheap lower bound used for pruning
  double seconds = 0;        ///< wall time spent on this mesh (bound + plan)
  std::string message;       ///< kError: the error; kPruned: why
  /// Per mesh dim, what the plan mostly does with it ("TP", "FSDP", "DP", ...), by parameter
  /// bytes; empty when there is no plan.
  std::vector<std::string> dim_use;
};
std::string_view outcome_name(MeshSearchRow::Outcome o);

struct MeshSearchResult {
  /// Ranked: planned meshes by step time, then over-budget ones by peak memory, then pruned
  /// ones by bound, then those that found no plan within the time limit, then errors.
  std::vector<MeshSearchRow> rows;
  int64_t candidates = 0;
  double seconds = 0;
  /// Index into rows of the best plan that fits; -1 when none does.
  int32_t best = -1;
};

MeshSearchResult search_meshes(const Graph& g, const MeshSearchOptions& o);

}  // namespace autoshard

#pragma once
/// Penalty (Lagrangian-style) search for memory-constrained group models, after the IOPDDL
/// contest winner's scheme: memory is relaxed into per-piece penalties w·(usage − minimum),
/// the remaining pairwise problem is optimised by the tree-DP LNS (relaxed mode of
/// GroupSearch), the result is repaired into a feasible state by a memory-aware greedy and
/// polished by memory-aware LNS, and each piece's weight is bisected (in log space) on
/// whether the relaxed solution overflows somewhere inside the piece's time range.  When rounds
/// stop producing new incumbents, the thread alternates with memory-aware LNS from the
/// incumbent (GroupSearch::run) for as long as the stalled rounds took.
#include <atomic>
#include <chrono>
#include <cstdint>

#include "solver/local_search.h"

namespace autoshard {

struct PenaltySearchStats {
  int64_t rounds = 0, repaired = 0, proposals = 0, lns_phases = 0;
  /// Memory-free lower bound from the first round's messages (without the model offset).
  double lower_bound = -1e300;
};

/// Runs rounds until the deadline or `stop`, offering feasible states to `shared`.
void run_penalty_search(const GroupModel& m, uint64_t seed, std::chrono::steady_clock::time_point deadline,
                        SharedIncumbent& shared, const std::atomic<bool>& stop, PenaltySearchStats* stats,
                        bool verbose = false);

}  // namespace autoshard

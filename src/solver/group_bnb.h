#pragma once
/// LP-based branch and bound on the anytime reductions' group model under a memory limit.
///
/// Why: the memory-aware Lagrangian bound (lower_bound.h) converges to the LP relaxation with
/// memory rows, and on planner problems that relaxation mixes two strategies of a few groups
/// whose usages straddle the limit.  On llama3-8b 2x8 at 20 GiB it sits 1.8 % below the tied
/// optimum (231.04 vs 234.80 ms); branching on those few groups closes it in a few dozen nodes
/// (docs/benchmarks.md, "Round 6").
///
/// Formulation: marginal_lp.h's, with one node per group.  Memory rows are generated lazily:
/// at first for the segments the incumbent uses most, then for every segment an LP solution
/// overflows.  Any subset of the rows gives a valid bound, and an integral solution is
/// accepted only after every segment has been checked, so bounds and plans are exact.
///
/// Search: best-first on the LP bound.  Branching takes the group whose LP mass is most spread
/// and fixes its heaviest strategy to 1 in one child and to 0 in the other.  Clp's dual
/// simplex re-optimises every node from the previous basis (bound changes and new rows keep
/// it dual feasible), in process: Clp honours its time limit, unlike CBC (mip.h).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "solver/group_model.h"

namespace autoshard {

struct GroupBnbOptions {
  double time_limit_s = 10;
  /// Stop once incumbent - bound <= gap * incumbent (0: until proven or out of time).
  double gap = 0;
  /// Stop once the bound (offset included) reaches this: nothing cheaper exists (mesh search).
  Cost cutoff = kInfCost;
  /// Models whose LP has more columns (after class compression), or whose edge matrices have
  /// more entries, are not attempted: the LP alone would eat the time or the memory.  The
  /// result then has ran == false.
  int64_t max_columns = 600'000;
  int64_t max_entries = 8'000'000;
  std::function<void(const std::string&)> progress;
};

struct GroupBnbResult {
  bool ran = false;              ///< the LP was built and its root solved
  bool proven = false;           ///< the search finished: `cost` is optimal (or none exists)
  bool found = false;            ///< a plan within the limit is known
  std::vector<int32_t> choice;   ///< best group choice: the given incumbent or better
  Cost cost = kInfCost;          ///< model cost of `choice`, offset included
  Cost lower_bound = -kInfCost;  ///< offset included; valid for the model with its limit
  int64_t nodes = 0;             ///< LPs solved
  int32_t memory_rows = 0;       ///< memory rows generated
  int64_t columns = 0;           ///< LP columns
};

/// Branch and bound from `incumbent` (a group choice within the limit, or empty: none; on a
/// model without groups an empty choice is the only plan), until the time limit, the gap, or a
/// proof.
GroupBnbResult group_branch_and_bound(const GroupModel& m, const std::vector<int32_t>& incumbent,
                                      const GroupBnbOptions& opt);

}  // namespace autoshard

#pragma once
/// Anytime solver for large strategy-selection problems (the IOPDDL contest setting): the exact
/// reductions as a group model (reduce.h), then penalty search (penalty_search.h: memory
/// relaxed into per-piece penalties, the pairwise problem optimised by TRW-S message passing
/// (trws.h) plus tree-DP LNS (local_search.h), greedy memory repair, memory-aware LNS polish,
/// penalty weights bisected per piece) in `threads` threads sharing the incumbent, until the
/// time limit.  With 3+ threads every third thread runs the plain memory-aware LNS instead.
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

struct AnytimeOptions {
  double time_limit_s = 10;
  int threads = 0;  ///< 0: hardware concurrency
  /// Stop once the lower bound reaches this cost (see SolverOptions::cutoff).
  Cost cutoff = kInfCost;
  /// Share of the time given, after the search, to a memory-aware bound when the usage limit
  /// binds: LP branch and bound (group_bnb.h), which may also improve the plan, on models
  /// small enough for its LP, else the Lagrangian bound (lower_bound.h).  0: the bound stays
  /// memory-free.  A search that is still improving when its own share ends runs on, until
  /// it stalls for half its share or reaches 60 % of the time.
  double memory_bound_share = 0;
  /// Relative gap at which the branch and bound may stop.
  double gap = 0;
  /// A full choice to start from (may be empty): the first incumbent when it fits and the
  /// reductions kept it.
  std::vector<StrategyIdx> warm_start;
  /// Called with one-line progress messages (reduction summary, each new incumbent).
  std::function<void(const std::string&)> progress;
};

struct AnytimeResult {
  bool feasible = false;                 ///< a choice within the usage limit with finite cost
  std::vector<StrategyIdx> choice;       ///< best found (empty if none)
  Cost cost = kInfCost;
  Cost lower_bound = 0;                  ///< edge split, TRW-S reparametrised, or (with
                                         ///< memory_bound_share) memory-aware Lagrangian;
                                         ///< == cost means proven optimal
  double time_to_first_feasible_s = -1;  ///< since the call, -1 if none
  double elapsed_s = 0;
  std::string reduction_summary;
  int64_t proposals = 0;                 ///< LNS moves tried, over all threads
};

AnytimeResult solve_anytime(const Problem& p, const AnytimeOptions& options);

/// The contest driver: reads `path` (plain or gzip IOPDDL JSON), solves until shortly before
/// `timeout_s` (reading counts against it), prints progress lines starting with '#', and as the
/// last line the best solution as "[i, j, ...]" ("[]" if none).  Returns 0 if a feasible
/// solution was printed, 1 otherwise.
int run_iopddl(const std::string& path, double timeout_s, int threads, std::ostream& out);

}  // namespace autoshard

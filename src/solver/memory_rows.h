#pragma once
/// Memory constraints of a Problem whose reductions left a constant base usage: the rows the
/// MIP, the greedy, the Lagrangian and the minimal-peak search share.
#include <cstdint>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

/// Constant usage counted over [start, end).
struct BaseUsage {
  int64_t start = 0;
  int64_t end = 0;
  int64_t usage = 0;
};

/// One memory constraint: offset + sum over `nodes` of their usage <= limit.
struct MemoryRow {
  int64_t offset = 0;
  std::vector<PNodeIdx> nodes;
};

/// One row per time point whose live set is not dominated (a row is dominated by one whose live
/// set contains it and whose offset is not smaller; only neighbouring event points are compared,
/// which keeps every maximal row).  With `drop_slack`, rows that cannot bind (offset + sum of
/// maximum usages <= limit) are dropped.  Total size is the sum of maximal live set sizes.
std::vector<MemoryRow> memory_rows(const Problem& p, const std::vector<BaseUsage>& base,
                                   bool drop_slack);
/// Largest offset + sum of minimum usages over rows: a lower bound on any peak.
int64_t min_possible_peak(const Problem& p, const std::vector<MemoryRow>& rows);
/// Peak of an assignment under the rows (max over rows of offset + usages).
int64_t rows_peak(const Problem& p, const std::vector<MemoryRow>& rows,
                  const std::vector<StrategyIdx>& choice);

}  // namespace autoshard

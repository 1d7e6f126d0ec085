#pragma once
/// Prices on memory rows: the Lagrangian multipliers of "offset_k + sum of usages <= limit".
/// Every memory-pricing method of the solver works on them -- the greedy's penalised repair and
/// the Lagrangian relaxation (lagrangian.h: priced problem solved exactly by elimination, or
/// heuristically by reductions + descent) -- so the row index per node, the priced node costs
/// and the row loads live here once.
#include <cstdint>
#include <vector>

#include "problem/problem.h"
#include "solver/memory_rows.h"

namespace autoshard {

class RowPrices {
 public:
  RowPrices(const Problem& p, const std::vector<MemoryRow>& rows);

  /// Cost per byte at which prices start: the spread of node costs over the spread of node
  /// usages, summed over nodes (1 when either is zero).
  static double scale(const Problem& p);

  /// The rows node v appears in.
  const std::vector<int32_t>& rows_of(PNodeIdx v) const { return rows_of_[static_cast<size_t>(v)]; }
  /// Price per row (>= 0); all zero after construction and clear().
  std::vector<double>& prices() { return price_; }
  const std::vector<double>& prices() const { return price_; }
  void clear() { price_.assign(price_.size(), 0.0); }
  /// Sum of the prices of v's rows: what one byte of v's usage costs.
  double node_price(PNodeIdx v) const;
  /// `out` (a copy of the problem given to the constructor) with every node's costs raised by
  /// usage x node_price and no usage limit: the priced, memory-free problem.
  void price_into(Problem& out) const;
  /// offset + usages of `x` per row.
  std::vector<int64_t> loads(const std::vector<StrategyIdx>& x) const;
  /// Raises the price of every row whose load exceeds the limit: to `start` if it is zero,
  /// else by `factor`.  Returns whether any row was over.
  bool raise_violated(const std::vector<int64_t>& loads, double start, double factor);

 private:
  const Problem& p_;
  const std::vector<MemoryRow>& rows_;
  std::vector<std::vector<int32_t>> rows_of_;
  std::vector<double> price_;
};

}  // namespace autoshard

#include "solver/row_prices.h"

#include <algorithm>

namespace autoshard {

RowPrices::RowPrices(const Problem& p, const std::vector<MemoryRow>& rows)
    : p_(p), rows_(rows), rows_of_(static_cast<size_t>(p.num_nodes())), price_(rows.size(), 0.0) {
  for (size_t r = 0; r < rows.size(); ++r)
    for (PNodeIdx v : rows[r].nodes) rows_of_[static_cast<size_t>(v)].push_back(static_cast<int32_t>(r));
}

double RowPrices::scale(const Problem& p) {
  double dc = 0, du = 0;
  for (const ProblemNode& n : p.nodes) {
    Cost lo = kInfCost, hi = -kInfCost;
    for (Cost c : n.costs)
      if (c < kInfCost) lo = std::min(lo, c), hi = std::max(hi, c);
    if (hi > lo) dc += hi - lo;
    du += static_cast<double>(*std::max_element(n.usages.begin(), n.usages.end()) -
                              *std::min_element(n.usages.begin(), n.usages.end()));
  }
  return du > 0 && dc > 0 ? dc / du : 1.0;
}

double RowPrices::node_price(PNodeIdx v) const {
  double w = 0;
  for (int32_t r : rows_of(v)) w += price_[static_cast<size_t>(r)];
  return w;
}

void RowPrices::price_into(Problem& out) const {
  out.usage_limit = -1;
  for (PNodeIdx v = 0; v < p_.num_nodes(); ++v) {
    const double w = node_price(v);
    const ProblemNode& src = p_.nodes[static_cast<size_t>(v)];
    ProblemNode& dst = out.nodes[static_cast<size_t>(v)];
    for (size_t s = 0; s < src.costs.size(); ++s)
      dst.costs[s] = src.costs[s] + w * static_cast<double>(src.usages[s]);
  }
}

std::vector<int64_t> RowPrices::loads(const std::vector<StrategyIdx>& x) const {
  std::vector<int64_t> load(rows_.size());
  for (size_t r = 0; r < rows_.size(); ++r) {
    int64_t s = rows_[r].offset;
    for (PNodeIdx v : rows_[r].nodes)
      s += p_.nodes[static_cast<size_t>(v)].usages[static_cast<size_t>(x[static_cast<size_t>(v)])];
    load[r] = s;
  }
  return load;
}

bool RowPrices::raise_violated(const std::vector<int64_t>& loads, double start, double factor) {
  bool any = false;
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (loads[r] <= p_.usage_limit) continue;
    price_[r] = price_[r] == 0 ? start : price_[r] * factor;
    any = true;
  }
  return any;
}

}  // namespace autoshard

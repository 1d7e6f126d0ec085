#include "solver/row_prices.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

/// Two nodes of two strategies; row 0 holds node 0, row 1 holds both, limit 10.
Problem two_rows(std::vector<MemoryRow>& rows) {
  Problem p;
  p.nodes.push_back({"a", {1, 5}, {8, 2}, 0, 2});
  p.nodes.push_back({"b", {0, 3}, {6, 1}, 1, 2});
  p.usage_limit = 10;
  rows = {{1, {0}}, {0, {0, 1}}};
  return p;
}

TEST(RowPrices, PricesLoadsAndRaises) {
  std::vector<MemoryRow> rows;
  const Problem p = two_rows(rows);
  RowPrices prices(p, rows);
  EXPECT_EQ(prices.rows_of(0), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(prices.rows_of(1), (std::vector<int32_t>{1}));
  // Loads include the row offsets: x = (0, 0) -> row 0: 1 + 8, row 1: 8 + 6.
  const std::vector<int64_t> load = prices.loads({0, 0});
  EXPECT_EQ(load, (std::vector<int64_t>{9, 14}));
  // Only row 1 is over the limit: its price starts at 0.5, then doubles.
  EXPECT_TRUE(prices.raise_violated(load, 0.5, 2));
  EXPECT_EQ(prices.prices(), (std::vector<double>{0, 0.5}));
  EXPECT_TRUE(prices.raise_violated(load, 0.5, 2));
  EXPECT_EQ(prices.prices(), (std::vector<double>{0, 1.0}));
  EXPECT_FALSE(prices.raise_violated(prices.loads({1, 1}), 0.5, 2));
  prices.prices() = {0.25, 1.0};
  EXPECT_DOUBLE_EQ(prices.node_price(0), 1.25);
  EXPECT_DOUBLE_EQ(prices.node_price(1), 1.0);
  // Priced costs: cost + usage x node price, and no usage limit.
  Problem priced = p;
  prices.price_into(priced);
  EXPECT_EQ(priced.usage_limit, -1);
  EXPECT_EQ(priced.nodes[0].costs, (std::vector<Cost>{1 + 8 * 1.25, 5 + 2 * 1.25}));
  EXPECT_EQ(priced.nodes[1].costs, (std::vector<Cost>{0 + 6 * 1.0, 3 + 1 * 1.0}));
  prices.clear();
  EXPECT_EQ(prices.prices(), (std::vector<double>{0, 0}));
  // Scale: cost spreads (4 + 3) over usage spreads (6 + 5).
  EXPECT_DOUBLE_EQ(RowPrices::scale(p), 7.0 / 11.0);
}

}  // namespace
}  // namespace autoshard

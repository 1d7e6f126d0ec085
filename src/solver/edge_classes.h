#pragma once
/// Strategies grouped by what they cost on one edge, for the LP formulations (mip.h,
/// group_bnb.h).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "problem/problem.h"

namespace autoshard {

/// An edge's strategies grouped by what they cost on that edge: strategies of u with equal rows
/// of the matrix (and of v with equal columns) are interchangeable there, so the marginal
/// formulation needs one edge column per pair of classes rather than per pair of strategies.
/// The LP relaxation is unchanged -- a class-level solution lifts to a strategy-level one by
/// splitting each class's edge mass in proportion to its strategies' values -- so CBC proves
/// the same bounds on a much smaller LP (repeated layers' edges mostly depend on a few
/// distinct output and input specs).
struct EdgeClasses {
  std::vector<int32_t> row_class;  ///< per strategy of u
  std::vector<int32_t> col_class;  ///< per strategy of v
  int32_t rows = 0, cols = 0;
  std::vector<Cost> costs;  ///< rows x cols, row-major
};

/// Classes of the |S_u| x |S_v| row-major matrix `m`: equal rows (bit for bit) share a row
/// class, equal columns a column class; classes numbered by first appearance.
EdgeClasses edge_classes(const std::vector<Cost>& m, size_t ku, size_t kv);

}  // namespace autoshard

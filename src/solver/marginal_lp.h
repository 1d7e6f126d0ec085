#pragma once
/// Alpa's marginal LP/MIP formulation of a Problem in row-major form, shared by the CBC search
/// (mip.h) and the group model's branch and bound (group_bnb.h).
///
/// Binary s_v[q] with sum_q s_v[q] = 1; for every edge continuous e[p,q] in [0,1] with
/// sum_q e[p,q] = s_u[p] and sum_p e[p,q] = s_v[q], one column per pair of edge classes
/// (edge_classes.h); forbidden (+inf) pairs get no column, which forces them to 0.  Memory: one
/// row per MemoryRow, each node's minimum usage moved to the right-hand side.
#include <CoinTypes.hpp>
#include <vector>

#include "problem/problem.h"
#include "solver/memory_rows.h"

namespace autoshard {

/// The MIP in row-major form, plus how to read an assignment back from its columns.
struct MarginalLp {
  std::vector<double> collb, colub, obj;
  std::vector<char> is_int;
  std::vector<CoinBigIndex> row_start{0};
  std::vector<int> idx;
  std::vector<double> val;
  std::vector<double> rlb, rub;
  std::vector<int> node_col;  ///< first s column of each node
  int peak_col = -1;

  int add_col(double lb, double ub, double c, bool integer) {
    collb.push_back(lb);
    colub.push_back(ub);
    obj.push_back(c);
    is_int.push_back(integer ? 1 : 0);
    return static_cast<int>(obj.size()) - 1;
  }
  void end_row(double lb, double ub) {
    rlb.push_back(lb);
    rub.push_back(ub);
    row_start.push_back(static_cast<CoinBigIndex>(idx.size()));
  }
  void term(int col, double v) {
    idx.push_back(col);
    val.push_back(v);
  }
  int ncols() const { return static_cast<int>(obj.size()); }
  int nrows() const { return static_cast<int>(rlb.size()); }
};

/// Builds the formulation.  peak_mode: objective is a continuous peak column P and memory rows
/// read "... - P <= -rhs"; edges without forbidden pairs are left out.  Otherwise memory rows
/// are written only when p has a usage limit.  Returns the full column vector of `warm` in
/// `warm_cols` (empty if warm is unusable).
MarginalLp build_marginal_lp(const Problem& p, const std::vector<MemoryRow>& rows, bool peak_mode,
                              const std::vector<StrategyIdx>& warm, std::vector<double>& warm_cols);

}  // namespace autoshard

#include "solver/marginal_lp.h"

#include <CoinFinite.hpp>
#include <algorithm>

#include "solver/edge_classes.h"

namespace autoshard {

namespace {

/// The state of one build: the LP so far, the warm start's column vector in step with it, and
/// whether the warm start is still usable (it stops being so once it picks a forbidden column).
struct MarginalBuilder {
  const Problem& p;
  const std::vector<MemoryRow>& rows;
  bool peak_mode;
  const std::vector<StrategyIdx>& warm;
  MarginalLp lp;
  std::vector<double> wc;
  bool warm_ok;

  MarginalBuilder(const Problem& p_, const std::vector<MemoryRow>& rows_, bool peak_mode_,
                  const std::vector<StrategyIdx>& warm_)
      : p(p_), rows(rows_), peak_mode(peak_mode_), warm(warm_), warm_ok(warm_.size() == sz(p_.num_nodes())) {}

  void add_nodes();
  void add_edge(const ProblemEdge& e);
  void add_one_end_edge(const ProblemEdge& e, const EdgeClasses& ec, StrategyIdx wu, StrategyIdx wv);
  void add_marginal_rows(const ProblemEdge& e, const EdgeClasses& ec, const std::vector<int>& col, bool of_u);
  void add_memory_rows();
};

/// One binary column per strategy (forbidden ones fixed at 0) and the row choosing exactly one.
void MarginalBuilder::add_nodes() {
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const ProblemNode& n = p.nodes[sz(v)];
    lp.node_col.push_back(lp.ncols());
    for (StrategyIdx q = 0; q < n.num_strategies(); ++q) {
      const Cost c = n.costs[sz(q)];
      const bool ok = c < kInfCost;
      lp.add_col(0, ok ? 1 : 0, peak_mode || !ok ? 0 : c, true);
      wc.push_back(warm_ok && warm[sz(v)] == q ? 1 : 0);
      if (warm_ok && warm[sz(v)] == q && !ok) warm_ok = false;
    }
    for (StrategyIdx q = 0; q < n.num_strategies(); ++q) lp.term(lp.node_col[sz(v)] + q, 1);
    lp.end_row(1, 1);
  }
}

/// The cost depends on one end only: it is that end's node cost (a forbidden pair forbids that
/// end's strategy).
void MarginalBuilder::add_one_end_edge(const ProblemEdge& e, const EdgeClasses& ec, StrategyIdx wu,
                                       StrategyIdx wv) {
  const size_t ku = sz(p.nodes[sz(e.u)].num_strategies()), kv = sz(p.nodes[sz(e.v)].num_strategies());
  const bool by_v = ec.rows == 1;
  const PNodeIdx w = by_v ? e.v : e.u;
  const size_t kw = by_v ? kv : ku;
  for (size_t q = 0; q < kw; ++q) {
    const Cost c = by_v ? ec.costs[sz(ec.col_class[q])] : ec.costs[sz(ec.row_class[q])];
    const int col = lp.node_col[sz(w)] + static_cast<int>(q);
    if (!(c < kInfCost)) {
      lp.colub[sz(col)] = 0;
      if (warm_ok && sz(by_v ? wv : wu) == q) warm_ok = false;
    } else if (!peak_mode) {
      lp.obj[sz(col)] += c;
    }
  }
}

/// Marginal rows per class: the class's edge columns sum to its strategies' columns.  Called
/// once for u's (row) classes, once for v's (column) classes.
void MarginalBuilder::add_marginal_rows(const ProblemEdge& e, const EdgeClasses& ec, const std::vector<int>& col,
                                        bool of_u) {
  const int32_t n = of_u ? ec.rows : ec.cols, other = of_u ? ec.cols : ec.rows;
  const std::vector<int32_t>& class_of = of_u ? ec.row_class : ec.col_class;
  const int first = lp.node_col[sz(of_u ? e.u : e.v)];
  for (int32_t a = 0; a < n; ++a) {
    for (int32_t b = 0; b < other; ++b)
      if (int c = col[of_u ? sz(a) * sz(ec.cols) + sz(b) : sz(b) * sz(ec.cols) + sz(a)]; c >= 0) lp.term(c, 1);
    for (size_t q = 0; q < class_of.size(); ++q)
      if (class_of[q] == a) lp.term(first + static_cast<int>(q), -1);
    lp.end_row(0, 0);
  }
}

void MarginalBuilder::add_edge(const ProblemEdge& e) {
  const size_t ku = sz(p.nodes[sz(e.u)].num_strategies()), kv = sz(p.nodes[sz(e.v)].num_strategies());
  if (peak_mode && std::all_of(e.costs.begin(), e.costs.end(), [](Cost c) { return c < kInfCost; })) return;
  const EdgeClasses ec = edge_classes(e.costs, ku, kv);
  const StrategyIdx wu = warm_ok ? warm[sz(e.u)] : 0, wv = warm_ok ? warm[sz(e.v)] : 0;
  if (ec.rows == 1 || ec.cols == 1) {
    add_one_end_edge(e, ec, wu, wv);
    return;
  }
  std::vector<int> col(ec.costs.size(), -1);
  const size_t won = warm_ok ? sz(ec.row_class[sz(wu)]) * sz(ec.cols) + sz(ec.col_class[sz(wv)]) : 0;
  for (size_t i = 0; i < ec.costs.size(); ++i) {
    if (!(ec.costs[i] < kInfCost)) continue;
    col[i] = lp.add_col(0, 1, peak_mode ? 0 : ec.costs[i], false);
    wc.push_back(warm_ok && i == won ? 1 : 0);
  }
  if (warm_ok && col[won] < 0) warm_ok = false;
  add_marginal_rows(e, ec, col, true);
  add_marginal_rows(e, ec, col, false);
}

/// The peak column (peak mode) and one row per MemoryRow, each node's minimum usage moved to
/// the right-hand side so that only the excess over it takes a coefficient.
void MarginalBuilder::add_memory_rows() {
  const double inf = COIN_DBL_MAX;
  if (peak_mode) {
    lp.peak_col = lp.add_col(0, inf, 1, false);
    wc.push_back(warm_ok ? static_cast<double>(rows_peak(p, rows, warm)) : 0);
  }
  if (!peak_mode && p.usage_limit < 0) return;
  for (const MemoryRow& r : rows) {
    double rhs = static_cast<double>(peak_mode ? -r.offset : p.usage_limit - r.offset);
    for (PNodeIdx v : r.nodes) {
      const auto& u = p.nodes[sz(v)].usages;
      const int64_t umin = *std::min_element(u.begin(), u.end());
      rhs -= static_cast<double>(umin);
      for (size_t q = 0; q < u.size(); ++q)
        if (u[q] != umin) lp.term(lp.node_col[sz(v)] + static_cast<int>(q), static_cast<double>(u[q] - umin));
    }
    if (peak_mode) lp.term(lp.peak_col, -1);
    lp.end_row(-inf, rhs);
  }
}

}  // namespace

MarginalLp build_marginal_lp(const Problem& p, const std::vector<MemoryRow>& rows, bool peak_mode,
                              const std::vector<StrategyIdx>& warm, std::vector<double>& warm_cols) {
  MarginalBuilder b(p, rows, peak_mode, warm);
  b.add_nodes();
  for (const ProblemEdge& e : p.edges) b.add_edge(e);
  b.add_memory_rows();
  warm_cols.clear();
  if (b.warm_ok) warm_cols = std::move(b.wc);
  return std::move(b.lp);
}

}  // namespace autoshard

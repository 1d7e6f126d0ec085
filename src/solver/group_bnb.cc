#include "solver/group_bnb.h"

#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <queue>

#include "solver/marginal_lp.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

/// Rows added per LP solution that overflows: the most overflowed segments first.
constexpr int kRowsPerRound = 8;
/// Rounds of row generation per node before it is branched on regardless.
constexpr int kRoundsPerNode = 4;
/// Rows seeded from the incumbent's fullest segments before the root LP.
constexpr int kSeedRows = 4;
/// Clp's tolerances make its optimum exact to about 1e-7 relative; bounds keep that margin.
constexpr double kBoundMargin = 1e-7;

/// The group model as a pairwise Problem (no memory: rows are added to the LP directly).
Problem pairwise_problem(const GroupModel& m) {
  Problem p;
  p.nodes.resize(m.unary.size());
  for (size_t g = 0; g < m.unary.size(); ++g) {
    p.nodes[g].costs = m.unary[g];
    p.nodes[g].usages.assign(m.unary[g].size(), 0);
  }
  p.edges.reserve(m.edges.size());
  for (const auto& e : m.edges) p.edges.push_back({e.a, e.b, e.m});
  return p;
}

struct Node {
  double bound = 0;                          ///< parent's LP value (model cost, no offset)
  std::vector<std::pair<int32_t, bool>> fix;  ///< (x column, fixed to one)
  /// The parent's optimal basis (Clp status per column, then per row as the rows were then):
  /// best-first search jumps across the tree, and a child's LP is a few dual pivots from its
  /// parent's basis but many from whichever node was solved last.
  std::shared_ptr<const std::vector<unsigned char>> basis;
  bool operator>(const Node& o) const { return bound > o.bound; }
};

class BranchAndBound {
 public:
  BranchAndBound(const GroupModel& m, const GroupBnbOptions& opt, Clock::time_point deadline)
      : m_(m), opt_(opt), deadline_(deadline) {}

  GroupBnbResult run(const std::vector<int32_t>& incumbent);

 private:
  double remaining() const { return std::chrono::duration<double>(deadline_ - Clock::now()).count(); }
  void say(const std::string& s) const {
    if (opt_.progress)
      opt_.progress(fmt::format("branch and bound {:.2f}s: {}", std::chrono::duration<double>(Clock::now() - start_).count(), s));
  }
  /// Dual simplex from the current basis; false when stopped by the deadline or failed.
  bool solve_lp();
  /// Adds rows for the segments the LP solution overflows most; returns how many.
  int add_violated_rows(const double* x, bool integral);
  void add_row(int32_t seg);
  void apply(const Node& n);
  /// Group choice of an integral LP solution; false when some group is fractional.
  bool integral_choice(const double* x, std::vector<int32_t>& choice) const;
  /// Each group's heaviest strategy: a feasible candidate when it fits.
  std::vector<int32_t> rounded_choice(const double* x) const;
  void offer(const std::vector<int32_t>& choice);
  /// Builds the marginal LP without memory rows and loads it; false when it is too large.
  bool load_lp();
  /// Rows where the incumbent is fullest: the root LP needs them anyway.
  void seed_rows(const std::vector<int32_t>& incumbent);
  /// Best-first search until the open nodes are exhausted, the gap or cutoff is met, or time is up.
  void search();
  /// The node's LP with row generation; false when stopped by the deadline or failed.  `x` is
  /// the last LP solution read, `choice` its group choice when integral.
  bool solve_node(const double*& x, std::vector<int32_t>& choice);
  /// Branch on the group whose mass is most spread; its heaviest strategy to 1 / to 0.
  void branch(const Node& n, const double* x, double value);

  const GroupModel& m_;
  const GroupBnbOptions& opt_;
  Clock::time_point deadline_;
  Clock::time_point start_ = Clock::now();
  ClpSimplex clp_;
  std::vector<int> x_col_;        ///< first x column per group
  std::vector<double> x_ub_;      ///< the x columns' upper bounds before branching (lower: 0)
  int num_x_ = 0;
  std::vector<char> has_row_;     ///< per segment
  bool rows_changed_ = true;
  /// The basis Clp holds now, when it is the one just saved for the children.
  std::shared_ptr<const std::vector<unsigned char>> held_basis_;
  GroupBnbResult res_;
  Cost inc_ = kInfCost;           ///< incumbent model cost, offset excluded
  std::priority_queue<Node, std::vector<Node>, std::greater<Node>> open_;
  double lb_ = -kInfCost;         ///< model cost, offset excluded
  bool timed_out_ = false;
};

bool BranchAndBound::solve_lp() {
  const double left = remaining();
  if (left <= 0) return false;
  clp_.setMaximumSeconds(left);
  // 1|2|4: keep the factorization and work areas between nodes; not across new rows.
  clp_.dual(0, rows_changed_ ? 0 : 7);
  rows_changed_ = false;
  ++res_.nodes;
  return clp_.status() == 0 || clp_.status() == 1;  // optimal or proven infeasible
}

void BranchAndBound::add_row(int32_t seg) {
  has_row_[sz(seg)] = 1;
  std::vector<double> coef;
  std::vector<int> idx;
  std::vector<double> val;
  for (size_t g = 0; g < m_.pieces.size(); ++g) {
    coef.assign(m_.unary[g].size(), 0.0);
    bool any = false;
    for (const auto& pc : m_.pieces[g])
      if (pc.seg_lo <= seg && seg < pc.seg_hi) {
        for (size_t s = 0; s < coef.size(); ++s) coef[s] += static_cast<double>(pc.du[s]);
        any = true;
      }
    if (!any) continue;
    for (size_t s = 0; s < coef.size(); ++s)
      if (coef[s] != 0) {
        idx.push_back(x_col_[g] + static_cast<int>(s));
        val.push_back(coef[s]);
      }
  }
  const double rhs = static_cast<double>(m_.limit - m_.base[sz(seg)]);
  clp_.addRow(static_cast<int>(idx.size()), idx.data(), val.data(), -COIN_DBL_MAX, rhs);
  rows_changed_ = true;
  ++res_.memory_rows;
}

int BranchAndBound::add_violated_rows(const double* x, bool integral) {
  const int32_t nseg = m_.num_segments();
  std::vector<double> diff(sz(nseg) + 1, 0.0);
  for (size_t g = 0; g < m_.pieces.size(); ++g)
    for (const auto& pc : m_.pieces[g]) {
      double u = 0;
      for (size_t s = 0; s < pc.du.size(); ++s) u += x[x_col_[g] + static_cast<int>(s)] * static_cast<double>(pc.du[s]);
      diff[sz(pc.seg_lo)] += u;
      diff[sz(pc.seg_hi)] -= u;
    }
  // A fractional solution's overflow below a byte per GiB is Clp's tolerance, not a violation.
  const double slack = integral ? 0.5 : std::max(1.0, 1e-9 * static_cast<double>(m_.limit));
  std::vector<std::pair<double, int32_t>> over;
  double run = 0;
  for (int32_t t = 0; t < nseg; ++t) {
    run += diff[sz(t)];
    const double o = static_cast<double>(m_.base[sz(t)]) + run - static_cast<double>(m_.limit);
    if (o > slack && !has_row_[sz(t)]) over.emplace_back(-o, t);
  }
  const size_t k = std::min(over.size(), sz(kRowsPerRound));
  std::partial_sort(over.begin(), over.begin() + static_cast<std::ptrdiff_t>(k), over.end());
  for (size_t i = 0; i < k; ++i) add_row(over[i].second);
  return static_cast<int>(k);
}

void BranchAndBound::apply(const Node& n) {
  for (int c = 0; c < num_x_; ++c) {
    clp_.setColumnLower(c, 0);
    clp_.setColumnUpper(c, x_ub_[sz(c)]);
  }
  for (auto [c, one] : n.fix) (one ? clp_.setColumnLower(c, 1) : clp_.setColumnUpper(c, 0));
  // Right after branching Clp still holds the parent's basis and factorization: keep them.
  const bool held = n.basis == held_basis_;
  held_basis_.reset();
  if (!n.basis || held) return;
  // Rows added since the parent was solved start with their slacks basic.
  const int ncols = clp_.numberColumns(), nrows = clp_.numberRows();
  unsigned char* status = clp_.statusArray();
  // Only the status proper (the low 3 bits); Clp keeps work flags above them.
  for (size_t i = 0; i < n.basis->size(); ++i) status[i] = (*n.basis)[i] & 7;
  for (int r = static_cast<int>(n.basis->size()) - ncols; r < nrows; ++r) clp_.setRowStatus(r, ClpSimplex::basic);
  rows_changed_ = true;  // a new basis: factorize afresh
}

bool BranchAndBound::integral_choice(const double* x, std::vector<int32_t>& choice) const {
  constexpr double kIntegerTolerance = 1e-6;  // CbcModel's default
  choice.assign(m_.unary.size(), 0);
  for (size_t g = 0; g < m_.unary.size(); ++g)
    for (size_t s = 0; s < m_.unary[g].size(); ++s) {
      const double v = x[x_col_[g] + static_cast<int>(s)];
      if (v > 1 - kIntegerTolerance) choice[g] = static_cast<int32_t>(s);
      else if (v > kIntegerTolerance) return false;
    }
  return true;
}

std::vector<int32_t> BranchAndBound::rounded_choice(const double* x) const {
  std::vector<int32_t> choice(m_.unary.size(), 0);
  for (size_t g = 0; g < m_.unary.size(); ++g) {
    const double* xg = x + x_col_[g];
    choice[g] = static_cast<int32_t>(std::max_element(xg, xg + m_.unary[g].size()) - xg);
  }
  return choice;
}

void BranchAndBound::offer(const std::vector<int32_t>& choice) {
  const Cost c = group_cost(m_, choice);
  if (!(c - m_.offset < inc_) || !group_fits(m_, choice)) return;
  inc_ = c - m_.offset;
  res_.found = true;
  res_.choice = choice;
  res_.cost = c;
  say(fmt::format("plan {:.0f} after {} nodes", c, res_.nodes));
}

bool BranchAndBound::load_lp() {
  const int32_t ng = m_.num_groups();
  has_row_.assign(sz(m_.num_segments()), 0);
  std::vector<double> warm_cols;
  const MarginalLp lp = build_marginal_lp(pairwise_problem(m_), {}, false, {}, warm_cols);
  res_.columns = lp.ncols();
  if (res_.columns > opt_.max_columns) return false;
  x_col_.assign(lp.node_col.begin(), lp.node_col.end());
  num_x_ = ng > 0 ? x_col_.back() + static_cast<int>(m_.unary.back().size()) : 0;
  x_ub_.assign(lp.colub.begin(), lp.colub.begin() + num_x_);
  CoinPackedMatrix mat(false, lp.ncols(), lp.nrows(), lp.row_start.back(), lp.val.data(), lp.idx.data(),
                       lp.row_start.data(), nullptr);
  clp_.setLogLevel(0);
  clp_.loadProblem(mat, lp.collb.data(), lp.colub.data(), lp.obj.data(), lp.rlb.data(), lp.rub.data());
  return true;
}

void BranchAndBound::seed_rows(const std::vector<int32_t>& incumbent) {
  const auto usage = group_usage(m_, incumbent);
  std::vector<std::pair<int64_t, int32_t>> full;
  for (int32_t t = 0; t < m_.num_segments(); ++t) full.emplace_back(-usage[sz(t)], t);
  const size_t k = std::min(full.size(), sz(kSeedRows));
  std::partial_sort(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(k), full.end());
  for (size_t i = 0; i < k; ++i)
    if (m_.can_bind(full[i].second)) add_row(full[i].second);
}

bool BranchAndBound::solve_node(const double*& x, std::vector<int32_t>& choice) {
  bool solved = false;
  for (int round = 0;; ++round) {
    if (!(solved = solve_lp())) break;
    if (clp_.status() == 1) break;
    x = clp_.primalColumnSolution();
    const bool integral = integral_choice(x, choice);
    if (round >= kRoundsPerNode && !integral) break;
    if (add_violated_rows(x, integral) == 0) break;
  }
  return solved;
}

void BranchAndBound::branch(const Node& n, const double* x, double value) {
  int32_t best_g = -1, best_s = 0;
  double spread = 0;
  for (int32_t g = 0; g < m_.num_groups(); ++g) {
    const double* xg = x + x_col_[sz(g)];
    const auto s = std::max_element(xg, xg + m_.unary[sz(g)].size()) - xg;
    if (1 - xg[s] > spread) {
      spread = 1 - xg[s];
      best_g = g;
      best_s = static_cast<int32_t>(s);
    }
  }
  const int32_t col = x_col_[sz(best_g)] + best_s;
  const unsigned char* status = clp_.statusArray();
  const auto basis = std::make_shared<const std::vector<unsigned char>>(
      status, status + clp_.numberColumns() + clp_.numberRows());
  for (bool one : {true, false}) {
    Node child{value, n.fix, basis};
    child.fix.emplace_back(col, one);
    open_.push(std::move(child));
  }
  held_basis_ = basis;
}

void BranchAndBound::search() {
  open_.push(Node{-kInfCost, {}, nullptr});
  while (!open_.empty()) {
    Node n = open_.top();
    lb_ = std::max(lb_, n.bound);  // best first: no open node is cheaper
    if (n.bound >= inc_ - kBoundMargin * std::abs(inc_)) {
      lb_ = inc_;
      while (!open_.empty()) open_.pop();
      break;
    }
    if (inc_ < kInfCost && inc_ - lb_ <= opt_.gap * std::abs(inc_ + m_.offset)) break;
    if (lb_ + m_.offset >= opt_.cutoff) break;  // nothing cheaper than the cutoff
    open_.pop();
    apply(n);
    const double* x = nullptr;
    std::vector<int32_t> choice;
    if (!solve_node(x, choice)) {
      open_.push(n);  // its bound still stands
      timed_out_ = true;
      break;
    }
    if (!res_.ran) {
      res_.ran = true;
      say(fmt::format("root LP {:.0f} ({} columns, {} memory rows)",
                      clp_.status() == 0 ? clp_.objectiveValue() + m_.offset : kInfCost, res_.columns,
                      res_.memory_rows));
    }
    if (clp_.status() == 1) continue;  // infeasible under these fixings
    const double value = clp_.objectiveValue();
    if (value >= inc_ - kBoundMargin * std::abs(inc_)) continue;
    if (integral_choice(x, choice)) {
      offer(choice);  // its rows all hold (checked above)
      continue;
    }
    offer(rounded_choice(x));
    branch(n, x, value);
  }
}

GroupBnbResult BranchAndBound::run(const std::vector<int32_t>& incumbent) {
  if (!load_lp()) return res_;
  if (m_.num_groups() == 0) {  // every node was reduced away: the empty choice is the only plan
    res_.ran = res_.proven = true;
    offer({});
    res_.lower_bound = res_.cost;
    return res_;
  }
  if (incumbent.size() == sz(m_.num_groups())) {
    offer(incumbent);
    seed_rows(incumbent);
  }
  say(fmt::format("LP built: {} columns, {} rows", res_.columns, clp_.numberRows()));
  clp_.crash(1000.0, 2);  // Clp's dual crash, as in mip.cc: far fewer iterations than all-slack
  search();
  if (!res_.ran) return res_;
  // Searched out: the incumbent is optimal (up to the pruning margin), or nothing fits.
  res_.proven = open_.empty() && !timed_out_;
  if (res_.proven) {
    res_.lower_bound = res_.cost;
  } else {
    double lb = lb_;
    if (lb > -kInfCost) lb -= kBoundMargin * std::abs(lb);
    res_.lower_bound = std::min(lb + m_.offset, res_.cost);
  }
  return res_;
}

}  // namespace

GroupBnbResult group_branch_and_bound(const GroupModel& m, const std::vector<int32_t>& incumbent,
                                      const GroupBnbOptions& opt) {
  GroupBnbResult res;
  if (m.infeasible) {
    res.proven = true;
    res.lower_bound = kInfCost;
    return res;
  }
  int64_t entries = 0;
  for (const auto& e : m.edges) entries += static_cast<int64_t>(e.m.size());
  if (entries > opt.max_entries || m.limit < 0) return res;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, opt.time_limit_s)));
  BranchAndBound bnb(m, opt, deadline);
  return bnb.run(incumbent);
}

}  // namespace autoshard

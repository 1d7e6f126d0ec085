#include "solver/mip.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CbcEventHandler.hpp>
#include <CbcHeuristic.hpp>
#include <CbcHeuristicFPump.hpp>
#include <CbcHeuristicLocal.hpp>
#include <CbcHeuristicRINS.hpp>
#include <CbcModel.hpp>
#include <CglClique.hpp>
#include <CglFlowCover.hpp>
#include <CglGomory.hpp>
#include <CglKnapsackCover.hpp>
#include <CglMixedIntegerRounding2.hpp>
#include <CglProbing.hpp>
#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#include <OsiClpSolverInterface.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

/// A MIP in row-major form, plus how to read an assignment back from its columns.
struct Lp {
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

/// Class of each of `n` blocks of `len` costs (block i at data + i * stride, elements `step`
/// apart): equal bits, equal class; classes numbered by first appearance.  `reps` receives each
/// class's first block.
std::vector<int32_t> classify(const Cost* data, size_t n, size_t len, size_t stride, size_t step,
                              std::vector<size_t>& reps) {
  std::vector<int32_t> cls(n);
  std::vector<Cost> buf(len), rep_values;
  std::unordered_multimap<size_t, int32_t> by_hash;
  reps.clear();
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < len; ++k) buf[k] = data[i * stride + k * step];
    const std::string_view bytes(reinterpret_cast<const char*>(buf.data()), len * sizeof(Cost));
    const size_t h = std::hash<std::string_view>{}(bytes);
    int32_t found = -1;
    for (auto [it, end] = by_hash.equal_range(h); it != end && found < 0; ++it)
      if (std::memcmp(rep_values.data() + sz(it->second) * len, buf.data(), len * sizeof(Cost)) == 0)
        found = it->second;
    if (found < 0) {
      found = static_cast<int32_t>(reps.size());
      reps.push_back(i);
      rep_values.insert(rep_values.end(), buf.begin(), buf.end());
      by_hash.emplace(h, found);
    }
    cls[i] = found;
  }
  return cls;
}

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

EdgeClasses edge_classes(const std::vector<Cost>& m, size_t ku, size_t kv) {
  EdgeClasses ec;
  std::vector<size_t> row_reps, col_reps;
  ec.row_class = classify(m.data(), ku, kv, kv, 1, row_reps);
  ec.rows = static_cast<int32_t>(row_reps.size());
  // Columns compared on the representative rows only (equal rows give equal entries).
  std::vector<Cost> reduced(row_reps.size() * kv);
  for (size_t a = 0; a < row_reps.size(); ++a)
    std::copy_n(m.data() + row_reps[a] * kv, kv, reduced.data() + a * kv);
  ec.col_class = classify(reduced.data(), kv, row_reps.size(), 1, kv, col_reps);
  ec.cols = static_cast<int32_t>(col_reps.size());
  ec.costs.resize(row_reps.size() * col_reps.size());
  for (size_t a = 0; a < row_reps.size(); ++a)
    for (size_t b = 0; b < col_reps.size(); ++b)
      ec.costs[a * col_reps.size() + b] = reduced[a * kv + col_reps[b]];
  return ec;
}

/// Builds the marginal formulation.  peak_mode: objective is a continuous peak column P and
/// memory rows read "... - P <= -rhs"; edges without forbidden pairs are left out.
/// Returns the full column vector of `warm` in `warm_cols` (empty if warm is unusable).
Lp build_lp(const Problem& p, const std::vector<MemoryRow>& rows, bool peak_mode,
            const std::vector<StrategyIdx>& warm, std::vector<double>& warm_cols) {
  Lp lp;
  const double inf = COIN_DBL_MAX;
  bool warm_ok = warm.size() == sz(p.num_nodes());
  std::vector<double> wc;
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
  for (const ProblemEdge& e : p.edges) {
    const size_t ku = sz(p.nodes[sz(e.u)].num_strategies()), kv = sz(p.nodes[sz(e.v)].num_strategies());
    if (peak_mode && std::all_of(e.costs.begin(), e.costs.end(), [](Cost c) { return c < kInfCost; }))
      continue;
    const EdgeClasses ec = edge_classes(e.costs, ku, kv);
    const StrategyIdx wu = warm_ok ? warm[sz(e.u)] : 0, wv = warm_ok ? warm[sz(e.v)] : 0;
    if (ec.rows == 1 || ec.cols == 1) {
      // The cost depends on one end only: it is that end's node cost (a forbidden pair forbids
      // that end's strategy).
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
      continue;
    }
    std::vector<int> col(ec.costs.size(), -1);
    const size_t won = warm_ok ? sz(ec.row_class[sz(wu)]) * sz(ec.cols) + sz(ec.col_class[sz(wv)]) : 0;
    for (size_t i = 0; i < ec.costs.size(); ++i) {
      if (!(ec.costs[i] < kInfCost)) continue;
      col[i] = lp.add_col(0, 1, peak_mode ? 0 : ec.costs[i], false);
      wc.push_back(warm_ok && i == won ? 1 : 0);
    }
    if (warm_ok && col[won] < 0) warm_ok = false;
    // Marginal rows per class: the class's edge columns sum to its strategies' columns.
    for (int32_t a = 0; a < ec.rows; ++a) {
      for (int32_t b = 0; b < ec.cols; ++b)
        if (int c = col[sz(a) * sz(ec.cols) + sz(b)]; c >= 0) lp.term(c, 1);
      for (size_t q = 0; q < ku; ++q)
        if (ec.row_class[q] == a) lp.term(lp.node_col[sz(e.u)] + static_cast<int>(q), -1);
      lp.end_row(0, 0);
    }
    for (int32_t b = 0; b < ec.cols; ++b) {
      for (int32_t a = 0; a < ec.rows; ++a)
        if (int c = col[sz(a) * sz(ec.cols) + sz(b)]; c >= 0) lp.term(c, 1);
      for (size_t q = 0; q < kv; ++q)
        if (ec.col_class[q] == b) lp.term(lp.node_col[sz(e.v)] + static_cast<int>(q), -1);
      lp.end_row(0, 0);
    }
  }
  if (peak_mode) {
    lp.peak_col = lp.add_col(0, inf, 1, false);
    wc.push_back(warm_ok ? static_cast<double>(rows_peak(p, rows, warm)) : 0);
  }
  if (peak_mode || p.usage_limit >= 0) {
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
  warm_cols.clear();
  if (warm_ok) warm_cols = std::move(wc);
  return lp;
}

// ---- the forked CBC child -------------------------------------------------------------------
enum : char { kMsgSolution = 'S', kMsgBound = 'B', kMsgFinal = 'F' };
/// Final message status: 0 optimal (CBC), 1 stopped, 2 infeasible, 3 optimal by an integral
/// LP relaxation.
constexpr int32_t kFinalIntegralRoot = 3;

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      _exit(3);
    }
    data += w;
    n -= sz(w);
  }
}

std::mutex g_child_write_mutex;

/// Message: type, int32 payload bytes, payload.
void send(int fd, char type, int32_t status, double a, double b, const double* x, int32_t n) {
  std::string buf;
  int32_t len = static_cast<int32_t>(sizeof(int32_t) + 2 * sizeof(double) + sizeof(int32_t) + sz(n) * sizeof(double));
  buf.push_back(type);
  buf.append(reinterpret_cast<const char*>(&len), sizeof len);
  buf.append(reinterpret_cast<const char*>(&status), sizeof status);
  buf.append(reinterpret_cast<const char*>(&a), sizeof a);
  buf.append(reinterpret_cast<const char*>(&b), sizeof b);
  buf.append(reinterpret_cast<const char*>(&n), sizeof n);
  if (n > 0) buf.append(reinterpret_cast<const char*>(x), sz(n) * sizeof(double));
  std::lock_guard<std::mutex> lock(g_child_write_mutex);
  write_all(fd, buf.data(), buf.size());
}

class Streamer : public CbcEventHandler {
 public:
  Streamer(int fd, int ncols) : fd_(fd), ncols_(ncols) {}
  CbcEventHandler* clone() const override { return new Streamer(*this); }
  CbcAction event(CbcEvent which) override {
    if (which == solution || which == heuristicSolution) {
      const double* x = model_->bestSolution();
      const double obj = model_->getObjValue();
      if (x != nullptr && obj < last_obj_) {
        last_obj_ = obj;
        send(fd_, kMsgSolution, 0, obj, model_->getBestPossibleObjValue(), x, ncols_);
      }
    } else if (which == node || which == treeStatus) {
      auto now = Clock::now();
      if (now - last_bound_ > std::chrono::milliseconds(200)) {
        last_bound_ = now;
        send(fd_, kMsgBound, 0, model_->getBestPossibleObjValue(), 0, nullptr, 0);
      }
    }
    return noAction;
  }

 private:
  int fd_;
  int ncols_;
  double last_obj_ = COIN_DBL_MAX;
  Clock::time_point last_bound_ = Clock::now();
};

#if defined(__SANITIZE_ADDRESS__)
#define AUTOSHARD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AUTOSHARD_ASAN 1
#endif
#endif

/// Caps the child's address space at what it has now plus `budget` bytes (default: 3/4 of the
/// machine's memory), so a MIP that outgrows the machine fails inside the child -- whose death
/// the parent treats as "no MIP answer" -- instead of swapping or waking the OOM killer on the
/// whole planner (issue 14).  Not under AddressSanitizer, whose shadow mappings a limit on the
/// address space would break.
void limit_child_memory(int64_t budget) {
#ifndef AUTOSHARD_ASAN
  if (budget <= 0) {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return;
    budget = static_cast<int64_t>(pages) * page / 4 * 3;
  }
  long vm_pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &vm_pages) != 1) vm_pages = 0;
    std::fclose(f);
  }
  rlimit rl{};
  rl.rlim_cur = rl.rlim_max =
      static_cast<rlim_t>(vm_pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) +
      static_cast<rlim_t>(budget);
  ::setrlimit(RLIMIT_AS, &rl);
#else
  (void)budget;
#endif
}

/// Solves the LP relaxation with Clp's dual simplex.  When its optimum is integral it is the
/// MIP's optimum, proven exactly as CBC would prove it at its root (same simplex, same
/// tolerances), and branch and bound -- which solves the root again from scratch and runs its
/// heuristics before it looks -- is skipped.  Planner problems without binding memory are
/// often integral at the root: llama3-8b on 8x8 (118 reduced nodes, 46,665 columns) is, and
/// this halves its MIP time (docs/benchmarks.md, "Round 4").  Returns false when the LP is
/// fractional, infeasible or not solved within `seconds`; CBC then runs as before.
bool solve_integral_root(OsiClpSolverInterface& solver, const Lp& lp, double seconds, int fd) {
  ClpSimplex* clp = solver.getModelPtr();
  clp->setMaximumSeconds(std::max(0.05, seconds));
  // An all-slack start costs ~7,400 dual iterations on the case above; Clp's crash basis
  // ~4,100 (0.5 s instead of 0.8 s).
  clp->crash(1000.0, 2);
  clp->dual();
  clp->setMaximumSeconds(-1);  // CBC, if it follows, keeps the basis and sets its own limit
  if (clp->status() != 0) return false;
  const double* x = clp->primalColumnSolution();
  constexpr double kIntegerTolerance = 1e-6;  // CbcModel's default integer tolerance
  for (int c = 0; c < lp.ncols(); ++c)
    if (lp.is_int[sz(c)] && std::abs(x[c] - std::round(x[c])) > kIntegerTolerance) return false;
  const double obj = clp->objectiveValue();
  send(fd, kMsgFinal, kFinalIntegralRoot, obj, obj, x, lp.ncols());
  return true;
}

[[noreturn]] void run_child(int fd, const Lp& lp, const std::vector<double>& warm_cols,
                            double seconds, const MipOptions& opt) {
  limit_child_memory(opt.memory_budget_bytes);
  OsiClpSolverInterface solver;
  CoinPackedMatrix mat(false, lp.ncols(), lp.nrows(), lp.row_start.back(), lp.val.data(),
                       lp.idx.data(), lp.row_start.data(), nullptr);
  solver.loadProblem(mat, lp.collb.data(), lp.colub.data(), lp.obj.data(), lp.rlb.data(),
                     lp.rub.data());
  for (int c = 0; c < lp.ncols(); ++c)
    if (lp.is_int[sz(c)]) solver.setInteger(c);
  solver.messageHandler()->setLogLevel(0);
  solver.getModelPtr()->messageHandler()->setLogLevel(0);
  const auto started = Clock::now();
  if (solve_integral_root(solver, lp, seconds / 2, fd)) {
    ::close(fd);
    _exit(0);
  }
  seconds -= std::chrono::duration<double>(Clock::now() - started).count();
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);

  CglProbing probing;
  probing.setUsingObjective(1);
  probing.setMaxPass(1);
  probing.setMaxPassRoot(3);
  probing.setMaxProbe(10);
  probing.setMaxProbeRoot(50);
  probing.setMaxLook(10);
  probing.setMaxLookRoot(50);
  probing.setRowCuts(3);
  CglGomory gomory;
  gomory.setLimit(300);
  CglKnapsackCover knapsack;
  CglClique clique;
  clique.setStarCliqueReport(false);
  clique.setRowCliqueReport(false);
  CglMixedIntegerRounding2 mir;
  CglFlowCover flow;
  model.addCutGenerator(&probing, -1, "Probing");
  model.addCutGenerator(&gomory, -1, "Gomory");
  model.addCutGenerator(&knapsack, -1, "Knapsack");
  model.addCutGenerator(&clique, -1, "Clique");
  model.addCutGenerator(&mir, -1, "MIR2");
  model.addCutGenerator(&flow, -1, "FlowCover");
  CbcRounding rounding(model);
  model.addHeuristic(&rounding);
  CbcHeuristicLocal local(model);
  model.addHeuristic(&local);
  CbcHeuristicFPump pump(model);
  model.addHeuristic(&pump);
  CbcHeuristicRINS rins(model);
  model.addHeuristic(&rins);

  Streamer streamer(fd, lp.ncols());
  model.passInEventHandler(&streamer);
  model.setMaximumSeconds(std::max(0.05, seconds));
  model.setAllowableFractionGap(opt.mip_gap);
  model.setAllowableGap(opt.mip_gap > 0 ? 0.0 : 1e-9);
  if (opt.threads > 1) model.setNumberThreads(opt.threads);
  if (!warm_cols.empty()) {
    double wobj = 0;
    for (int c = 0; c < lp.ncols(); ++c) wobj += lp.obj[sz(c)] * warm_cols[sz(c)];
    model.setBestSolution(warm_cols.data(), lp.ncols(), wobj, true);
  }
  model.branchAndBound();
  const double* x = model.bestSolution();
  int32_t status = model.isProvenOptimal() ? 0 : model.isProvenInfeasible() ? 2 : 1;
  if (status == 0 && x == nullptr) status = 2;  // "optimal" with no solution: infeasible
  send(fd, kMsgFinal, status, x ? model.getObjValue() : COIN_DBL_MAX,
       model.getBestPossibleObjValue(), x, x ? lp.ncols() : 0);
  ::close(fd);
  _exit(0);
}

std::vector<StrategyIdx> decode(const Problem& p, const Lp& lp, const double* x) {
  std::vector<StrategyIdx> choice(sz(p.num_nodes()), 0);
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const int c0 = lp.node_col[sz(v)];
    StrategyIdx best = 0;
    for (StrategyIdx q = 1; q < p.nodes[sz(v)].num_strategies(); ++q)
      if (x[c0 + q] > x[c0 + best]) best = q;
    choice[sz(v)] = best;
  }
  return choice;
}

MipResult run_forked(const Problem& p, const Lp& lp, const std::vector<double>& warm_cols,
                     const MipOptions& opt) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(std::max(0.0, opt.time_limit_s));
  MipResult res;
  res.variables = lp.ncols();
  res.constraints = lp.nrows();
  // CBC gets most of the budget so that it normally stops by itself and reports its bound;
  // the parent kills it at the deadline regardless.
  const double child_seconds = opt.time_limit_s * 0.9 - 0.1;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("mip: pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error("mip: fork failed");
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(fds[1], lp, warm_cols, child_seconds, opt);
  }
  ::close(fds[1]);
  const int fd = fds[0];
  std::string buf;
  bool final_seen = false, killed = false;
  char chunk[1 << 16];
  auto report = [&](const char* what) {
    if (!opt.progress) return;
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    opt.progress("mip " + std::string(what) + ": objective " + std::to_string(res.objective) +
                 " bound " + std::to_string(res.bound) + " at " + std::to_string(t) + " s");
  };
  auto parse = [&]() {
    size_t at = 0;
    while (buf.size() - at >= 5) {
      int32_t len;
      std::memcpy(&len, buf.data() + at + 1, sizeof len);
      if (buf.size() - at - 5 < sz(len)) break;
      const char type = buf[at];
      const char* d = buf.data() + at + 5;
      int32_t status, n;
      double a, b;
      std::memcpy(&status, d, 4);
      std::memcpy(&a, d + 4, 8);
      std::memcpy(&b, d + 12, 8);
      std::memcpy(&n, d + 20, 4);
      std::vector<double> x(sz(n));
      if (n > 0) std::memcpy(x.data(), d + 24, sz(n) * sizeof(double));
      at += 5 + sz(len);
      if (type == kMsgBound) {
        res.bound = std::max(res.bound, a);
        report("bound");
        continue;
      }
      if (n == lp.ncols() && a < res.objective) {
        res.objective = a;
        res.choice = decode(p, lp, x.data());
      }
      if (type == kMsgSolution) {
        res.bound = std::max(res.bound, b);
        report("incumbent");
      } else if (type == kMsgFinal) {
        final_seen = true;
        if (status == 0 || status == kFinalIntegralRoot) {
          res.status = MipStatus::kOptimal;
          res.root_integral = status == kFinalIntegralRoot;
          res.bound = std::max(res.bound, std::min(b, res.objective));
        } else if (status == 2) {
          res.status = res.choice.empty() ? MipStatus::kInfeasible : MipStatus::kOptimal;
        } else {
          res.bound = std::max(res.bound, b);
        }
        report("final");
      }
    }
    buf.erase(0, at);
  };
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    const int ms = static_cast<int>(std::ceil(std::chrono::duration<double, std::milli>(deadline - now).count()));
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, std::max(1, ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: child finished (or died)
    buf.append(chunk, sz(got));
    parse();
  }
  ::close(fd);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (killed && opt.progress) opt.progress("mip: killed CBC at the deadline");
  if (!final_seen || res.status == MipStatus::kNoSolution)
    res.status = res.choice.empty() ? MipStatus::kNoSolution : MipStatus::kFeasible;
  if (res.status == MipStatus::kOptimal && res.bound > res.objective) res.bound = res.objective;
  return res;
}

}  // namespace

MipResult solve_cost_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt) {
  std::vector<double> warm_cols;
  Lp lp = build_lp(p, rows, false, warm, warm_cols);
  return run_forked(p, lp, warm_cols, opt);
}

MipResult solve_peak_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt) {
  std::vector<double> warm_cols;
  Lp lp = build_lp(p, rows, true, warm, warm_cols);
  return run_forked(p, lp, warm_cols, opt);
}

}  // namespace autoshard

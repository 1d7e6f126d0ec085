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

#include "solver/marginal_lp.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

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
bool solve_integral_root(OsiClpSolverInterface& solver, const MarginalLp& lp, double seconds, int fd) {
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

[[noreturn]] void run_child(int fd, const MarginalLp& lp, const std::vector<double>& warm_cols,
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

std::vector<StrategyIdx> decode(const Problem& p, const MarginalLp& lp, const double* x) {
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

/// The parent's side of the pipe: the child's length-prefixed messages read into a MipResult.
struct ChildMessages {
  const Problem& p;
  const MarginalLp& lp;
  const MipOptions& opt;
  Clock::time_point t0;
  MipResult& res;
  std::string buf;
  bool final_seen = false;

  void report(const char* what) const {
    if (!opt.progress) return;
    double t = std::chrono::duration<double>(Clock::now() - t0).count();
    opt.progress("mip " + std::string(what) + ": objective " + std::to_string(res.objective) +
                 " bound " + std::to_string(res.bound) + " at " + std::to_string(t) + " s");
  }

  /// Consumes the complete messages at the front of buf.
  void parse() {
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
      handle(type, status, n, a, b, x);
    }
    buf.erase(0, at);
  }

  void handle(char type, int32_t status, int32_t n, double a, double b, const std::vector<double>& x) {
    if (type == kMsgBound) {
      res.bound = std::max(res.bound, a);
      report("bound");
      return;
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
};

/// A steady-clock time in double nanoseconds (the start plus a time limit in seconds).
using ChildDeadline = decltype(Clock::now() + std::chrono::duration<double>(0));

/// Reads the child's pipe until EOF, or until the deadline, when it kills the child; returns
/// whether it did.
bool read_child(int fd, pid_t pid, ChildDeadline deadline, ChildMessages& msgs) {
  char chunk[1 << 16];
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) {
      ::kill(pid, SIGKILL);
      return true;
    }
    const int ms = static_cast<int>(std::ceil(std::chrono::duration<double, std::milli>(deadline - now).count()));
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, std::max(1, ms));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // EOF: child finished (or died)
    msgs.buf.append(chunk, sz(got));
    msgs.parse();
  }
}

MipResult run_forked(const Problem& p, const MarginalLp& lp, const std::vector<double>& warm_cols,
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
  ChildMessages msgs{p, lp, opt, t0, res, {}, false};
  const bool killed = read_child(fd, pid, deadline, msgs);
  ::close(fd);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (killed && opt.progress) opt.progress("mip: killed CBC at the deadline");
  if (!msgs.final_seen || res.status == MipStatus::kNoSolution)
    res.status = res.choice.empty() ? MipStatus::kNoSolution : MipStatus::kFeasible;
  if (res.status == MipStatus::kOptimal && res.bound > res.objective) res.bound = res.objective;
  return res;
}

}  // namespace

MipResult solve_cost_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt) {
  std::vector<double> warm_cols;
  MarginalLp lp = build_marginal_lp(p, rows, false, warm, warm_cols);
  return run_forked(p, lp, warm_cols, opt);
}

MipResult solve_peak_mip(const Problem& p, const std::vector<MemoryRow>& rows,
                         const std::vector<StrategyIdx>& warm, const MipOptions& opt) {
  std::vector<double> warm_cols;
  MarginalLp lp = build_marginal_lp(p, rows, true, warm, warm_cols);
  return run_forked(p, lp, warm_cols, opt);
}

}  // namespace autoshard

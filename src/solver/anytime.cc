#include "solver/anytime.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <ostream>
#include <thread>

#include "problem/iopddl.h"
#include "solver/reduce.h"
#include "solver/group_bnb.h"
#include "solver/local_search.h"
#include "solver/lower_bound.h"
#include "solver/penalty_search.h"

namespace autoshard {

using Clock = std::chrono::steady_clock;

/// Most of the time the search may take from the memory bound's share while it improves.
constexpr double kMaxSearchShare = 0.6;

namespace {

/// One solve: the reduction, the shared incumbent and the result they build up.
struct AnytimeRun {
  const Problem& p;
  const AnytimeOptions& options;
  const Clock::time_point t0 = Clock::now();
  double bound_s = 0;   ///< the memory bound's share
  double search_s = 0;  ///< the search's own share
  Clock::time_point deadline;
  AnytimeResult res;
  GroupReduction red;
  const GroupModel& m;
  SharedIncumbent shared;
  double last_improve_s = 0;  // under shared.mu
  bool warm = false;
  std::atomic<bool> stop{false};

  AnytimeRun(const Problem& p_, const AnytimeOptions& options_)
      : p(p_), options(options_), deadline(budget(options_)), red(p_), m(red.model()) {}

  double since() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
  void say(const std::string& s) const {
    if (options.progress) options.progress(s);
  }

  /// Splits the time limit; returns the search's deadline.
  Clock::time_point budget(const AnytimeOptions& o) {
    const double total_s = std::max(0.0, o.time_limit_s);
    bound_s = std::clamp(o.memory_bound_share, 0.0, 1.0) * total_s;
    // The search has total - bound seconds for sure.  While it still improves (no stall as long
    // as half of that), it runs on into the bound's share, up to kMaxSearchShare of the time: on
    // the recomputation models the plan keeps improving for seconds, and their LP would not
    // reach its root in the time it leaves (docs/benchmarks.md, "Round 6").
    search_s = total_s - bound_s;
    const double search_cap_s = bound_s > 0 ? std::max(search_s, kMaxSearchShare * total_s) : total_s;
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(search_cap_s));
  }

  AnytimeResult run();
  void seed_incumbent();
  void search();
  void wait_for_searches();
  void memory_bound();
  void finish();
};

AnytimeResult AnytimeRun::run() {
  res.reduction_summary = red.summary();
  say(fmt::format("{:.2f}s {}", since(), red.summary()));
  if (m.infeasible) {
    res.lower_bound = kInfCost;
    res.elapsed_s = since();
    say("no finite-cost choice exists");
    return res;
  }
  res.lower_bound = edge_split_lower_bound(m);
  say(fmt::format("{:.2f}s lower bound {:.0f}", since(), res.lower_bound));
  seed_incumbent();
  search();
  if (bound_s > 0 && m.limit >= 0 && m.num_segments() > 0 && res.lower_bound < kInfCost &&
      res.lower_bound < options.cutoff)
    memory_bound();
  finish();
  return res;
}

/// Progress on each improvement, and the warm start as the first incumbent when it fits.
void AnytimeRun::seed_incumbent() {
  shared.start = t0;
  shared.on_improve = [this](Cost c, double t) {
    last_improve_s = t;
    say(fmt::format("{:.2f}s cost {:.0f}", t, c + m.offset));
  };
  if (std::vector<int32_t> w = red.restrict(options.warm_start); !w.empty()) {
    const Cost c = group_cost(m, w);
    if (c < kInfCost && group_fits(m, w)) warm = shared.offer(c - m.offset, w);
  }
}

/// Penalty search (TRW-S + LNS on the memory-penalised pairwise problem, repair, polish,
/// weight bisection) on every thread, seeds differing (and with them the weight growth);
/// with 3+ threads every third one runs the memory-aware LNS from the incumbent instead.
void AnytimeRun::search() {
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, threads);
  std::vector<std::unique_ptr<GroupSearch>> searches;
  std::vector<PenaltySearchStats> pstats(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i)
    searches.push_back(i % 3 != 2 ? nullptr : std::make_unique<GroupSearch>(m, static_cast<uint64_t>(i) + 1));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      if (searches[static_cast<size_t>(i)])
        searches[static_cast<size_t>(i)]->run(deadline, shared, stop);
      else
        run_penalty_search(m, static_cast<uint64_t>(i) + 1, deadline, shared, stop, &pstats[static_cast<size_t>(i)]);
    });
  wait_for_searches();
  stop = true;
  for (auto& t : pool) t.join();
  for (const auto& s : searches)
    if (s) res.proposals += s->stats().proposals;
  for (const auto& s : pstats) {
    res.proposals += s.proposals;
    if (s.rounds > 0) {
      // Floating-point margin: the TRW-S bound sums many reparametrised terms.
      Cost b = s.lower_bound + m.offset;
      res.lower_bound = std::max(res.lower_bound, b - 1e-9 * std::abs(b));
    }
  }
}

/// Until the deadline, or earlier when the incumbent meets the lower bound or stalls.
void AnytimeRun::wait_for_searches() {
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      // The searches publish their TRW-S bound (memory-free, so valid under memory too).
      const Cost published = shared.bound.load() + m.offset;
      // Equal within the bound's floating-point margin (1e-9 relative) counts as met.
      const Cost bound = std::max(res.lower_bound, published + 1e-9 * std::abs(published));
      if (shared.have && shared.cost + m.offset <= bound) break;
      if (bound >= options.cutoff) break;  // nothing cheaper than the cutoff exists
      const double t = since();
      // Stalled -- unless warm-started: the search's own progress then stays hidden above the
      // warm start's cost until it passes it.
      if (!warm && t >= search_s && t - last_improve_s >= search_s / 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Memory binds.  Small models: LP branch and bound from the incumbent (group_bnb.h), whose
/// bound passes the LP relaxation's; larger ones: the Lagrangian bound (subgradient on the
/// segments' rows, TRW-S on the priced problem), which only approaches it.
void AnytimeRun::memory_bound() {
  GroupBnbOptions bo;
  bo.time_limit_s = std::max(0.0, options.time_limit_s - since());
  bo.gap = options.gap;
  bo.cutoff = options.cutoff;
  bo.progress = options.progress;
  std::vector<int32_t> incumbent;
  if (shared.have) incumbent = shared.choice;
  const GroupBnbResult bb = group_branch_and_bound(m, incumbent, bo);
  if (bb.ran) {
    if (bb.found) shared.offer(bb.cost - m.offset, bb.choice);
    say(fmt::format("{:.2f}s branch and bound: bound {:.0f} after {} LPs, {} memory rows{}", since(),
                    bb.lower_bound, bb.nodes, bb.memory_rows, bb.proven ? " (proven)" : ""));
    res.lower_bound = std::max(res.lower_bound, bb.lower_bound);
  } else if (const double left = options.time_limit_s - since(); left > 0.05) {
    const Cost target = shared.have ? shared.cost + m.offset : res.lower_bound * 1.5 + 1;
    Cost b = lagrangian_memory_bound(m, target, left);
    b -= 1e-9 * std::abs(b);  // the TRW-S sums' floating-point margin, as above
    say(fmt::format("{:.2f}s memory-aware bound {:.0f}", since(), b));
    res.lower_bound = std::max(res.lower_bound, b);
  } else {
    say(fmt::format("{:.2f}s branch and bound: no root LP in the time left", since()));
  }
}

/// The incumbent expanded back to the full problem and evaluated there.
void AnytimeRun::finish() {
  if (shared.have) {
    res.choice = red.expand(shared.choice);
    res.cost = evaluate_cost(p, res.choice);
    res.feasible = std::isfinite(res.cost) && (p.usage_limit < 0 || peak_usage(p, res.choice) <= p.usage_limit);
    res.time_to_first_feasible_s = shared.first_feasible_s;
    if (res.feasible && res.cost < res.lower_bound) res.lower_bound = res.cost;  // rounding guard
  }
  res.elapsed_s = since();
}

}  // namespace

AnytimeResult solve_anytime(const Problem& p, const AnytimeOptions& options) {
  return AnytimeRun(p, options).run();
}

int run_iopddl(const std::string& path, double timeout_s, int threads, std::ostream& out) {
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  IopddlInstance inst;
  try {
    inst = read_iopddl(path);
  } catch (const std::exception& e) {
    out << "# error: " << e.what() << "\n[]" << std::endl;
    return 1;
  }
  out << fmt::format("# read {}: {} nodes, {} edges in {:.2f}s", path, inst.problem.num_nodes(),
                     inst.problem.num_edges(), since())
      << std::endl;
  // Leave a margin for expansion, evaluation and printing (and for a slow machine).
  double margin = std::max(0.3, 0.04 * timeout_s);
  AnytimeOptions opt;
  opt.time_limit_s = std::max(0.05, timeout_s - since() - margin);
  opt.threads = threads;
  opt.progress = [&](const std::string& s) { out << "# " << s << std::endl; };
  AnytimeResult r = solve_anytime(inst.problem, opt);
  std::string line = "[";
  if (r.feasible || !r.choice.empty()) {
    IopddlEvaluation ev = evaluate(inst, r.choice);
    out << fmt::format("# final cost {} ({}), lower bound {:.0f}, first feasible {:.2f}s, {} moves, total {:.2f}s",
                       ev.cost_str, ev.feasible ? "feasible" : ev.message, r.lower_bound,
                       r.time_to_first_feasible_s, r.proposals, since())
        << std::endl;
    if (ev.feasible)
      for (size_t i = 0; i < r.choice.size(); ++i) line += (i ? ", " : "") + std::to_string(r.choice[i]);
    r.feasible = ev.feasible;
  } else {
    out << "# no feasible solution found" << std::endl;
  }
  out << line << "]" << std::endl;
  return r.feasible ? 0 : 1;
}

}  // namespace autoshard

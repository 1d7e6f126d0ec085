#include "solver/penalty_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "solver/trws.h"

namespace autoshard {

namespace {

using Clock = std::chrono::steady_clock;

/// Initial weight scale: median over groups of (unary spread) / (largest usage spread), so that
/// the first penalties are of the order of the costs they compete with.
double initial_weight(const GroupModel& m) {
  std::vector<double> ratios;
  for (int32_t g = 0; g < m.num_groups(); ++g) {
    const auto& u = m.unary[static_cast<size_t>(g)];
    double spread = *std::max_element(u.begin(), u.end()) - *std::min_element(u.begin(), u.end());
    int64_t du = 0;
    for (const auto& pc : m.pieces[static_cast<size_t>(g)]) du = std::max(du, *std::max_element(pc.du.begin(), pc.du.end()));
    if (spread > 0 && du > 0) ratios.push_back(spread / static_cast<double>(du));
  }
  double w0 = 1.0;
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + static_cast<long>(ratios.size() / 2), ratios.end());
    w0 = ratios[ratios.size() / 2];
  }
  return w0;
}

/// One weight per memory piece with its bisection bracket [lo, hi], and the per-strategy
/// penalties the weights induce on each group.
struct PieceWeights {
  static constexpr double kInf = 1e300;  ///< an open bracket's upper end
  std::vector<std::vector<double>> w, lo, hi;
  std::vector<std::vector<double>> pen;
  double w0;
  double expand;  ///< bracket growth while a weight is unbracketed

  PieceWeights(const GroupModel& m, double w0_, double expand_) : w0(w0_), expand(expand_) {
    const size_t ng = static_cast<size_t>(m.num_groups());
    w.resize(ng), lo.resize(ng), hi.resize(ng), pen.resize(ng);
    for (size_t g = 0; g < ng; ++g) {
      size_t np = m.pieces[g].size();
      w[g].assign(np, 0.0);
      lo[g].assign(np, 0.0);
      hi[g].assign(np, kInf);
      pen[g].assign(m.unary[g].size(), 0.0);
    }
  }

  /// pen[g][s] = sum over g's pieces k of w_k · du_k[s].
  void fill_penalties(const GroupModel& m) {
    for (int32_t g = 0; g < m.num_groups(); ++g) {
      auto& pg = pen[static_cast<size_t>(g)];
      std::fill(pg.begin(), pg.end(), 0.0);
      const auto& pcs = m.pieces[static_cast<size_t>(g)];
      for (size_t k = 0; k < pcs.size(); ++k) {
        double wk = w[static_cast<size_t>(g)][k];
        if (wk == 0) continue;
        for (size_t s = 0; s < pg.size(); ++s) pg[s] += wk * static_cast<double>(pcs[k].du[s]);
      }
    }
  }

  /// Bisects each weight (in log space) on whether `relaxed` overflows inside its piece.
  void bisect(const GroupModel& m, const GroupSearch& relaxed) {
    for (int32_t g = 0; g < m.num_groups(); ++g) {
      const auto& pcs = m.pieces[static_cast<size_t>(g)];
      for (size_t k = 0; k < pcs.size(); ++k) {
        double& wk = w[static_cast<size_t>(g)][k];
        double& l = lo[static_cast<size_t>(g)][k];
        double& h = hi[static_cast<size_t>(g)][k];
        bool over = relaxed.range_max(pcs[k].seg_lo, pcs[k].seg_hi) > m.limit;
        if (over) {
          l = wk;
          if (h < kInf && h < 1.05 * l) h = 2 * l + w0 * 1e-9;  // reopen a stale bracket
          wk = h >= kInf ? (wk == 0 ? w0 : expand * wk) : (l == 0 ? h / expand : std::sqrt(l * h));
        } else {
          h = wk;
          if (l > 0 && l > h / 1.05) l = h / 2;
          wk = l == 0 ? wk / expand : std::sqrt(l * h);
          if (wk < w0 * 1e-9) wk = 0;
        }
      }
    }
  }
};

/// One thread's rounds: relax memory into penalties, optimise, repair, polish, bisect.
struct PenaltyRounds {
  static constexpr int64_t kPerRound = 3000;
  static constexpr int kTrwsIters = 10;
  /// Stagnation: after kStall rounds without a new incumbent (from any thread), spend as long
  /// as those rounds took on memory-aware LNS from the incumbent (it keeps improving where the
  /// rounds have stalled), then resume the rounds.
  static constexpr int kStall = 8;

  const GroupModel& m;
  Clock::time_point deadline;
  SharedIncumbent& shared;
  const std::atomic<bool>& stop;
  PenaltySearchStats* stats;
  bool verbose;
  const bool memory;
  const bool keep_prev;  ///< half the threads: more exploitation
  GroupSearch relaxed, polish;
  PieceWeights weights;
  const Clock::time_point t0 = Clock::now();
  Trws trws;
  std::vector<int32_t> prev;
  GroupSearch lns;
  int64_t seen_version = 0;
  int stalled = 0;
  Clock::time_point stall_start;

  PenaltyRounds(const GroupModel& m_, uint64_t seed, Clock::time_point deadline_, SharedIncumbent& shared_,
                const std::atomic<bool>& stop_, PenaltySearchStats* stats_, bool verbose_)
      : m(m_), deadline(deadline_), shared(shared_), stop(stop_), stats(stats_), verbose(verbose_),
        memory(m_.limit >= 0 && m_.num_segments() > 0), keep_prev((seed & 1) == 0), relaxed(m_, seed),
        polish(m_, seed + 7777), weights(m_, initial_weight(m_), (seed & 1) ? 16.0 : 8.0), trws(m_),
        lns(m_, seed + 15551) {}

  bool done() const { return stop.load(std::memory_order_relaxed) || Clock::now() >= deadline; }

  void run() {
    // The least-memory start (polish's initial state) is often feasible: a first answer at once.
    if (polish.overflow() == 0 && polish.bad() == 0) shared.offer(polish.cost(), polish.state());
    seen_version = shared.version.load();
    stall_start = Clock::now();
    for (int64_t round = 0; !done(); ++round) {
      const auto round_start = Clock::now();
      if (lns_if_stalled(round_start)) continue;
      weights.fill_penalties(m);
      if (!relax(round)) break;
      repair_and_polish(round, round_start);
      if (memory) weights.bisect(m, relaxed);
    }
    if (stats) stats->proposals += relaxed.stats().proposals + polish.stats().proposals + lns.stats().proposals;
  }

  /// Counts rounds without a new incumbent; past kStall, runs the LNS phase and returns true.
  bool lns_if_stalled(Clock::time_point round_start) {
    if (int64_t v = shared.version.load(); v != seen_version) {
      seen_version = v;
      stalled = 0;
      stall_start = round_start;
      return false;
    }
    if (++stalled <= kStall) return false;
    std::vector<int32_t> from;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.have) from = shared.choice;
    }
    if (!from.empty()) {
      lns.set_state(from);
      lns.run(std::min(deadline, Clock::now() + (round_start - stall_start)), shared, stop);
      if (stats) ++stats->lns_phases;
    }
    seen_version = shared.version.load();
    stalled = 0;
    stall_start = Clock::now();
    return true;
  }

  /// (forbidden pairs, cost + penalties) of the relaxed state.
  std::pair<int64_t, double> penalised() const {
    double v = relaxed.cost();
    for (int32_t g = 0; g < m.num_groups(); ++g)
      v += weights.pen[static_cast<size_t>(g)][static_cast<size_t>(relaxed.state()[static_cast<size_t>(g)])];
    return std::make_pair(relaxed.bad(), v);
  }

  /// TRW-S on the penalised problem, then the relaxed moves; false when the deadline came first.
  bool relax(int64_t round) {
    for (int it = 0, n = round == 0 ? 3 * kTrwsIters : kTrwsIters; it < n && !done(); ++it)
      trws.iterate(1, &weights.pen);
    if (done()) return false;
    if (round == 0) {
      const double b = trws.lower_bound(nullptr);
      shared.publish_bound(b);
      if (stats) stats->lower_bound = std::max(stats->lower_bound, b);
    }
    // The labeling itself, when it fits, is a candidate: where the LP relaxation is tight
    // TRW-S labels the optimum long before the moves below reach it (llama3-70b on 8x8x8:
    // labeled after 0.23 s, reached by the moves after 2.9 s).
    lns.set_state(trws.labeling());
    if (lns.overflow() == 0 && lns.bad() == 0) shared.offer(lns.cost(), lns.state());
    relaxed.set_penalty(&weights.pen);
    // Continue from whichever is better under the new penalties: the previous relaxed state
    // (LNS-improved) or the TRW-S labeling.
    prev = relaxed.state();
    auto prev_key = penalised();
    relaxed.set_state(trws.labeling());
    if (round > 0 && keep_prev && prev_key < penalised()) relaxed.set_state(prev);
    for (int64_t done_moves = 0; done_moves < kPerRound && !done(); done_moves += 256) relaxed.moves(256);
    if (stats) { ++stats->rounds; }
    return true;
  }

  /// Repair and polish (skipped while the relaxed peak is far above the limit, once some
  /// feasible solution exists: the repair would be slow and poor).
  void repair_and_polish(int64_t round, Clock::time_point round_start) {
    bool far = memory && relaxed.peak() - m.limit > m.limit;
    bool have;
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      have = shared.have;
    }
    bool ok = false;
    if (!(far && have)) {
      polish.set_state(relaxed.state());
      ok = polish.repair(deadline);
    }
    Cost repaired = polish.cost();
    // Without any feasible solution yet, a failed repair is continued by the memory-aware LNS,
    // which accepts moves that lower the overflow.
    if ((ok && polish.bad() == 0) || !have) {
      // Polish for at most as long as the relaxed phase took (memory-aware moves are slower).
      const auto polish_until = Clock::now() + std::max<Clock::duration>(Clock::now() - round_start,
                                                                         std::chrono::milliseconds(20));
      for (int64_t k = 0; k < kPerRound && !done() && Clock::now() < polish_until; k += 64) polish.moves(64);
      if (polish.overflow() == 0 && polish.bad() == 0) {
        shared.offer(polish.cost(), polish.state());
        if (stats) ++stats->repaired;
      }
    }
    if (verbose)
      std::fprintf(stderr, "%.2fs round %ld relaxed cost %.4g peak/limit %.3f bad %ld | repaired %s %.4g -> %.4g\n",
                   std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<long>(round),
                   relaxed.cost(), static_cast<double>(relaxed.peak()) / static_cast<double>(m.limit),
                   static_cast<long>(relaxed.bad()), ok ? "ok" : "FAIL", repaired, polish.cost());
  }
};

}  // namespace

void run_penalty_search(const GroupModel& m, uint64_t seed, std::chrono::steady_clock::time_point deadline,
                        SharedIncumbent& shared, const std::atomic<bool>& stop, PenaltySearchStats* stats,
                        bool verbose) {
  if (m.num_groups() == 0) {
    shared.offer(0, {});
    return;
  }
  PenaltyRounds(m, seed, deadline, shared, stop, stats, verbose).run();
}

}  // namespace autoshard

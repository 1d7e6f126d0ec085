#include "solver/penalty_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "solver/trws.h"

namespace autoshard {

void run_penalty_search(const GroupModel& m, uint64_t seed, std::chrono::steady_clock::time_point deadline,
                        SharedIncumbent& shared, const std::atomic<bool>& stop, PenaltySearchStats* stats,
                        bool verbose) {
  using Clock = std::chrono::steady_clock;
  const int32_t ng = m.num_groups();
  GroupSearch relaxed(m, seed), polish(m, seed + 7777);
  auto done = [&] { return stop.load(std::memory_order_relaxed) || Clock::now() >= deadline; };
  if (ng == 0) {
    shared.offer(0, {});
    return;
  }
  const bool memory = m.limit >= 0 && m.num_segments() > 0;
  // Initial weight scale: median over groups of (unary spread) / (largest usage spread).
  std::vector<double> ratios;
  for (int32_t g = 0; g < ng; ++g) {
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
  constexpr double kInf = 1e300;
  std::vector<std::vector<double>> w(static_cast<size_t>(ng)), lo(static_cast<size_t>(ng)), hi(static_cast<size_t>(ng));
  std::vector<std::vector<double>> pen(static_cast<size_t>(ng));
  for (int32_t g = 0; g < ng; ++g) {
    size_t np = m.pieces[static_cast<size_t>(g)].size();
    w[static_cast<size_t>(g)].assign(np, 0.0);
    lo[static_cast<size_t>(g)].assign(np, 0.0);
    hi[static_cast<size_t>(g)].assign(np, kInf);
    pen[static_cast<size_t>(g)].assign(m.unary[static_cast<size_t>(g)].size(), 0.0);
  }
  const auto t0 = Clock::now();
  const int64_t per_round = 3000;
  const int trws_iters = 10;
  const double expand = (seed & 1) ? 16.0 : 8.0;  // bracket growth while a weight is unbracketed
  Trws trws(m);
  std::vector<int32_t> prev;
  const bool keep_prev = (seed & 1) == 0;  // half the threads: more exploitation
  // The least-memory start (polish's initial state) is often feasible: a first answer at once.
  if (polish.overflow() == 0 && polish.bad() == 0) shared.offer(polish.cost(), polish.state());
  // Stagnation: after kStall rounds without a new incumbent (from any thread), spend as long
  // as those rounds took on memory-aware LNS from the incumbent (it keeps improving where the
  // rounds have stalled), then resume the rounds.
  constexpr int kStall = 8;
  GroupSearch lns(m, seed + 15551);
  int64_t seen_version = shared.version.load();
  int stalled = 0;
  auto stall_start = Clock::now();
  for (int64_t round = 0; !done(); ++round) {
    const auto round_start = Clock::now();
    if (int64_t v = shared.version.load(); v != seen_version) {
      seen_version = v;
      stalled = 0;
      stall_start = round_start;
    } else if (++stalled > kStall) {
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
      continue;
    }
    for (int32_t g = 0; g < ng; ++g) {
      auto& pg = pen[static_cast<size_t>(g)];
      std::fill(pg.begin(), pg.end(), 0.0);
      const auto& pcs = m.pieces[static_cast<size_t>(g)];
      for (size_t k = 0; k < pcs.size(); ++k) {
        double wk = w[static_cast<size_t>(g)][k];
        if (wk == 0) continue;
        for (size_t s = 0; s < pg.size(); ++s) pg[s] += wk * static_cast<double>(pcs[k].du[s]);
      }
    }
    for (int it = 0, n = round == 0 ? 3 * trws_iters : trws_iters; it < n && !done(); ++it) trws.iterate(1, &pen);
    if (done()) break;
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
    relaxed.set_penalty(&pen);
    // Continue from whichever is better under the new penalties: the previous relaxed state
    // (LNS-improved) or the TRW-S labeling.
    auto penalised = [&] {  // (forbidden pairs, cost + penalties) of the relaxed state
      double v = relaxed.cost();
      for (int32_t g = 0; g < ng; ++g)
        v += pen[static_cast<size_t>(g)][static_cast<size_t>(relaxed.state()[static_cast<size_t>(g)])];
      return std::make_pair(relaxed.bad(), v);
    };
    prev = relaxed.state();
    auto prev_key = penalised();
    relaxed.set_state(trws.labeling());
    if (round > 0 && keep_prev && prev_key < penalised()) relaxed.set_state(prev);
    for (int64_t done_moves = 0; done_moves < per_round && !done(); done_moves += 256) relaxed.moves(256);
    if (stats) { ++stats->rounds; }
    // Repair and polish (skipped while the relaxed peak is far above the limit, once some
    // feasible solution exists: the repair would be slow and poor).
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
      for (int64_t k = 0; k < per_round && !done() && Clock::now() < polish_until; k += 64) polish.moves(64);
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
    // Bisect the weights.
    for (int32_t g = 0; g < ng && memory; ++g) {
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
  if (stats) stats->proposals += relaxed.stats().proposals + polish.stats().proposals + lns.stats().proposals;
}

}  // namespace autoshard

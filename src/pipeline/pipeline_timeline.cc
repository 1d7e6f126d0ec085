#include "pipeline/pipeline_timeline.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace autoshard {
namespace {

PipelineOp op(int32_t rank, int32_t stage, int32_t mb, PipeOpKind kind) {
  PipelineOp o;
  o.rank = rank;
  o.stage = stage;
  o.microbatch = mb;
  o.kind = kind;
  return o;
}
PipelineOp op(int32_t rank, int32_t stage, int32_t mb, bool backward) {
  return op(rank, stage, mb, backward ? PipeOpKind::kB : PipeOpKind::kF);
}

/// GPipe and 1F1B: one stage per rank; `warmup` forwards before the first backward.
std::vector<PipelineOp> one_stage_order(int32_t rank, int32_t M, int32_t warmup) {
  std::vector<PipelineOp> out;
  int32_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(op(rank, rank, f, false));
  while (b < M) {
    out.push_back(op(rank, rank, b++, true));
    if (f < M) out.push_back(op(rank, rank, f++, false));
  }
  return out;
}

/// Megatron-LM's interleaved order: the k-th forward (backward) of the rank's v * M runs
/// microbatch (k / (P v)) * P + k mod P on chunk (k mod P v) / P (backward: reversed chunks).
PipelineOp interleaved_op(int32_t rank, int32_t P, int32_t v, int32_t k, bool backward) {
  const int32_t in_group = k % (P * v);
  int32_t chunk = in_group / P;
  if (backward) chunk = v - 1 - chunk;
  const int32_t mb = (k / (P * v)) * P + k % P;
  return op(rank, chunk * P + rank, mb, backward);
}

std::vector<PipelineOp> interleaved_order(int32_t rank, int32_t P, int32_t v, int32_t M) {
  const int32_t total = v * M;
  const int32_t warmup = std::min(total, (P - rank - 1) * 2 + (v - 1) * P);
  std::vector<PipelineOp> out;
  int32_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back(interleaved_op(rank, P, v, f, false));
  while (b < total) {
    if (f < total) out.push_back(interleaved_op(rank, P, v, f++, false));
    out.push_back(interleaved_op(rank, P, v, b++, true));
  }
  return out;
}

/// The ZB1P order of torch's ScheduleInterleavedZeroBubble for rank `rank` (see the header):
/// rounds of R microbatches, forwards visiting the rank's chunks round by round, backwards
/// the chunks in reverse; W of the oldest backward joins each step after the first `rank`.
std::vector<PipelineOp> zero_bubble_order(int32_t rank, int32_t P, int32_t v, int32_t M) {
  const int32_t R = M / std::max(1, M / P);  // microbatches per round
  const int32_t total = v * M;
  const int32_t warmup = std::min(total, (v - 1) * R + (P - 1 - rank));
  auto fwd_stage = [&](int32_t k) { return ((k / R) % v) * P + rank; };
  auto bwd_stage = [&](int32_t k) { return (v - 1 - ((k - warmup) / R) % v) * P + rank; };
  std::vector<int32_t> nf(static_cast<size_t>(P * v), 0), nb = nf, nw = nf;
  auto next_mb = [](std::vector<int32_t>& n, int32_t stage) { return n[static_cast<size_t>(stage)]++; };
  std::vector<PipelineOp> out;
  std::vector<int32_t> backward_steps;  // the step of every backward so far, in order
  size_t weights = 0;
  auto weight = [&] {
    const int32_t st = bwd_stage(backward_steps[weights++]);
    out.push_back(op(rank, st, next_mb(nw, st), PipeOpKind::kW));
  };
  for (int32_t k = 0; k < total + warmup; ++k) {
    if (k < total) {
      const int32_t st = fwd_stage(k);
      out.push_back(op(rank, st, next_mb(nf, st), PipeOpKind::kF));
    }
    if (k < warmup) continue;
    const int32_t st = bwd_stage(k);
    out.push_back(op(rank, st, next_mb(nb, st), PipeOpKind::kB));
    backward_steps.push_back(k);
    if (k - warmup >= rank) weight();
  }
  while (weights < backward_steps.size()) weight();
  return out;
}

/// torch's ScheduleZBVZeroBubble order for rank `rank` (see the header).
std::vector<PipelineOp> zbv_order(int32_t rank, int32_t P, int32_t M) {
  const int32_t n = std::max(2 * P - 1, M);
  const int32_t s0 = rank, s1 = 2 * P - 1 - rank;
  int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<PipelineOp> out;
  auto add = [&](int32_t stage, int32_t mb, PipeOpKind k) {
    if (mb < M) out.push_back(op(rank, stage, mb, k));
  };
  for (int32_t i = 0; i < 2 * (P - rank) - 1; ++i) add(s0, f0++, PipeOpKind::kF);
  for (int32_t i = 0; i < rank; ++i) {
    add(s1, f1++, PipeOpKind::kF);
    add(s0, f0++, PipeOpKind::kF);
  }
  for (int32_t i = 0; i < P - rank; ++i) {
    add(s1, f1++, PipeOpKind::kF);
    add(s1, b1, PipeOpKind::kB);
    add(s1, b1++, PipeOpKind::kW);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(s0, f0++, PipeOpKind::kF);
    add(s0, b0, PipeOpKind::kB);
    add(s0, b0++, PipeOpKind::kW);
    add(s1, f1++, PipeOpKind::kF);
    add(s1, b1, PipeOpKind::kB);
    add(s1, b1++, PipeOpKind::kW);
  }
  int32_t w0 = b0, w1 = b1;
  for (int32_t i = 0; i < rank; ++i) {
    add(s0, b0++, PipeOpKind::kB);
    add(s1, b1++, PipeOpKind::kB);
  }
  for (int32_t i = 0; i < P - rank; ++i) {
    add(s0, b0++, PipeOpKind::kB);
    add(s0, w0++, PipeOpKind::kW);
  }
  while (w1 < b1) add(s1, w1++, PipeOpKind::kW);
  while (w0 < b0) add(s0, w0++, PipeOpKind::kW);
  return out;
}

/// torch's ScheduleDualPipeV order for rank `rank` (see the header).
std::vector<PipelineOp> dualpipev_order(int32_t rank, int32_t P, int32_t M) {
  const int32_t s0 = rank, s1 = 2 * P - 1 - rank;
  std::vector<int32_t> nf(static_cast<size_t>(2 * P), 0), nb = nf;
  std::vector<std::pair<int32_t, int32_t>> waiting;  // (stage, microbatch) of B without W yet
  size_t next_w = 0;
  std::vector<PipelineOp> out;
  auto fwd = [&](int32_t st) { out.push_back(op(rank, st, nf[static_cast<size_t>(st)]++, PipeOpKind::kF)); };
  auto bwd = [&](int32_t st, bool split) {
    const int32_t mb = nb[static_cast<size_t>(st)]++;
    out.push_back(op(rank, st, mb, split ? PipeOpKind::kB : PipeOpKind::kBW));
    if (split) waiting.emplace_back(st, mb);
  };
  auto weight = [&] {
    if (next_w == waiting.size()) return;
    const auto [st, mb] = waiting[next_w++];
    out.push_back(op(rank, st, mb, PipeOpKind::kW));
  };
  for (int32_t i = 0; i < 2 * (P - rank - 1); ++i) fwd(s0);
  for (int32_t i = 0; i < rank + 1; ++i) {
    fwd(s0);
    fwd(s1);
  }
  for (int32_t i = 0; i < P - rank - 1; ++i) {
    bwd(s1, true);
    weight();
    fwd(s1);
  }
  for (int32_t i = 0; i < M - 2 * P + rank + 1; ++i) {
    fwd(s0);  // overlapped with the next (or, first on the last rank, not)
    bwd(s1, false);
    fwd(s1);
    bwd(s0, false);
  }
  for (int32_t i = 0; i < P - rank - 1; ++i) {
    bwd(s1, false);
    fwd(s1);
    bwd(s0, false);
  }
  bool zb = false;
  for (int32_t i = 0; i < rank + 1; ++i) {
    if (i == (rank + 1) / 2 && rank % 2 == 1) zb = true;
    bwd(s1, zb);
    if (i == (rank + 1) / 2 && rank % 2 == 0) zb = true;
    bwd(s0, zb);
  }
  for (int32_t i = 0; i < P - rank - 1; ++i) {
    weight();
    bwd(s0, zb);
  }
  for (int32_t i = 0; i < rank + 1; ++i) weight();
  return out;
}

/// Finish times of F, B and W per (stage, microbatch); negative: not run yet.
struct Done {
  int32_t M = 0;
  std::vector<double> f, b, w;
  double& at(PipeOpKind k, int32_t stage, int32_t mb) {
    return (k == PipeOpKind::kF ? f : k == PipeOpKind::kW ? w : b)[static_cast<size_t>(stage * M + mb)];
  }
};

/// When `o` may start (dependencies only), or a negative value if one has not run yet.
double ready_at(PipelineSchedule s, const PipelineOp& o, int32_t S, int32_t P, const StageTimes& t,
                Done& done) {
  auto after = [&](int32_t stage, PipeOpKind k) {
    const double end = done.at(k, stage, o.microbatch);
    if (end < 0) return -1.0;
    return end + (stage_rank(s, P, stage) != o.rank ? t.p2p_us : 0.0);
  };
  if (o.kind == PipeOpKind::kF) return o.stage == 0 ? 0.0 : after(o.stage - 1, PipeOpKind::kF);
  if (o.kind == PipeOpKind::kW) return after(o.stage, PipeOpKind::kB);
  const double own = after(o.stage, PipeOpKind::kF);
  if (own < 0 || o.stage == S - 1) return own;
  const double next = after(o.stage + 1, PipeOpKind::kB);
  return next < 0 ? -1.0 : std::max(own, next);
}

/// How long `o` runs.
double duration(PipelineSchedule s, const PipelineOp& o, const StageTimes& t) {
  const auto st = static_cast<size_t>(o.stage);
  const double w = t.weight_us.empty() ? 0.0 : t.weight_us[st];
  switch (o.kind) {
    case PipeOpKind::kF: return t.forward_us[st];
    case PipeOpKind::kB: return t.backward_us[st] + (splits_backward(s) ? 0.0 : w);
    case PipeOpKind::kW: return w;
    case PipeOpKind::kBW: return t.backward_us[st] + w;
  }
  return 0;
}

}  // namespace

std::vector<PipelineOp> rank_op_order(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                      int32_t rank) {
  if (std::string why = schedule_problem(s, P, v, M); !why.empty())
    throw std::invalid_argument(why);
  if (rank < 0 || rank >= P) throw std::invalid_argument("pp rank out of range");
  switch (s) {
    case PipelineSchedule::kGPipe: return one_stage_order(rank, M, M);
    case PipelineSchedule::k1F1B: return one_stage_order(rank, M, std::min(P - rank, M));
    case PipelineSchedule::kInterleaved1F1B: return interleaved_order(rank, P, v, M);
    case PipelineSchedule::kInterleavedZeroBubble: return zero_bubble_order(rank, P, v, M);
    case PipelineSchedule::kZBVZeroBubble: return zbv_order(rank, P, M);
    case PipelineSchedule::kDualPipeV: return dualpipev_order(rank, P, M);
  }
  throw std::logic_error("unknown pipeline schedule");
}

PipelineTimeline schedule_timeline(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                   const StageTimes& times) {
  const int32_t S = P * v;
  if (static_cast<int32_t>(times.forward_us.size()) != S ||
      static_cast<int32_t>(times.backward_us.size()) != S ||
      (!times.weight_us.empty() && static_cast<int32_t>(times.weight_us.size()) != S))
    throw std::invalid_argument("stage times: expected " + std::to_string(S) + " stages");
  std::vector<std::vector<PipelineOp>> orders;
  for (int32_t r = 0; r < P; ++r) orders.push_back(rank_op_order(s, P, v, M, r));
  const std::vector<double> unset(static_cast<size_t>(S * M), -1.0);
  Done done{M, unset, unset, unset};
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  std::vector<double> free_at(static_cast<size_t>(P), 0.0);
  // Each pass runs every rank's next op whose inputs exist; a pass that runs nothing while
  // ops remain is a deadlock of the orders.
  for (bool progress = true; progress;) {
    progress = false;
    for (int32_t r = 0; r < P; ++r) {
      auto& ord = orders[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      while (i < ord.size()) {
        PipelineOp& o = ord[i];
        const double ready = ready_at(s, o, S, P, times, done);
        if (ready < 0) break;
        o.start_us = std::max(ready, free_at[static_cast<size_t>(r)]);
        o.end_us = o.start_us + duration(s, o, times);
        free_at[static_cast<size_t>(r)] = o.end_us;
        done.at(o.kind, o.stage, o.microbatch) = o.end_us;
        if (o.kind == PipeOpKind::kBW) done.at(PipeOpKind::kW, o.stage, o.microbatch) = o.end_us;
        ++i;
        progress = true;
      }
    }
  }
  PipelineTimeline tl;
  for (int32_t r = 0; r < P; ++r) {
    if (next[static_cast<size_t>(r)] != orders[static_cast<size_t>(r)].size())
      throw std::logic_error("pipeline schedule deadlocks at pp rank " + std::to_string(r));
    for (const PipelineOp& o : orders[static_cast<size_t>(r)]) {
      tl.ops.push_back(o);
      tl.makespan_us = std::max(tl.makespan_us, o.end_us);
    }
  }
  return tl;
}

InflightPeak order_inflight_peak(const std::vector<PipelineOp>& order, PipelineSchedule s) {
  const bool split = splits_backward(s);
  InflightPeak peak;
  int32_t live = 0, deferred = 0;
  std::vector<int32_t> per_stage;
  for (const PipelineOp& o : order) {
    if (static_cast<size_t>(o.stage) >= per_stage.size()) per_stage.resize(static_cast<size_t>(o.stage) + 1, 0);
    int32_t& mine = per_stage[static_cast<size_t>(o.stage)];
    if (o.kind == PipeOpKind::kF) ++live, ++mine;
    if (o.kind == PipeOpKind::kB && split) ++deferred;
    if (o.kind == PipeOpKind::kW || o.kind == PipeOpKind::kBW || (o.kind == PipeOpKind::kB && !split)) --live, --mine;
    if (o.kind == PipeOpKind::kW) --deferred;
    // Later stages first: the counts compared from the last stage down (per_stage only grows).
    peak.stage_live.resize(per_stage.size(), 0);
    const bool later_heavier = std::lexicographical_compare(peak.stage_live.rbegin(), peak.stage_live.rend(),
                                                            per_stage.rbegin(), per_stage.rend());
    if (live > peak.live || (live == peak.live && later_heavier)) {
      peak.live = live;
      peak.stage_live = per_stage;
    }
    peak.deferred = std::max(peak.deferred, deferred);
  }
  return peak;
}

}  // namespace autoshard

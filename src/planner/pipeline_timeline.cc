#include "planner/pipeline_timeline.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace autoshard {
namespace {

PipelineOp op(int32_t rank, int32_t stage, int32_t mb, bool backward) {
  PipelineOp o;
  o.rank = rank;
  o.stage = stage;
  o.microbatch = mb;
  o.backward = backward;
  return o;
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

/// Finish times of F and B per (stage, microbatch); negative: not run yet.
struct Done {
  int32_t M = 0;
  std::vector<double> f, b;
  double& at(bool backward, int32_t stage, int32_t mb) {
    return (backward ? b : f)[static_cast<size_t>(stage * M + mb)];
  }
};

/// When `o` may start (dependencies only), or a negative value if one has not run yet.
double ready_at(const PipelineOp& o, int32_t S, int32_t P, const StageTimes& t, Done& done) {
  auto after = [&](int32_t stage, bool backward) {
    const double end = done.at(backward, stage, o.microbatch);
    if (end < 0) return -1.0;
    return end + (stage % P != o.rank ? t.p2p_us : 0.0);
  };
  if (!o.backward) return o.stage == 0 ? 0.0 : after(o.stage - 1, false);
  const double own = after(o.stage, false);
  if (own < 0 || o.stage == S - 1) return own;
  const double next = after(o.stage + 1, true);
  return next < 0 ? -1.0 : std::max(own, next);
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
  }
  throw std::logic_error("unknown pipeline schedule");
}

PipelineTimeline schedule_timeline(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                   const StageTimes& times) {
  const int32_t S = P * v;
  if (static_cast<int32_t>(times.forward_us.size()) != S ||
      static_cast<int32_t>(times.backward_us.size()) != S)
    throw std::invalid_argument("stage times: expected " + std::to_string(S) + " stages");
  std::vector<std::vector<PipelineOp>> orders;
  for (int32_t r = 0; r < P; ++r) orders.push_back(rank_op_order(s, P, v, M, r));
  Done done{M, std::vector<double>(static_cast<size_t>(S * M), -1.0),
            std::vector<double>(static_cast<size_t>(S * M), -1.0)};
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
        const double ready = ready_at(o, S, P, times, done);
        if (ready < 0) break;
        const auto st = static_cast<size_t>(o.stage);
        o.start_us = std::max(ready, free_at[static_cast<size_t>(r)]);
        o.end_us = o.start_us + (o.backward ? times.backward_us[st] : times.forward_us[st]);
        free_at[static_cast<size_t>(r)] = o.end_us;
        done.at(o.backward, o.stage, o.microbatch) = o.end_us;
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

}  // namespace autoshard

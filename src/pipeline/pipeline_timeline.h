#pragma once
/// The pipeline schedule as a timeline: every forward and backward of every microbatch on
/// every pp rank, with its start and end, found by running each rank's op order (the order
/// torch.distributed.pipelining's schedule classes issue) against the dependencies between
/// stages.  The report draws it; tests check it against the closed form of
/// pipeline/pipeline_schedule.h, which it reproduces for equal stages.
///
/// Op orders per rank r of P (stage s runs on rank s mod P; v stages per rank):
///   GPipe ........... every forward (microbatches 0..M-1), then every backward;
///   1F1B ............ min(P - r, M) forwards, then backward / forward alternating, then the
///                     remaining backwards (torch's Schedule1F1B warm-up count);
///   Interleaved1F1B . Megatron-LM's order (Narayanan et al., SC'21; schedules.py
///                     forward_backward_pipelining_with_interleaving): microbatches in groups
///                     of P, chunk by chunk, (P - r - 1) * 2 + (v - 1) * P warm-up forwards,
///                     then one forward and one backward alternating, backwards visiting the
///                     chunks in reverse.
///   InterleavedZeroBubble . torch's ZB1P order (Qi et al., ICLR 2024, ZB-H1 carried to v
///                     looped stages per rank): rounds of R = M / max(1, M / P) microbatches,
///                     (v - 1) R + (P - 1 - r) warm-up forwards (one, not two, per hop from
///                     the last rank), then F and B alternating; after the first r of those
///                     each step also runs the W of the oldest backward; then the
///                     remaining B (each followed by a W past the first r) and the left W.
///   ZBVZeroBubble ... torch's ZB-V order (Qi et al. section 6), stages in a V (rank r holds
///                     stage r and 2P - 1 - r): 2 (P - r) - 1 forwards of chunk 0, r pairs
///                     (chunk 1, chunk 0), P - r triples F B W of chunk 1, then per step
///                     F B W of chunk 0 and F B W of chunk 1, then the cool-down: r pairs of
///                     B (chunk 0, chunk 1), P - r pairs B W of chunk 0, and the left W.
///                     (Generated for max(M, 2P - 1) microbatches, those >= M dropped.)
///   DualPipeV ....... torch's ScheduleDualPipeV order (DeepSeek-V3's DualPipe, Liu et al. 2024,
///                     cut to a V; stages as ZB-V): 2 (P - r - 1) forwards of chunk 0, r + 1
///                     pairs F chunk 0, F chunk 1, P - r - 1 triples B W F of chunk 1, then
///                     M - 2P + r + 1 steps of (F chunk 0 + full backward chunk 1) and (F chunk 1
///                     + full backward chunk 0), P - r - 1 steps full backward chunk 1 and (F
///                     chunk 1 + full backward chunk 0), r + 1 pairs of backwards (split into B
///                     from the middle one on), P - r - 1 (W, backward chunk 0) and the left W.
///                     An overlapped pair runs its two ops one after the other here (what torch
///                     runs without a custom overlap function).
/// For the zero-bubble schedules B is the input-gradient backward and W the weight-gradient
/// backward; the others run B as the whole backward (B + W of StageTimes) and no W.
/// Dependencies: F(s, m) after F(s-1, m); B(s, m) after F(s, m) and B(s+1, m); W(s, m) after
/// B(s, m); a dependency between two ranks adds the point-to-point transfer time.
#include <cstdint>
#include <vector>

#include "pipeline/pipeline_schedule.h"

namespace autoshard {

/// F: forward; B: backward (whole, or its input-gradient part for the zero-bubble schedules);
/// W: the weight-gradient part of a zero-bubble schedule's backward; BW: a zero-bubble
/// schedule's whole backward in one op (DualPipeV's FULL_BACKWARD: B then W).
enum class PipeOpKind : uint8_t { kF, kB, kW, kBW };

struct PipelineOp {
  int32_t rank = 0;        ///< pp rank
  int32_t stage = 0;       ///< stage index in pipeline order
  int32_t microbatch = 0;
  PipeOpKind kind = PipeOpKind::kF;
  double start_us = 0, end_us = 0;
  bool backward() const { return kind != PipeOpKind::kF; }
};

struct PipelineTimeline {
  std::vector<PipelineOp> ops;  ///< in the order each rank runs them, rank by rank
  double makespan_us = 0;       ///< the last op's end
};

/// Stage times per microbatch, in pipeline order (P * v stages).
struct StageTimes {
  std::vector<double> forward_us;
  std::vector<double> backward_us;  ///< the input-gradient part of the backward
  std::vector<double> weight_us;    ///< the weight-gradient part; empty: none (all zero)
  double p2p_us = 0;  ///< one boundary transfer between two ranks (each direction)
};

/// The order in which pp rank `rank` runs its ops (start/end left 0).  Throws
/// std::invalid_argument when (P, v, M) cannot run `s` (schedule_problem()).
std::vector<PipelineOp> rank_op_order(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                      int32_t rank);

/// Runs the ranks' orders against the stage dependencies.  Throws std::invalid_argument for
/// times of the wrong length and std::logic_error if the orders deadlock (a schedule bug).
/// A schedule that does not split the backward runs B for backward_us + weight_us.
PipelineTimeline schedule_timeline(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                   const StageTimes& times);

/// Most microbatches rank `rank` holds activations of at once, in stage-microbatches: +1 at
/// each F, -1 at the op that ends the microbatch's use of them (W when the schedule splits
/// the backward, else B).  `deferred`: the most whose B ran and W did not (their W inputs
/// kept alive), 0 without a split.  Depends on the op order only.
/// `stage_live`: per stage (pipeline index; stages of other ranks 0), how many of that stage's
/// microbatches are live at the moment `live` peaks.  With several stages per rank the peak
/// does not hold the same count of each: on the last rank of Interleaved1F1B the warm-up fills
/// chunk 0 (P microbatches) while the last chunk runs each microbatch's F and B back to back
/// (one at a time; Narayanan et al., SC'21, Fig. 4; torch's ScheduleInterleaved1F1B order), so
/// a last stage holding the logits keeps one microbatch of them, not the rank's average.  Of
/// several moments with the peak count, the one with the most live in the later stages (the
/// last stage's loss activations are the largest a rank keeps).
struct InflightPeak {
  int32_t live = 0;
  int32_t deferred = 0;
  std::vector<int32_t> stage_live;
};
InflightPeak order_inflight_peak(const std::vector<PipelineOp>& order, PipelineSchedule s);

}  // namespace autoshard

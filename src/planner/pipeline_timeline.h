#pragma once
/// The pipeline schedule as a timeline: every forward and backward of every microbatch on
/// every pp rank, with its start and end, found by running each rank's op order (the order
/// torch.distributed.pipelining's schedule classes issue) against the dependencies between
/// stages.  The report draws it; tests check it against the closed form of
/// planner/pipeline_schedule.h, which it reproduces for equal stages.
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
/// Dependencies: F(s, m) after F(s-1, m); B(s, m) after F(s, m) and B(s+1, m); a dependency
/// between two ranks adds the point-to-point transfer time.
#include <cstdint>
#include <vector>

#include "planner/pipeline_schedule.h"

namespace autoshard {

struct PipelineOp {
  int32_t rank = 0;        ///< pp rank
  int32_t stage = 0;       ///< stage index in pipeline order
  int32_t microbatch = 0;
  bool backward = false;   ///< false: forward
  double start_us = 0, end_us = 0;
};

struct PipelineTimeline {
  std::vector<PipelineOp> ops;  ///< in the order each rank runs them, rank by rank
  double makespan_us = 0;       ///< the last op's end
};

/// Stage times per microbatch, in pipeline order (P * v stages).
struct StageTimes {
  std::vector<double> forward_us;
  std::vector<double> backward_us;
  double p2p_us = 0;  ///< one boundary transfer between two ranks (each direction)
};

/// The order in which pp rank `rank` runs its ops (start/end left 0).  Throws
/// std::invalid_argument when (P, v, M) cannot run `s` (schedule_problem()).
std::vector<PipelineOp> rank_op_order(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                      int32_t rank);

/// Runs the ranks' orders against the stage dependencies.  Throws std::invalid_argument for
/// times of the wrong length and std::logic_error if the orders deadlock (a schedule bug).
PipelineTimeline schedule_timeline(PipelineSchedule s, int32_t P, int32_t v, int32_t M,
                                   const StageTimes& times);

}  // namespace autoshard

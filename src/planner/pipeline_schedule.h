#pragma once
/// Pipeline schedules as torch.distributed.pipelining implements them, reduced to the formulas
/// the stage search needs: the pipelined step time of a stage split and the microbatches of
/// activations each pp rank keeps in flight.  Pure functions of per-stage times.
///
/// Model.  The layers are cut into S = P * v contiguous stages; stage i runs on pp rank i mod P
/// (v stages per rank, the looped placement of Interleaved1F1B).  c_i is stage i's time for one
/// microbatch (forward + backward, the point-to-point sends of its boundary and its share
/// o_i / M of the once-per-step optimizer update and gradient reduction, see pipeline.h), and
/// R_r = sum of c_i over rank r's stages.  With M microbatches
///     T = M * max_r R_r + (sum_r R_r - max_r R_r) / v.
/// The first term is the busiest rank's own work; the second the fill and drain.  For v = 1
/// this is Alpa's pipeline latency sum_i c_i + (M - 1) max_i c_i (Zheng et al., OSDI'22, eq. 2),
/// i.e. (M + P - 1) c for equal stages: the bubble (P - 1) / M of GPipe (Huang et al. 2019)
/// and of 1F1B (PipeDream-Flush, Narayanan et al. 2021), which reorders the same work to keep
/// fewer activations.  For v > 1 and equal stages it is M R + (P - 1) R / v: the bubble
/// (P - 1) / (v M) of the interleaved schedule (Narayanan et al., SC'21, section 2.2).
///
/// Activations in flight per rank (in units of one microbatch's activations of the whole rank):
///   GPipe ........... M (every forward runs before the first backward);
///   1F1B ............ min(P - r, M) (rank r runs P - r - 1 warm-up forwards, then one more
///                     before its first backward);
///   Interleaved1F1B . min(v M, 2 (P - r - 1) + (v - 1) P + 1) / v stage-microbatches of 1/v
///                     of the rank each: Megatron-LM's warm-up count for interleaving
///                     (num_warmup_microbatches = (P - r - 1) * 2 + (v - 1) * P), plus the one
///                     in the steady state.
/// torch's ScheduleInterleaved1F1B needs M to be a multiple of P here (Megatron-LM's
/// requirement for the interleaved schedule), so the planner asks for it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace autoshard {

/// torch.distributed.pipelining's Schedule<name> classes the planner can choose.
enum class PipelineSchedule : uint8_t { kGPipe, k1F1B, kInterleaved1F1B };

/// "GPipe", "1F1B", "Interleaved1F1B" (the names of docs/pipeline-format.md / torch's classes).
std::string_view schedule_name(PipelineSchedule s);
/// Parses a schedule name (case-insensitive); nullopt if unknown.
std::optional<PipelineSchedule> parse_schedule(std::string_view s);
/// Every supported schedule, in the order `--schedule auto` tries them.
std::vector<PipelineSchedule> all_schedules();
/// The schedule runs several stages per rank (v > 1).
bool is_interleaved(PipelineSchedule s);

/// Why (P, v, M) cannot run `s`, or "" when it can: v must be 1 for GPipe and 1F1B and >= 2
/// for Interleaved1F1B, whose M must also be a multiple of P.
std::string schedule_problem(PipelineSchedule s, int32_t P, int32_t v, int32_t M);

/// T above for stage times `stage_us` (S = P * v of them, in pipeline order).
double pipelined_step_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M);

/// The fill-and-drain part of T (T minus the busiest rank's M * R).
double bubble_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M);

/// Microbatches of activations (of the whole rank's layers) rank `rank` keeps in flight.
double inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank);

}  // namespace autoshard

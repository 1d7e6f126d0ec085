#pragma once
/// Pipeline schedules as torch.distributed.pipelining implements them, reduced to the formulas
/// the stage search needs: the pipelined step time of a stage split and the microbatches of
/// activations each pp rank keeps in flight.  Pure functions of per-stage times.
///
/// Model.  The layers are cut into S = P * v contiguous stages; stage i runs on pp rank i mod P
/// (v stages per rank, the looped placement of Interleaved1F1B; the V schedules: stage_rank).  c_i is stage i's time for one
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
///
/// Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) split a
/// stage's backward into B (input gradients, which the previous stage waits for) and W
/// (weight gradients, which nothing waits for) and run W in the bubble.  With f, b, w the
/// rank's times of one microbatch, the timeline of torch's orders (pipeline_timeline.h) gives
/// for equal stages
///     T = M (f + b + w) + (P - 1) max(f + b - w, f, b) / v  (found on the timeline):
/// the fill-and-drain of 1F1B shrinks from f + b + w per hop to f + b - w (ZB-H1's bubble,
/// paper section 3.1) while W fits in it, and never below one forward or one B per hop.
/// InterleavedZeroBubble follows it exactly (v = 2, 3, 4 and any f, b, w; test
/// pipeline_timeline_test.cc); ZBVZeroBubble (v = 2) matches it for f = b = w once M >= 2P - 2
/// and runs longer otherwise (its order assumes equal phases, torch's docstring says as
/// much); DualPipeV (v = 2, M >= 2P) matches it for f = b = w.  For unequal stages the
/// planner keeps the interleaved formula and scales its fill-and-drain by a factor k, the
/// share max(f + b - w, f, b) / (f + b + w) (bubble_factor; the planner takes it from the
/// model's layer, pipeline.cc):
///     T = M max_r R_r + k (sum_r R_r - max_r R_r) / v.
/// In flight, a microbatch's activations are counted from its F to its W (an upper bound:
/// after B the runtime keeps only what W reads) and the gradients W reads from B from B to W:
/// inflight_microbatches and deferred_microbatches count both on torch's op orders.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace autoshard {

/// torch.distributed.pipelining's Schedule<name> classes the planner can choose.
enum class PipelineSchedule : uint8_t {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,
  kInterleavedZeroBubble,  ///< ZB1P of Qi et al. (ICLR 2024), v >= 2 stages per rank, looped
  kZBVZeroBubble,          ///< ZB-V of Qi et al. section 6: v = 2 stages per rank in a V
  kDualPipeV,              ///< DeepSeek-V3's DualPipe cut to a V (torch's ScheduleDualPipeV), v = 2
};

/// "GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"
/// (the names of docs/pipeline-format.md; torch's classes are Schedule<name>).
std::string_view schedule_name(PipelineSchedule s);
/// Parses a schedule name (case-insensitive, with or without torch's "Schedule" prefix);
/// nullopt if unknown.
std::optional<PipelineSchedule> parse_schedule(std::string_view s);
/// Every supported schedule.
std::vector<PipelineSchedule> all_schedules();
/// The schedule runs several stages per rank (v > 1) only.
bool is_interleaved(PipelineSchedule s);
/// The schedule splits each backward into its input-gradient part B and its weight-gradient
/// part W and runs W later (the zero-bubble schedules).
bool splits_backward(PipelineSchedule s);
/// The v values the schedule can run, most stages per rank first (the search tries them).
std::vector<int32_t> stages_per_rank_options(PipelineSchedule s);
/// The stages sit in a V on the pp ranks (ZBVZeroBubble, DualPipeV).
bool v_shaped(PipelineSchedule s);
/// The pp rank that runs stage `stage` of P * v: stage mod P (looped), or the V of
/// ZBVZeroBubble and DualPipeV (torch's generate_stage_to_rank_mapping style "v"): stages
/// 0..P-1 on ranks 0..P-1, stages P..2P-1 back on ranks P-1..0, so rank 0 holds the first and
/// the last stage.
int32_t stage_rank(PipelineSchedule s, int32_t P, int32_t stage);

/// Why (P, v, M) cannot run `s`, or "" when it can: v must be 1 for GPipe and 1F1B and >= 2
/// for Interleaved1F1B, whose M must also be a multiple of P; InterleavedZeroBubble takes any
/// v >= 2 and needs M to be a multiple of its rounds max(1, M / P) (torch's check); ZBV needs
/// v = 2; DualPipeV v = 2 and M >= 2P (torch's checks).
std::string schedule_problem(PipelineSchedule s, int32_t P, int32_t v, int32_t M);

/// T above for stage times `stage_us` (S = P * v of them, in pipeline order, looped).
double pipelined_step_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M);

/// The fill-and-drain part of T (T minus the busiest rank's M * R).
double bubble_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M);

/// k above: the share of the 1F1B fill-and-drain a zero-bubble schedule keeps, from per-stage
/// forward, input-gradient and weight-gradient times; 1 for the schedules that do not split
/// the backward (or without times).
double bubble_factor(PipelineSchedule s, const std::vector<double>& forward_us,
                     const std::vector<double>& input_grad_us, const std::vector<double>& weight_grad_us);

/// T of schedule `s` with its stage placement (stage_rank) and bubble factor k.
double pipelined_step_us(PipelineSchedule s, const std::vector<double>& stage_us, int32_t P, int32_t v,
                         int32_t M, double factor);
/// Its fill-and-drain part.
double bubble_us(PipelineSchedule s, const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M,
                 double factor);

/// Microbatches of activations (of the whole rank's layers) rank `rank` keeps in flight.
double inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank);
/// Microbatches of stage `stage`'s own activations its rank keeps at the rank's in-flight peak
/// (InflightPeak::stage_live, at least 1): with one stage per rank inflight_microbatches; with
/// v stages per rank they add up to v x inflight_microbatches but are not equal (the last
/// rank of Interleaved1F1B holds P microbatches of its first chunk and one of its last), so a
/// stage whose kept activations differ from its rank's others (the first with the embedding,
/// the last with the logits) is counted by its own.  A stage then needs its one-microbatch
/// peak plus (this - 1) x its kept activations (pipeline.h, "Memory").
double stage_inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t stage);
/// Of those, the most whose B ran and W did not (their weight-gradient inputs kept alive), in
/// the same units; 0 for the schedules that do not split the backward.
double deferred_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank);

}  // namespace autoshard

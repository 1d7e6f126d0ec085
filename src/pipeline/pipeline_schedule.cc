#include "pipeline/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>

#include "pipeline/pipeline_timeline.h"

namespace autoshard {

std::string_view schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe: return "GPipe";
    case PipelineSchedule::k1F1B: return "1F1B";
    case PipelineSchedule::kInterleaved1F1B: return "Interleaved1F1B";
    case PipelineSchedule::kInterleavedZeroBubble: return "InterleavedZeroBubble";
    case PipelineSchedule::kZBVZeroBubble: return "ZBVZeroBubble";
    case PipelineSchedule::kDualPipeV: return "DualPipeV";
  }
  return "?";
}

std::optional<PipelineSchedule> parse_schedule(std::string_view s) {
  auto lower = [](std::string_view x) {
    std::string r(x);
    for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
  };
  std::string want = lower(s);
  if (want.rfind("schedule", 0) == 0) want = want.substr(8);  // torch's class name
  for (PipelineSchedule k : all_schedules())
    if (lower(schedule_name(k)) == want) return k;
  return std::nullopt;
}

std::vector<PipelineSchedule> all_schedules() {
  return {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved1F1B,
          PipelineSchedule::kInterleavedZeroBubble, PipelineSchedule::kZBVZeroBubble,
          PipelineSchedule::kDualPipeV};
}

bool is_interleaved(PipelineSchedule s) {
  return s == PipelineSchedule::kInterleaved1F1B || v_shaped(s);
}

bool splits_backward(PipelineSchedule s) {
  return s == PipelineSchedule::kInterleavedZeroBubble || v_shaped(s);
}

bool v_shaped(PipelineSchedule s) {
  return s == PipelineSchedule::kZBVZeroBubble || s == PipelineSchedule::kDualPipeV;
}

std::vector<int32_t> stages_per_rank_options(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kInterleaved1F1B: return {4, 3, 2};
    case PipelineSchedule::kInterleavedZeroBubble: return {4, 3, 2};
    case PipelineSchedule::kZBVZeroBubble:
    case PipelineSchedule::kDualPipeV: return {2};
    default: return {1};
  }
}

int32_t stage_rank(PipelineSchedule s, int32_t P, int32_t stage) {
  if (v_shaped(s) && stage >= P) return 2 * P - 1 - stage;
  return stage % P;
}

std::string schedule_problem(PipelineSchedule s, int32_t P, int32_t v, int32_t M) {
  if (P < 1 || v < 1 || M < 1) return fmt::format("P, v and M must be >= 1 (got {}, {}, {})", P, v, M);
  if (v_shaped(s) && v != 2) return fmt::format("{} runs exactly 2 stages per rank (got {})", schedule_name(s), v);
  if (s == PipelineSchedule::kDualPipeV && M < 2 * P)
    return fmt::format("{} needs at least as many microbatches ({}) as stages ({})", schedule_name(s), M, 2 * P);
  if (s == PipelineSchedule::kZBVZeroBubble || s == PipelineSchedule::kDualPipeV) return "";
  if (s == PipelineSchedule::kInterleavedZeroBubble) {
    // torch's own tooling (get_schedule_ops) refuses one stage per rank for it.
    if (v < 2) return fmt::format("{} needs >= 2 stages per rank (got {})", schedule_name(s), v);
    const int32_t rounds = std::max(1, M / P);
    return M % rounds == 0 ? ""
                           : fmt::format("{} needs the microbatches ({}) to be a multiple of its rounds "
                                         "max(1, M / P) = {}", schedule_name(s), M, rounds);
  }
  if (!is_interleaved(s) && v != 1)
    return fmt::format("{} runs one stage per rank (got {})", schedule_name(s), v);
  if (is_interleaved(s)) {
    if (v < 2) return fmt::format("{} needs >= 2 stages per rank (got {})", schedule_name(s), v);
    if (M % P != 0)
      return fmt::format("{} needs the microbatches ({}) to be a multiple of the pp size ({})",
                         schedule_name(s), M, P);
  }
  return "";
}

namespace {
/// Per rank, the sum of its stages' times (stage i on rank stage_rank(s, P, i)).
std::vector<double> rank_times(PipelineSchedule s, const std::vector<double>& stage_us, int32_t P) {
  std::vector<double> r(static_cast<size_t>(P), 0.0);
  for (size_t i = 0; i < stage_us.size(); ++i)
    r[static_cast<size_t>(stage_rank(s, P, static_cast<int32_t>(i)))] += stage_us[i];
  return r;
}
}  // namespace

double bubble_us(PipelineSchedule s, const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M,
                 double factor) {
  (void)M;
  const std::vector<double> r = rank_times(s, stage_us, P);
  const double mx = *std::max_element(r.begin(), r.end());
  const double sum = std::accumulate(r.begin(), r.end(), 0.0);
  return factor * (sum - mx) / v;
}

double pipelined_step_us(PipelineSchedule s, const std::vector<double>& stage_us, int32_t P, int32_t v,
                         int32_t M, double factor) {
  const std::vector<double> r = rank_times(s, stage_us, P);
  const double mx = *std::max_element(r.begin(), r.end());
  return M * mx + bubble_us(s, stage_us, P, v, M, factor);
}

double bubble_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M) {
  return bubble_us(PipelineSchedule::kInterleaved1F1B, stage_us, P, v, M, 1.0);
}

double pipelined_step_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M) {
  return pipelined_step_us(PipelineSchedule::kInterleaved1F1B, stage_us, P, v, M, 1.0);
}

double bubble_factor(PipelineSchedule s, const std::vector<double>& forward_us,
                     const std::vector<double>& input_grad_us, const std::vector<double>& weight_grad_us) {
  if (!splits_backward(s)) return 1.0;
  double kept = 0, all = 0;
  for (size_t i = 0; i < forward_us.size(); ++i) {
    const double f = forward_us[i], b = input_grad_us.at(i), w = weight_grad_us.at(i);
    kept += std::max({f + b - w, f, b});
    all += f + b + w;
  }
  return all > 0 ? kept / all : 1.0;
}

double inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank) {
  switch (s) {
    case PipelineSchedule::kGPipe: return M;
    case PipelineSchedule::k1F1B: return std::min(P - rank, M);
    case PipelineSchedule::kInterleaved1F1B: {
      const int64_t chunks = std::min<int64_t>(int64_t{M} * v, 2 * (P - rank - 1) + int64_t{v - 1} * P + 1);
      return static_cast<double>(chunks) / v;
    }
    case PipelineSchedule::kInterleavedZeroBubble:
    case PipelineSchedule::kZBVZeroBubble:
    case PipelineSchedule::kDualPipeV:  // counted on torch's order (no closed form kept)
      return static_cast<double>(order_inflight_peak(rank_op_order(s, P, v, M, rank), s).live) / v;
  }
  return M;
}

double stage_inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t stage) {
  const int32_t rank = stage_rank(s, P, stage);
  if (v == 1) return inflight_microbatches(s, P, v, M, rank);
  const InflightPeak peak = order_inflight_peak(rank_op_order(s, P, v, M, rank), s);
  const auto at = static_cast<size_t>(stage);
  return std::max(1.0, at < peak.stage_live.size() ? static_cast<double>(peak.stage_live[at]) : 0.0);
}

double deferred_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank) {
  if (!splits_backward(s)) return 0;
  return static_cast<double>(order_inflight_peak(rank_op_order(s, P, v, M, rank), s).deferred) / v;
}

}  // namespace autoshard

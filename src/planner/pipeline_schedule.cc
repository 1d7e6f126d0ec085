#include "planner/pipeline_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>

namespace autoshard {

std::string_view schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe: return "GPipe";
    case PipelineSchedule::k1F1B: return "1F1B";
    case PipelineSchedule::kInterleaved1F1B: return "Interleaved1F1B";
  }
  return "?";
}

std::optional<PipelineSchedule> parse_schedule(std::string_view s) {
  auto lower = [](std::string_view x) {
    std::string r(x);
    for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
  };
  for (PipelineSchedule k : all_schedules())
    if (lower(schedule_name(k)) == lower(s)) return k;
  return std::nullopt;
}

std::vector<PipelineSchedule> all_schedules() {
  return {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved1F1B};
}

bool is_interleaved(PipelineSchedule s) { return s == PipelineSchedule::kInterleaved1F1B; }

std::string schedule_problem(PipelineSchedule s, int32_t P, int32_t v, int32_t M) {
  if (P < 1 || v < 1 || M < 1) return fmt::format("P, v and M must be >= 1 (got {}, {}, {})", P, v, M);
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
/// Per rank, the sum of its stages' times (stage i on rank i mod P).
std::vector<double> rank_times(const std::vector<double>& stage_us, int32_t P) {
  std::vector<double> r(static_cast<size_t>(P), 0.0);
  for (size_t i = 0; i < stage_us.size(); ++i) r[i % static_cast<size_t>(P)] += stage_us[i];
  return r;
}
}  // namespace

double bubble_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M) {
  (void)M;
  const std::vector<double> r = rank_times(stage_us, P);
  const double mx = *std::max_element(r.begin(), r.end());
  const double sum = std::accumulate(r.begin(), r.end(), 0.0);
  return (sum - mx) / v;
}

double pipelined_step_us(const std::vector<double>& stage_us, int32_t P, int32_t v, int32_t M) {
  const std::vector<double> r = rank_times(stage_us, P);
  const double mx = *std::max_element(r.begin(), r.end());
  return M * mx + bubble_us(stage_us, P, v, M);
}

double inflight_microbatches(PipelineSchedule s, int32_t P, int32_t v, int32_t M, int32_t rank) {
  switch (s) {
    case PipelineSchedule::kGPipe: return M;
    case PipelineSchedule::k1F1B: return std::min(P - rank, M);
    case PipelineSchedule::kInterleaved1F1B: {
      const int64_t chunks = std::min<int64_t>(int64_t{M} * v, 2 * (P - rank - 1) + int64_t{v - 1} * P + 1);
      return static_cast<double>(chunks) / v;
    }
  }
  return M;
}

}  // namespace autoshard

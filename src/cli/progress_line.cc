#include "cli/progress_line.h"

#include <fmt/format.h>

#include <cmath>

#include "cli/common.h"

namespace autoshard::cli {

std::string progress_text(const PipelineProgress& p) {
  std::string t = fmt::format("[{:.0f} s] stage solves {}/{}", p.elapsed_s, p.solves_done, p.solves_started);
  if (!p.searching.empty()) t += fmt::format(", {}", p.searching);
  if (std::isfinite(p.best_step_us)) t += fmt::format(", best step {}", format_us(p.best_step_us));
  if (std::isfinite(p.bound_us)) t += fmt::format(", bound {}", format_us(p.bound_us));
  return t;
}

ProgressLine::ProgressLine(std::FILE* out, double min_interval_s) : out_(out), min_interval_s_(min_interval_s) {}

ProgressLine::~ProgressLine() {
  if (drawn_) fmt::print(out_, "\r\033[K");
  std::fflush(out_);
}

PipelineProgressFn ProgressLine::callback() {
  return [this](const PipelineProgress& p) {
    if (last_s_ >= 0 && p.elapsed_s - last_s_ < min_interval_s_) return;
    last_s_ = p.elapsed_s;
    drawn_ = true;
    // \033[K: clear to the end of the line, so a shorter line leaves nothing of the last.
    fmt::print(out_, "\r{}\033[K", progress_text(p));
    std::fflush(out_);
  };
}

}  // namespace autoshard::cli

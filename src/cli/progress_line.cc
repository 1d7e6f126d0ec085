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
  return [this](const PipelineProgress& p) { draw(p.elapsed_s, progress_text(p)); };
}

void ProgressLine::draw(double elapsed_s, const std::string& text, bool force) {
  if (!force && last_s_ >= 0 && elapsed_s - last_s_ < min_interval_s_) return;
  last_s_ = elapsed_s;
  drawn_ = true;
  // \033[K: clear to the end of the line, so a shorter line leaves nothing of the last.
  fmt::print(out_, "\r{}\033[K", text);
  std::fflush(out_);
}

}  // namespace autoshard::cli

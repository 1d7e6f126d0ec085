#pragma once
/// A pipelined plan's progress as one status line on a terminal (issue 41 item 6): stage solves
/// done of those started, the schedule being searched, the best step and bound so far, and the
/// elapsed time, redrawn in place (carriage return) a few times a second.
#include <cstdio>
#include <memory>
#include <string>

#include "pipeline/pipeline_progress.h"

namespace autoshard::cli {

/// The status line's text for `p` (without the carriage return).
std::string progress_text(const PipelineProgress& p);

/// Draws progress_text on `out` (a terminal), at most every `min_interval_s` seconds; the
/// line is erased when the object goes away, so what the command prints next starts clean.
class ProgressLine {
 public:
  explicit ProgressLine(std::FILE* out, double min_interval_s = 0.2);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  /// The callback to hand to PipelineOptions::on_progress (valid while this object lives).
  PipelineProgressFn callback();

 private:
  std::FILE* out_;
  double min_interval_s_;
  double last_s_ = -1;
  bool drawn_ = false;
};

}  // namespace autoshard::cli

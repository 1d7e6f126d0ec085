#pragma once
/// A long command's progress as one status line on a terminal (issue 41 item 6), redrawn in
/// place (carriage return) a few times a second: for a pipelined plan, stage solves done of
/// those started, the schedule being searched, the best step and bound so far, and the elapsed
/// time; for the mesh search, meshes planned and the best so far.
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
  /// Draws `text` at `elapsed_s` (skipped within min_interval_s of the last line drawn, unless
  /// `force`).  Calls must not overlap.
  void draw(double elapsed_s, const std::string& text, bool force = false);

 private:
  std::FILE* out_;
  double min_interval_s_;
  double last_s_ = -1;
  bool drawn_ = false;
};

}  // namespace autoshard::cli

#include "pipeline/pipeline_progress.h"

#include <algorithm>
#include <utility>

namespace autoshard {

PipelineProgressTracker::PipelineProgressTracker(PipelineProgressFn fn) : fn_(std::move(fn)) {}

void PipelineProgressTracker::started(int32_t n) {
  if (!fn_ || n <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  p_.solves_started += n;
  emit();
}

void PipelineProgressTracker::finished() {
  if (!fn_) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++p_.solves_done;
  p_.solves_started = std::max(p_.solves_started, p_.solves_done);
  emit();
}

void PipelineProgressTracker::searching(std::string what) {
  if (!fn_) return;
  std::lock_guard<std::mutex> lock(mu_);
  p_.searching = std::move(what);
  emit();
}

void PipelineProgressTracker::evaluated(double step_us, double bound_us) {
  if (!fn_) return;
  std::lock_guard<std::mutex> lock(mu_);
  p_.best_step_us = std::min(p_.best_step_us, step_us);
  p_.bound_us = std::min(p_.bound_us, bound_us);
  emit();
}

void PipelineProgressTracker::emit() {
  p_.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  fn_(p_);
}

}  // namespace autoshard

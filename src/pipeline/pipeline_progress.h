#pragma once
/// Progress of a pipelined plan (issue 41 item 6): how many stage problems are solved of those
/// started, the best step and lower bound found so far, and the time spent.  The planner feeds
/// a tracker from its worker threads; the CLI draws one status line on a terminal.  Reporting
/// only: nothing the planner decides reads it, so plans do not depend on it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>

namespace autoshard {

struct PipelineProgress {
  int32_t solves_done = 0;     ///< stage problems solved or priced so far
  int32_t solves_started = 0;  ///< done + those running or queued in the current batch
  double best_step_us = std::numeric_limits<double>::infinity();  ///< the best step of the schedules tried
  double bound_us = std::numeric_limits<double>::infinity();      ///< the least bound of the schedules tried
  std::string searching;       ///< the (schedule, v) being searched, e.g. "Interleaved1F1B v=4"
  double elapsed_s = 0;
};

/// Called with a snapshot, under the tracker's lock (calls never overlap).
using PipelineProgressFn = std::function<void(const PipelineProgress&)>;

/// Thread-safe counters behind PipelineProgressFn; without a callback every method is a no-op.
class PipelineProgressTracker {
 public:
  explicit PipelineProgressTracker(PipelineProgressFn fn);
  /// `n` stage problems are about to run.
  void started(int32_t n);
  /// One of them is done.
  void finished();
  /// A (schedule, v) search starts.
  void searching(std::string what);
  /// A (schedule, v) ended with this step and bound (kept where lower).
  void evaluated(double step_us, double bound_us);

 private:
  void emit();  // with mu_ held
  PipelineProgressFn fn_;
  std::mutex mu_;
  PipelineProgress p_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace autoshard

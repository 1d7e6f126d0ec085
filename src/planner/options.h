#pragma once
/// Options of the planner: the knobs users know from Alpa / MASE / AutoParallel.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "cost/collective.h"
#include "cost/memory.h"

namespace autoshard {

struct PlannerOptions {
  CommModel comm_model = CommModel::kNccl;
  /// Per-device memory budget in bytes; -1 means the hardware's memory, 0 means no limit.
  int64_t memory_limit_bytes = -1;
  double time_limit_s = 60;
  double mip_gap = 0;
  int threads = 1;
  /// Drop the fully replicated strategy wherever a node has another one (MASE's option: forces
  /// every shardable tensor to be sharded and shrinks the search space).
  bool skip_fully_replicated = false;
  /// Tie identical repeated layers to one set of decisions (exact cost multiplier).
  bool cluster = true;
  /// Only allow shardings that split a dim evenly.
  bool require_divisible = false;
  /// Memory of parameter state when the graph has no optimizer step of its own.
  OptimizerConfig optimizer;
  /// Verify the solution independently after solving (recompute cost and memory from scratch).
  bool run_checks = true;
  /// Receives one-line progress messages from the phases (the CLI prints them on a terminal).
  std::function<void(std::string_view)> progress;
};

}  // namespace autoshard

#pragma once
/// A stage's backward split in two, as the zero-bubble schedules run it (Qi et al., ICLR
/// 2024, section 2): B, the input-gradient part that the previous stage waits for, and W, the
/// weight-gradient part that nothing downstream needs until the optimizer.
///
/// In a stage graph (pipeline/pipeline_stage.h) a backward op is in B when the gradients the
/// stage sends back (its sent tensors produced in the backward) depend on it, else in W: the
/// matmuls dY^T X of the weights, the reductions of bias and norm gradients, their
/// collectives.  The first stage sends nothing back, so its whole backward is W (torch's
/// stage skips its input-gradient pass too).  The runtime (python/autoshard/pipeline.py)
/// splits the lowered backward graph by the same rule.
#include <cstdint>
#include <vector>

#include "pipeline/pipeline_stage.h"
#include "planner/plan.h"

namespace autoshard {

/// What a node of one microbatch's training step is.
enum class StepPart : uint8_t {
  kForward,     ///< forward (and nodes outside the three phases: placeholders, outputs)
  kInputGrad,   ///< B: a backward node the sent gradients depend on
  kWeightGrad,  ///< W: the rest of the backward
  kOptimizer,   ///< once-per-step update
};

/// Per stage-graph node, its part.
std::vector<StepPart> step_parts(const StageGraph& sg);

/// The outputs of B that W reads (the output gradients B hands to W), each once, in node order.
std::vector<TensorRef> handed_to_weight_grads(const StageGraph& sg, const std::vector<StepPart>& part);

/// One microbatch's time of a stage plan by part (compute + communication of its nodes).
struct PartTimes {
  double forward_us = 0, input_grad_us = 0, weight_grad_us = 0;
  /// Per device, the bytes B produces that W reads (output gradients kept from B to W).
  int64_t kept_for_w_bytes = 0;
};
PartTimes part_times(const StageGraph& sg, const Plan& plan, const Mesh& stage_mesh);

}  // namespace autoshard

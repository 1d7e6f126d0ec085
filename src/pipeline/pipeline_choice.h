#pragma once
/// Which (schedule, v) candidate a pipelined plan keeps once its stages are assembled.  The
/// split search prices a candidate with stage budgets that are shares of a rank's memory
/// (interleaved) or that leave out what a zero-bubble rank keeps for its deferred weight
/// gradients, so the fastest candidate may not fit its ranks once assembled, and a re-plan
/// under the limit can make it far slower (llama3-405b on 8x16x8: ZB-V 16.6 s before assembly,
/// 220 s and still over the limit after).
#include <cstddef>
#include <functional>
#include <vector>

namespace autoshard {

/// A candidate's figures once assembled.
struct AssembledFigures {
  double step_us = 0;
  bool fits = false;  ///< every rank within the memory limit
};

/// The index of the candidate to keep: candidates are assembled (`assemble(i)`, called at most
/// once per index) in order of their pre-assembly step `pre_step_us`, the first of equal steps
/// first; the fitting one with the least assembled step wins, and with none fitting the one with
/// the least assembled step.  Assembly only tightens budgets, so a pre-assembly step bounds the
/// assembled one from below and the search stops at the first candidate whose pre-assembly
/// step is not below the best fitting step.  `pre_step_us` must not be empty.
size_t fastest_fitting(const std::vector<double>& pre_step_us,
                       const std::function<AssembledFigures(size_t)>& assemble);

}  // namespace autoshard

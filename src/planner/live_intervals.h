#pragma once
/// When each graph node's outputs are live in the schedule, and which views hold no bytes of
/// their own: the intervals and usages of build_problem's nodes (problem_builder.h).
#include <cstdint>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace autoshard {

/// Per graph node: whether it is a view (is_alias_op) whose bytes its base holds.  With
/// `views_alias` every view; without (build_problem when recomputation is modelled, whose
/// regions, recompute.h, count each tensor's own uses and would keep a recomputed base alive),
/// the views of parameter state only: a parameter lives through the step anyway, and counting
/// its transpose as a tensor kept for the backward -- times the microbatches in flight --
/// over-counted llama3-405b's first 4-layer stage at t* by 80 GB (171.5 GB against the 91.3 GB
/// of the model without recomputation, for one plan).
std::vector<char> view_aliases(const Graph& g, bool views_alias);

/// Schedule interval [start, end) of every graph node's outputs (see build_problem).  A view
/// that aliases (view_aliases) extends its base's interval to its own uses and holds no bytes
/// of its own.
std::vector<std::pair<int64_t, int64_t>> live_intervals(const Graph& g, bool views_alias = true);
/// The same with view_aliases' flags given (build_problem needs them for the usages too).
std::vector<std::pair<int64_t, int64_t>> live_intervals(const Graph& g, const std::vector<char>& alias);

}  // namespace autoshard

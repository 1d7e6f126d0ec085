#pragma once
/// Generic einsum sharding helper used by the matmul family (see einsum_rules.cc).
#include <string>
#include <string_view>
#include <vector>

#include "strategy/rule.h"

namespace autoshard {

/// An einsum equation with "..." expanded: one letter per operand dim and per output dim.
struct EinsumSpec {
  std::vector<std::string> inputs;
  std::string output;
};

/// Parses "mk,kn->mn" (also "...", implicit output) for operands of the given ranks.  Throws
/// std::invalid_argument when the equation does not match the ranks.
EinsumSpec parse_einsum(std::string_view equation, const std::vector<int64_t>& ranks);

/// Per-mesh-dim rows [output, operand...]: all-R, then batch letters, contracting letters
/// (output P(sum)) and free letters, in that order.  An operand holding a letter as a broadcast
/// size-1 dim stays replicated for that letter; letters repeated inside one operand are skipped.
std::vector<Row> einsum_rows(const EinsumSpec& s, const std::vector<TensorMeta>& in,
                             const TensorMeta& out);

}  // namespace autoshard

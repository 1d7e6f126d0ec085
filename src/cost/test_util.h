#pragma once
/// Helpers for the cost unit tests: meshes and sharding specs written as DTensor strings.
#include <utility>
#include <vector>

#include "mesh/hardware.h"
#include "placement/placement.h"

namespace autoshard::testing {

/// A mesh with unnamed dims on a hardware preset ("h100", "a100", ...).
inline Mesh make_mesh(std::vector<int64_t> shape, const char* hw = "h100") {
  return Mesh(std::move(shape), {}, *hardware_preset(hw));
}

/// A spec from a placement string such as "S(0)R" and a global shape.
inline ShardingSpec spec(const char* placements, std::vector<int64_t> shape, DType dt = DType::kBF16) {
  return ShardingSpec{parse_placements(placements), TensorMeta{std::move(shape), dt}};
}

}  // namespace autoshard::testing

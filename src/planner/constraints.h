#pragma once
/// User constraints on a plan.  Every constraint has a name so that a what-if session can list,
/// remove and re-add them, and so that saved state can record them as plain data.
#include <optional>
#include <string>
#include <vector>

#include "placement/placement.h"

namespace autoshard {

struct Constraint {
  enum class Kind : uint8_t {
    kPin,               ///< a node's output (and optionally inputs) must use given placements
    kParameterMemory,   ///< parameter memory per device within [low, high] x unsharded
  };
  std::string name;
  Kind kind = Kind::kPin;
  // kPin
  std::string node;                                  ///< graph node name
  std::vector<Placement> output;                     ///< placements of output 0
  std::optional<std::vector<std::vector<Placement>>> inputs;  ///< per input, when given
  // kParameterMemory
  double low = 0;
  double high = 1;
};

std::string_view constraint_kind_name(Constraint::Kind k);
/// One-line description, e.g. "pin mm_3 output=S(0)R" or "parameter memory in [0, 0.25]".
std::string describe(const Constraint& c);

}  // namespace autoshard

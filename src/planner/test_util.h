#pragma once
/// Helpers shared by the planner's unit tests.
#include "mesh/hardware.h"

namespace autoshard::testing {

/// The preset every planner golden test plans on.
inline Hardware h100() { return *hardware_preset("h100"); }

}  // namespace autoshard::testing

#include "planner/constraints.h"

#include <fmt/format.h>

namespace autoshard {

std::string_view constraint_kind_name(Constraint::Kind k) {
  switch (k) {
    case Constraint::Kind::kPin: return "pin";
    case Constraint::Kind::kParameterMemory: return "parameter_memory";
  }
  return "?";
}

std::string describe(const Constraint& c) {
  if (c.kind == Constraint::Kind::kParameterMemory)
    return fmt::format("{}: parameter memory per device in [{}, {}] of unsharded", c.name, c.low,
                       c.high);
  std::string s = fmt::format("{}: {} output={}", c.name, c.node, placements_to_string(c.output));
  if (c.inputs) {
    s += " inputs=";
    for (size_t i = 0; i < c.inputs->size(); ++i)
      s += (i ? "," : "") + placements_to_string((*c.inputs)[i]);
  }
  return s;
}

}  // namespace autoshard

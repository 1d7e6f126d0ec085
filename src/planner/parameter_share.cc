#include "planner/parameter_share.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace autoshard {

ParameterShare parameter_share(const Graph& g, const Mesh& mesh, const BuiltProblem& bp) {
  ParameterShare s;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    if (x.kind != NodeKind::kParameter) continue;
    s.total_bytes += static_cast<double>(x.out().bytes());
    const PNodeIdx p = bp.pnode[static_cast<size_t>(i)];
    if (p < 0) continue;
    double least = -1, most = 0;
    for (const Strategy& st : bp.strategies[static_cast<size_t>(p)]) {
      const double local = static_cast<double>(st.outputs.at(0).local_bytes(mesh));
      least = least < 0 ? local : std::min(least, local);
      most = std::max(most, local);
    }
    s.least_bytes += std::max(least, 0.0);
    s.most_bytes += most;
  }
  return s;
}

std::string UnreachableShare::why() const {
  return fmt::format("constraint '{}': {} {:.2f} % of the parameter bytes per device is out of "
                     "reach: every layout holds {} {:.2f} %",
                     constraint, high ? "at most" : "at least", 100 * asked,
                     high ? "at least" : "at most", 100 * reachable);
}

std::string UnreachableShare::remedy() const {
  // Rounded outward to 4 decimals so that the bound written back is reachable.
  const double r = high ? std::ceil(reachable * 1e4) / 1e4 : std::floor(reachable * 1e4) / 1e4;
  // --param-memory takes [LOW,]HIGH: the bound kept is written beside the new one.
  const std::string flag = high ? (other > 0 ? fmt::format("{:.4f},{:.4f}", other, r) : fmt::format("{:.4f}", r))
                                : fmt::format("{:.4f},{:.4f}", r, other);
  return fmt::format("parameter memory: allow {} {:.2f} % (--param-memory {}, add_parameter_memory_constraint({}={:.4f}))",
                     high ? "at least" : "at most", 100 * r, flag, high ? "high" : "low", r);
}

std::vector<UnreachableShare> unreachable_shares(const Graph& g, const Mesh& mesh,
                                                 const BuiltProblem& bp,
                                                 const std::vector<Constraint>& constraints) {
  std::vector<UnreachableShare> out;
  bool computed = false;
  ParameterShare share;
  for (const Constraint& c : constraints) {
    if (c.kind != Constraint::Kind::kParameterMemory) continue;
    if (!computed) share = parameter_share(g, mesh, bp), computed = true;
    if (share.total_bytes <= 0) break;
    // A relative slack of 1e-9 keeps a bound equal to the reachable share (1/8 of evenly
    // split parameters) from failing on rounding.
    if (c.high < 1 && share.least() > c.high * (1 + 1e-9) + 1e-12)
      out.push_back({c.name, true, c.high, share.least(), c.low});
    if (c.low > 0 && share.most() < c.low * (1 - 1e-9) - 1e-12)
      out.push_back({c.name, false, c.low, share.most(), c.high});
  }
  return out;
}

}  // namespace autoshard

#pragma once
/// Helpers for the strategy unit tests: tiny graphs and strategy-name lists.
#include <string>
#include <vector>

#include "mesh/hardware.h"
#include "strategy/strategy.h"

namespace autoshard::testing {

inline Mesh mesh1(int64_t n = 4) { return Mesh({n}, {"tp"}, *hardware_preset("h100")); }
inline Mesh mesh2(int64_t a = 2, int64_t b = 2) {
  return Mesh({a, b}, {"dp", "tp"}, *hardware_preset("h100"));
}

inline TensorMeta T(std::vector<int64_t> shape, DType t = DType::kF32) { return {std::move(shape), t}; }

/// Adds an input placeholder with the given shape.
inline TensorRef input(Graph& g, std::vector<int64_t> shape, DType t = DType::kF32) {
  Node n;
  n.name = "in" + std::to_string(g.size());
  n.kind = NodeKind::kInput;
  n.outputs.push_back(T(std::move(shape), t));
  return {g.add(std::move(n)), 0};
}

/// Adds an op node with several outputs.
inline NodeIdx op(Graph& g, std::string opname, std::vector<TensorRef> in,
                  std::vector<TensorMeta> outs, Attrs attrs = {}) {
  Node n;
  n.name = "op" + std::to_string(g.size());
  n.op = std::move(opname);
  n.inputs = std::move(in);
  n.outputs = std::move(outs);
  n.attrs = std::move(attrs);
  return g.add(std::move(n));
}

inline std::vector<std::string> names(const NodeStrategies& ns) {
  std::vector<std::string> r;
  for (const auto& s : ns.strategies) r.push_back(s.name());
  return r;
}

inline std::vector<std::string> names(const Graph& g, NodeIdx n, const Mesh& m,
                                      StrategyOptions opt = {}) {
  return names(enumerate_strategies(g, n, m, opt));
}

}  // namespace autoshard::testing

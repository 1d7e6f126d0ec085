#pragma once
/// The reading side of io/state_codec.h as one class, internal to io: every value of a payload
/// is checked before use, and an error names the payload's origin and the protobuf field
/// ("problem.edge_u[17]", "graph.nodes[3] ('mm_1').inputs[0]").  The graph, mesh, options,
/// constraints and plan are decoded in state_decode.cc; the built problem, the largest part,
/// in state_decode_problem.cc.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/state.pb.h"
#include "io/state_codec.h"

namespace autoshard {

namespace pb = autoshard::state;

class Decoder {
 public:
  /// Bounds that keep later arithmetic (numel, byte counts, peak sweeps) free of overflow.
  static constexpr int64_t kMaxDim = int64_t{1} << 40;
  static constexpr int64_t kMaxNumel = int64_t{1} << 50;
  static constexpr int64_t kMaxRank = 64;
  static constexpr int64_t kMaxTime = int64_t{1} << 40;
  static constexpr int64_t kMaxUsage = int64_t{1} << 52;
  static constexpr int64_t kMaxMeshDevices = int64_t{1} << 24;

  explicit Decoder(std::string_view origin) : origin_(origin) {}

  /// Throws "ORIGIN: WHERE: WHY" on one line.
  [[noreturn]] void fail(const std::string& where, const std::string& why) const;

  TensorMeta meta(const pb::TensorMeta& x, const std::string& where) const;
  Graph graph(const pb::Graph& x) const;
  Mesh mesh(const pb::Mesh& x) const;
  PlannerOptions options(const pb::Options& x) const;
  std::vector<Constraint> constraints(const google::protobuf::RepeatedPtrField<pb::Constraint>& xs, const Graph& g,
                                      const Mesh& mesh) const;
  /// Strategies of graph node `gi` (kNoNode for none) from a list; counts of specs must be 0 or
  /// the node's, metas default to the graph's.
  std::vector<Strategy> strategies(const pb::StrategyList& x, const Graph& g, NodeIdx gi, int32_t ndim,
                                   const std::string& where) const;
  BuiltProblem problem(const pb::BuiltProblem& x, const Graph& g, const Mesh& mesh) const;
  Plan plan(const pb::Plan& x, const Graph& g, const Mesh& mesh) const;

 private:
  /// `where` is a callable giving the field path (built only on failure: loading decodes
  /// millions of codes).
  template <class Where>
  Placement placement(uint32_t code, const Where& where) const;
  std::vector<Placement> placements(const google::protobuf::RepeatedField<uint32_t>& codes,
                                    const std::string& where) const;

  std::string_view origin_;
};

}  // namespace autoshard

#pragma once
/// The graph IR: a DAG of nodes producing typed tensors, at the granularity of PyTorch's ATen
/// ops.  Graphs come from the built-in models or from traced PyTorch programs (graph JSON).
///
/// Conventions (see docs/graph-format.md):
/// - nodes are stored in a topological order, which is also the schedule used for liveness;
/// - an op node may produce several tensors (e.g. native_layer_norm -> out, mean, rstd);
///   consumers name the exact output with a TensorRef, so there are no getitem nodes;
/// - `op` is the ATen overload packet name ("mm", "native_layer_norm", "sum.dim_IntList"...);
///   `inputs` are the tensor arguments in schema order; non-tensor arguments live in `attrs`
///   under their ATen schema names ("dim", "keepdim", "normalized_shape"...).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/dtype.h"

namespace autoshard {

/// Index of a node in Graph::nodes.
using NodeIdx = int32_t;
inline constexpr NodeIdx kNoNode = -1;

struct TensorMeta {
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_size(dtype); }
  bool operator==(const TensorMeta&) const = default;
};

/// Names one output of one node.
struct TensorRef {
  NodeIdx node = kNoNode;
  int32_t output = 0;
  bool operator==(const TensorRef&) const = default;
  auto operator<=>(const TensorRef&) const = default;
};

enum class NodeKind : uint8_t { kInput, kParameter, kBuffer, kOp, kOutput };
enum class Phase : uint8_t { kForward, kBackward, kOptimizer };

std::string_view node_kind_name(NodeKind k);
std::optional<NodeKind> parse_node_kind(std::string_view s);
std::string_view phase_name(Phase p);
std::optional<Phase> parse_phase(std::string_view s);

/// True for ATen ops whose output is a view of their first input (view, t, transpose,
/// expand, slice, split, detach, ...): the output shares the input's storage, so it holds
/// no bytes of its own and keeps its base alive instead (the memory model's liveness).
/// `_unsafe_view` counts: ATen's schema does not mark it aliasing, but it returns a view.
bool is_alias_op(std::string_view op);

/// A non-tensor op argument.  Lists of ints cover dims, shapes and sizes; nullopt-like values
/// (Python None) are simply absent from the attribute map.
using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>>;
using Attrs = std::map<std::string, AttrValue, std::less<>>;

struct Node {
  std::string name;
  NodeKind kind = NodeKind::kOp;
  std::string op;  ///< ATen op for kOp nodes; empty otherwise.
  Phase phase = Phase::kForward;
  std::vector<TensorRef> inputs;
  std::vector<TensorMeta> outputs;  ///< kOutput nodes have none.
  Attrs attrs;
  std::string module_path;  ///< e.g. "layers.0.attention.wq"; empty when unknown.
  std::string source;       ///< optional "file:line" of the user code.

  bool has_attr(std::string_view key) const { return attrs.find(key) != attrs.end(); }
  int64_t attr_int(std::string_view key, int64_t fallback) const;
  double attr_double(std::string_view key, double fallback) const;
  bool attr_bool(std::string_view key, bool fallback) const;
  std::string attr_string(std::string_view key, std::string_view fallback) const;
  std::vector<int64_t> attr_ints(std::string_view key) const;
  const TensorMeta& out(int i = 0) const { return outputs.at(static_cast<size_t>(i)); }
};

/// A parameter and the tensor holding its gradient (for training graphs).  Both get the same
/// placement, as FSDP/DDP need the gradient laid out like the parameter for the update.
struct GradPair {
  NodeIdx param = kNoNode;
  TensorRef grad;
};

/// A module call the runtime runs eagerly, outside the lowered step, because its code depends
/// on data the trace could not see (an expert loop over `nonzero`, an `.item()` branch; see
/// docs/tracer.md).  The planner still plans its nodes -- the island runs on the planned
/// placements -- but their schedule is the eager one, so the report names it.
struct EagerIsland {
  std::string module;                ///< module path, e.g. "layers.0.moe"; "" is the model
  std::vector<std::string> sources;  ///< "file:line" of the data-dependent reads inside it
};

class Graph {
 public:
  std::string name;
  std::vector<Node> nodes;
  std::vector<GradPair> grad_pairs;
  std::optional<TensorRef> loss;  ///< the scalar loss, if the graph is a training step.
  /// Nodes marking gradients that a runtime feeds from outside ("tangents" in the graph
  /// JSON): the loss's seed and, for a step traced without a loss, the model outputs'
  /// gradients.  What only feeds them does not run (autoshard.partition); kept for the audit.
  std::vector<NodeIdx> tangents;
  std::vector<EagerIsland> islands;  ///< "islands" in the graph JSON; in trace order.

  NodeIdx size() const { return static_cast<NodeIdx>(nodes.size()); }
  const Node& node(NodeIdx i) const { return nodes.at(static_cast<size_t>(i)); }
  Node& node(NodeIdx i) { return nodes.at(static_cast<size_t>(i)); }
  const TensorMeta& meta(TensorRef r) const { return node(r.node).out(r.output); }

  /// Appends a node and returns its index; the name must be unique (checked by validate()).
  NodeIdx add(Node n);
  /// Convenience: adds an op node with one output.
  NodeIdx add_op(std::string name, std::string op, std::vector<TensorRef> inputs, TensorMeta out,
                 Phase phase = Phase::kForward, Attrs attrs = {}, std::string module_path = {});
  std::optional<NodeIdx> find(std::string_view name) const;

  /// For every node, the (consumer, input slot) pairs that read each of its outputs.
  struct Use {
    NodeIdx consumer;
    int32_t slot;
    int32_t output;
  };
  std::vector<std::vector<Use>> uses() const;

  /// Checks structural invariants: unique names, inputs refer to earlier nodes and existing
  /// outputs, op nodes have an op, output nodes produce nothing, grad pairs point at
  /// parameters and gradients of the same shape, the loss names an existing tensor.  Returns
  /// an error message naming the node, or the empty string when the graph is valid.
  std::string validate() const;

  /// Number of parameter elements (sum over kParameter nodes).
  int64_t parameter_count() const;
};

}  // namespace autoshard

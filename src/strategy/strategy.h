#pragma once
/// Candidate sharding strategies of one graph node on the full N-D mesh, following PyTorch
/// DTensor's propagation semantics (facts in ../shared/reference/sharding-rules.md).
///
/// A rule for one op lists, for ONE mesh dim, candidate rows [out placements..., in
/// placements...]; the node's strategies are the Cartesian product of those rows over the mesh
/// dims (mesh dim 0 varies slowest), deduplicated, minus combinations whose specs fail
/// ShardingSpec::valid (a sharded dim must exist and hold at least one element per shard; with
/// `require_divisible` it must split evenly) or a rule-specific check (e.g. flatten needs an even
/// split).  The order is deterministic.
///
/// Partial placements use P(sum) unless stated otherwise; ops that pass Partial through
/// (linear pointwise ops, views, sum/mean) only pass P(sum).  Per-family notes live in the
/// *_rules.cc files.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cost/context_parallel.h"
#include "ir/graph.h"
#include "mesh/mesh.h"
#include "placement/placement.h"

namespace autoshard {

/// Context parallelism of an attention strategy (cost/context_parallel.h): q, k, v and the
/// output split on the sequence dim over `mesh_dim`, the keys/values moved inside the op.  The
/// specs alone cannot say how (ring and all-gather share them), so the strategy carries it.
struct ContextParallel {
  int32_t mesh_dim = -1;  ///< -1: not context parallel
  CpKind kind = CpKind::kRing;
  /// The head-tail layout (2P chunks, rank r holds r and 2P-1-r) of causal attention.
  bool load_balance = false;
  bool active() const { return mesh_dim >= 0; }
  bool operator==(const ContextParallel&) const = default;
};

struct Strategy {
  std::vector<ShardingSpec> outputs;  ///< one per node output (node.outputs)
  std::vector<ShardingSpec> inputs;   ///< one per node input: the spec the op needs there
  ContextParallel cp;                 ///< attention only; inactive elsewhere
  /// "S(0)R <- S(0)R, RR" (outputs <- inputs); a node without inputs prints only its outputs.
  /// A context-parallel attention adds " | cp:ring@0 lb" (kind, mesh dim index, " lb" when
  /// load-balanced), so its two kinds stay distinct strategies.
  std::string name() const;
};

/// The strategies of one problem node, immutable and shared: corresponding nodes of repeated
/// layers have equal strategies, and one copy per node was most of a big problem's memory and
/// build time (llama3-70b on 8x8x8: 2.4 million strategies for 24k nodes).  Reads like a const
/// std::vector<Strategy>; built from one (implicitly, so `lists.push_back(std::move(v))` works).
class StrategyList {
 public:
  StrategyList() = default;
  StrategyList(std::vector<Strategy> v)  // NOLINT(google-explicit-constructor): see above
      : v_(std::make_shared<const std::vector<Strategy>>(std::move(v))) {}
  const std::vector<Strategy>& vec() const { return v_ ? *v_ : none(); }
  size_t size() const { return vec().size(); }
  bool empty() const { return vec().empty(); }
  const Strategy& operator[](size_t k) const { return vec()[k]; }
  const Strategy& at(size_t k) const { return vec().at(k); }
  std::vector<Strategy>::const_iterator begin() const { return vec().begin(); }
  std::vector<Strategy>::const_iterator end() const { return vec().end(); }
  /// Whether both lists are one shared object (not merely equal).
  bool shares(const StrategyList& o) const { return v_ == o.v_; }

 private:
  static const std::vector<Strategy>& none() {
    static const std::vector<Strategy> kEmpty;
    return kEmpty;
  }
  std::shared_ptr<const std::vector<Strategy>> v_;
};

struct StrategyOptions {
  /// Only keep strategies whose sharded dims split evenly over their shards.
  bool require_divisible = false;
  /// Batch norm in training with a batch-sharded input: compute statistics per shard, like
  /// DDP without SyncBatchNorm (the batch statistics outputs are then P(avg)).  When false,
  /// training batch norm can only be channel-sharded or replicated (exact global statistics).
  bool batch_norm_local_stats = true;
  /// Context-parallel attention strategies (attention_rules.cc); off, attention keeps whole
  /// sequences.
  bool context_parallel = true;
  /// Also offer non-default shard orders (strided shards) where the order cannot change the
  /// op's per-device work: leaves and same-shape ops (strategy/shard_orders.h).  Off by default:
  /// the planner does not enable it yet (issue 39), so plans and their strategy lists stay as
  /// they were.
  bool shard_orders = false;
  /// Mesh dims that may cut a later dim of a flattened (or split) group of dims, nested inside
  /// the mesh dims that cut the earlier ones (view_rules.cc, "Nested cuts").  The planner gives
  /// the context-parallel dim (planner/recipes.h context_parallel_dim): its linear layers then
  /// keep the sequence split, as torchtitan's local tensors do, instead of gathering it after
  /// every matmul.  On other dims such a cut is a token split of the linear layers
  /// (DeepSpeed-Ulysses-like), which widens every search: the overlap-aware and pipeline
  /// searches then found plans 3-6 % slower on llama3-8b 8x8 and the 405B pipeline job, so it
  /// is offered on the cp dim only.
  std::vector<MeshDimIdx> nested_view_dims;
};

struct NodeStrategies {
  std::vector<Strategy> strategies;
  bool fallback = false;  ///< the op had no rule: the single all-replicated strategy
  /// kOutput nodes: the inputs accept whatever their producers chose (no redistribution).  The
  /// single strategy lists replicated input specs as placeholders; the planner should not
  /// charge edges into such a node.
  bool any_input = false;
};

/// Bound on the Cartesian product one node may enumerate (rule rows ^ mesh dims); beyond it
/// enumerate_strategies throws std::invalid_argument naming the node.
inline constexpr uint64_t kMaxCandidateStrategies = uint64_t{1} << 20;

/// Strategies of node `n`.  Placeholders (input/parameter/buffer) and creation ops without
/// inputs get every combination of Replicate / Shard(d) per mesh dim (no Partial).  Throws
/// std::invalid_argument naming the node on inconsistent attrs (e.g. a dim out of range).
NodeStrategies enumerate_strategies(const Graph& g, NodeIdx n, const Mesh& mesh,
                                    const StrategyOptions& opt = {});

/// True when `op` ("add.Tensor", "add", "aten.add.Tensor", "add_", ...) has a sharding rule.
bool has_rule(std::string_view op);

/// Every op name (base name or "base.overload") with a registered rule, sorted.
std::vector<std::string> covered_ops();

}  // namespace autoshard

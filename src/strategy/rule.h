#pragma once
/// Internal interface between the strategy engine (strategy.cc) and the per-family rule files.
/// A rule sees one node (OpContext) and returns its per-mesh-dim candidate rows; the engine does
/// the Cartesian product, validity checks and deduplication.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strategy/strategy.h"

namespace autoshard {

/// One mesh dim's candidate: placements of the outputs followed by those of the inputs.
using Row = std::vector<Placement>;

/// Shorthands for the rule tables, which are written in DTensor's letters.
inline const Placement P = Placement::partial(ReduceOp::kSum);
inline const Placement R = Placement::replicate();

/// An op name split into its parts: "aten.add_.Tensor" -> base "add", overload "Tensor",
/// inplace true.  The overload "default" is dropped.
struct OpName {
  std::string base;      ///< without the trailing '_' of in-place variants
  std::string overload;  ///< may be empty
  bool inplace = false;
};
OpName parse_op_name(std::string_view op);

struct OpContext {
  const Graph& graph;
  const Node& node;
  const Mesh& mesh;
  const StrategyOptions& opt;
  OpName op;
  std::vector<TensorMeta> in;  ///< metas of the node's inputs

  size_t n_out() const { return node.outputs.size(); }
  size_t n_in() const { return in.size(); }
  const TensorMeta& out(size_t i) const { return node.outputs.at(i); }
  /// Row index of output i / input i.
  size_t out_slot(size_t i) const { return i; }
  size_t in_slot(size_t i) const { return n_out() + i; }
  /// A row with every tensor replicated.
  Row replicated() const { return Row(n_out() + n_in(), Placement::replicate()); }
  /// Normalizes a possibly negative dim against `rank`; throws naming the node when out of range.
  int32_t norm_dim(int64_t d, int64_t rank) const;
  /// The int attr `key` (a dim), normalized against `rank`.
  int32_t dim_attr(std::string_view key, int64_t fallback, int64_t rank) const;
  [[noreturn]] void fail(std::string_view why) const;
};

/// A whole combination's placements (outputs then inputs, each one placement per mesh dim),
/// offered to a rule's extra check.
using Combo = std::vector<std::vector<Placement>>;

struct RuleResult {
  std::vector<Row> rows;
  /// Optional check of a full combination (after the per-spec validity checks).
  std::function<bool(const Combo&)> accept;
  /// Context-parallel rows (attention_rules.cc): empty, or one entry per row, set for a
  /// row that splits the sequence with K/V moved inside the op.  A combination may use such
  /// rows on one mesh dim only; it becomes a strategy with Strategy::cp on that dim.
  std::vector<std::optional<CpKind>> row_cp;
  bool cp_load_balance = false;  ///< Strategy::cp.load_balance of those strategies
};

using RuleFn = std::function<RuleResult(const OpContext&)>;
/// Keys are base names ("mm") or "base.overload" ("sum.dim_IntList"); the overload-specific key
/// wins.  In-place variants are looked up under their base name.
using RuleTable = std::map<std::string, RuleFn, std::less<>>;

// Registration, one per family file.
void register_placeholder_rules(RuleTable& t);  // strategy.cc: creation ops
void register_einsum_rules(RuleTable& t);
void register_pointwise_rules(RuleTable& t);
void register_reduction_rules(RuleTable& t);
void register_norm_rules(RuleTable& t);
void register_view_rules(RuleTable& t);
void register_nn_rules(RuleTable& t);
void register_index_rules(RuleTable& t);  // index_rules.cc: gather/scatter/index/pad/roll/new_*
void register_attention_rules(RuleTable& t);  // attention_rules.cc: SDPA, context parallel
void register_complex_rules(RuleTable& t);  // complex_rules.cc: polar, view_as_complex/_real

// Helpers shared by rule files.

/// Output placement `p` seen by an input of meta `in` broadcast to `out` (right-aligned
/// dims): a shard of a dim the input lacks or has as a broadcast 1 becomes R; Partial stays.
Placement map_broadcast(const Placement& p, const TensorMeta& out, const TensorMeta& in);
/// S(d) when `m` has dim d with more than one element, else R (for optional / empty tensors).
Placement shard_if(const TensorMeta& m, int32_t d);
/// Number of shards of tensor dim `d` in a combination entry (one placement per mesh dim).
int64_t shards_of(const std::vector<Placement>& p, int32_t d, const Mesh& mesh);
/// Every placement in [R, S(0), ..., S(rank-1)] for a single-tensor rule (placeholders).
std::vector<Row> replicate_or_shard_rows(const TensorMeta& m);

}  // namespace autoshard

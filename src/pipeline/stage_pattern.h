#pragma once
/// A stage plan as a pattern of k identical layers: the decisions of its first layer, of every
/// layer between (all alike), of its last layer and of what is not a layer (received tensors,
/// the embedding before the layers, the head after them, copied shared nodes).  With the layers
/// tied, the pipeline search's stage plans are such patterns, and a pattern's cost is affine in
/// the number of middle layers (the middle layers' nodes and edges repeat, nothing else
/// changes).  So when the plans solved for k1 < k2 layers of one stage kind are the same
/// pattern, that pattern at any k between is a plan whose cost interpolates theirs, and (the
/// stage optimum being concave in k, pipeline/pipeline.h) the chord of their proven bounds bounds
/// it: the pipeline search evaluates it instead of solving (StageSolver::free).
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "pipeline/pipeline_stage.h"
#include "planner/plan.h"
#include "strategy/strategy.h"

namespace autoshard {

/// Where a stage-graph node sits in its stage.
enum class StageRole : int32_t {
  kBefore = 0,    ///< before the first layer (embedding, inputs)
  kFirstLayer,    ///< the stage's first layer (k >= 2)
  kMiddleLayer,   ///< a layer strictly between the first and the last
  kLastLayer,     ///< the stage's last layer (k >= 2)
  kOnlyLayer,     ///< the one layer of a one-layer stage
  kAfter,         ///< after the last layer (final norm, head, loss)
  kShared,        ///< a copy of a node every stage uses
  kReceived,      ///< a tensor received from another stage
};

/// A node's role and its ordinal among the nodes of that role (per layer for layer roles).
using RoleKey = std::pair<StageRole, int32_t>;

/// Per stage-graph node of the stage holding layers [lo, hi): its role key; nullopt for nodes
/// without one (the output node).
std::vector<std::optional<RoleKey>> stage_roles(const StageGraph& sg, const LayerMap& m, int32_t lo, int32_t hi);

/// A plan's decisions by role (strategies of the problem nodes).
struct StagePattern {
  std::map<RoleKey, Strategy> chosen;
  /// Per non-layer role, how many nodes hold it: patterns of stages with different counts do
  /// not map onto each other.
  std::map<StageRole, int32_t> counts;
};

/// The pattern of `plan` on stage [lo, hi) of `sg`; nullopt when two middle layers chose
/// differently (the layers were not tied) or the stage has one layer (no first/last split).
std::optional<StagePattern> stage_pattern(const StageGraph& sg, const Plan& plan, const LayerMap& m, int32_t lo,
                                          int32_t hi);

/// `p` with a middle layer where it has none (a two-layer stage's pattern): the first layer's
/// decisions, so that it maps onto stages of any size of its kind.
StagePattern with_middle_layers(StagePattern p);

/// One pattern holding both: nullopt unless they agree on every role both have and on the
/// non-layer counts.
std::optional<StagePattern> merge_patterns(const StagePattern& a, const StagePattern& b);

/// The strategies `p` gives the nodes of stage [lo, hi) of `sg` (for
/// ShardingOptimizer::match_strategies; a node whose role `p` lacks gets none); nullopt when
/// the non-layer counts differ.
std::optional<std::vector<std::optional<Strategy>>> pattern_strategies(const StagePattern& p, const StageGraph& sg,
                                                                        const LayerMap& m, int32_t lo, int32_t hi);

}  // namespace autoshard

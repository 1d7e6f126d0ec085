#pragma once
/// Sharding rules of the ops Mixture-of-Experts layers add to a transformer (moe_rules.cc):
/// the grouped expert matmul `_grouped_mm` and `bincount`.  The routing ops they also use
/// (topk, sort, cumsum, histc, gather, scatter, index_add, index / index_put) are covered
/// by reduction_rules.cc and index_rules.cc.
#include "strategy/rule.h"

namespace autoshard {

void register_moe_rules(RuleTable& t);

}  // namespace autoshard

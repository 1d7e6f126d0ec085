#include "pipeline/stage_pattern.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace autoshard {

namespace {

size_t role_idx(NodeIdx i) { return static_cast<size_t>(i); }

bool is_layer_role(StageRole r) {
  return r == StageRole::kFirstLayer || r == StageRole::kMiddleLayer || r == StageRole::kLastLayer ||
         r == StageRole::kOnlyLayer;
}

/// The role of a node at layer position `p` (LayerMap::pos) in stage [lo, hi).
StageRole role_at(int32_t p, int32_t lo, int32_t hi) {
  if (p == LayerMap::kShared) return StageRole::kShared;
  if (p < lo) return StageRole::kBefore;
  if (p >= hi) return StageRole::kAfter;
  if (hi - lo == 1) return StageRole::kOnlyLayer;
  return p == lo ? StageRole::kFirstLayer : p == hi - 1 ? StageRole::kLastLayer : StageRole::kMiddleLayer;
}

bool same(const Strategy& a, const Strategy& b) { return a.name() == b.name(); }

/// The counts of the non-layer roles of `roles`.
std::map<StageRole, int32_t> role_counts(const std::vector<std::optional<RoleKey>>& roles) {
  std::map<StageRole, int32_t> n;
  for (const auto& r : roles)
    if (r && !is_layer_role(r->first)) ++n[r->first];
  return n;
}

}  // namespace

std::vector<std::optional<RoleKey>> stage_roles(const StageGraph& sg, const LayerMap& m, int32_t lo, int32_t hi) {
  std::vector<std::optional<RoleKey>> roles(role_idx(sg.graph.size()));
  std::map<StageRole, int32_t> next;    // non-layer roles: ordinal within the stage
  std::map<int32_t, int32_t> in_layer;  // layer roles: ordinal within the node's own layer
  for (NodeIdx j = 0; j < sg.graph.size(); ++j) {
    const NodeIdx o = sg.origin[role_idx(j)];
    if (o < 0) continue;  // the output node
    if (sg.received[role_idx(j)]) {
      roles[role_idx(j)] = RoleKey{StageRole::kReceived, next[StageRole::kReceived]++};
      continue;
    }
    const int32_t p = m.pos[role_idx(o)];
    const StageRole r = role_at(p, lo, hi);
    roles[role_idx(j)] = RoleKey{r, is_layer_role(r) ? in_layer[p]++ : next[r]++};
  }
  return roles;
}

std::optional<StagePattern> stage_pattern(const StageGraph& sg, const Plan& plan, const LayerMap& m, int32_t lo,
                                          int32_t hi) {
  if (hi - lo < 2 || !plan.has_solution) return std::nullopt;
  const auto roles = stage_roles(sg, m, lo, hi);
  StagePattern pat;
  pat.counts = role_counts(roles);
  for (size_t j = 0; j < roles.size(); ++j) {
    if (!roles[j] || j >= plan.nodes.size() || !plan.nodes[j]) continue;
    const auto [it, fresh] = pat.chosen.emplace(*roles[j], plan.nodes[j]->chosen);
    if (!fresh && !same(it->second, plan.nodes[j]->chosen)) return std::nullopt;  // middle layers differ
  }
  return pat;
}

StagePattern with_middle_layers(StagePattern p) {
  const bool has_middle = std::any_of(p.chosen.begin(), p.chosen.end(),
                                      [](const auto& e) { return e.first.first == StageRole::kMiddleLayer; });
  if (has_middle) return p;
  std::vector<std::pair<RoleKey, Strategy>> add;
  for (const auto& [key, s] : p.chosen)
    if (key.first == StageRole::kFirstLayer) add.emplace_back(RoleKey{StageRole::kMiddleLayer, key.second}, s);
  for (auto& [key, s] : add) p.chosen.emplace(key, std::move(s));
  return p;
}

std::optional<StagePattern> merge_patterns(const StagePattern& a, const StagePattern& b) {
  if (a.counts != b.counts) return std::nullopt;
  StagePattern out = a;
  for (const auto& [key, s] : b.chosen) {
    const auto [it, fresh] = out.chosen.emplace(key, s);
    if (!fresh && !same(it->second, s)) return std::nullopt;
  }
  return out;
}

std::optional<std::vector<std::optional<Strategy>>> pattern_strategies(const StagePattern& p, const StageGraph& sg,
                                                                        const LayerMap& m, int32_t lo, int32_t hi) {
  const auto roles = stage_roles(sg, m, lo, hi);
  if (role_counts(roles) != p.counts) return std::nullopt;
  std::vector<std::optional<Strategy>> wanted(roles.size());
  for (size_t j = 0; j < roles.size(); ++j) {
    if (!roles[j]) continue;
    // A node the pattern lacks has no problem node (its plans had none either); one that does
    // is left unmatched and the caller refuses the assignment.
    if (const auto it = p.chosen.find(*roles[j]); it != p.chosen.end()) wanted[j] = it->second;
  }
  return wanted;
}

}  // namespace autoshard

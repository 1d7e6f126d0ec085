#include "planner/edge_matrix_cache.h"

#include "cost/redistribute.h"

namespace autoshard {

size_t SpecListHash::operator()(const std::vector<ShardingSpec>& v) const {
  size_t h = v.size();
  auto mix = [&h](uint64_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (const ShardingSpec& s : v) {
    for (const Placement& p : s.placements)
      mix(static_cast<uint64_t>(p.kind) * 131 + static_cast<uint64_t>(p.dim) * 7 +
          static_cast<uint64_t>(p.reduce));
    for (int64_t d : s.meta.shape) mix(static_cast<uint64_t>(d));
    mix(static_cast<uint64_t>(s.meta.dtype));
  }
  return h;
}

int32_t EdgeMatrixCache::intern(std::vector<ShardingSpec> specs) {
  auto [it, inserted] = ids_.try_emplace(std::move(specs), static_cast<int32_t>(lists_.size()));
  if (inserted) lists_.push_back(&it->first);
  return it->second;
}

std::shared_ptr<const std::vector<Cost>> EdgeMatrixCache::matrix(int32_t from, int32_t to, bool strict,
                                                                 bool discounted) {
  uint64_t key = (static_cast<uint64_t>(from) << 34) | (static_cast<uint64_t>(to) << 2) |
                 (discounted ? 2u : 0u) |
                 (strict ? 1u : 0u);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const auto& a = *lists_[static_cast<size_t>(from)];
  const auto& b = *lists_[static_cast<size_t>(to)];
  // Many strategies of a node share one output (or input) spec: each distinct pair of specs
  // is costed once (on 3-D meshes this was most of the problem build).
  std::vector<size_t> ua, ub;
  const std::vector<size_t> ia = distinct(a, ua), ib = distinct(b, ub);
  std::vector<Cost> u(ua.size() * ub.size());
  for (size_t x = 0; x < ua.size(); ++x)
    for (size_t y = 0; y < ub.size(); ++y) {
      const ShardingSpec& f = a[ua[x]];
      const ShardingSpec& t = b[ub[y]];
      u[x * ub.size() + y] = strict ? (f.placements == t.placements ? 0.0 : kInfCost)
                                    : redistribute_cost_us(f, t, mesh_, model_) *
                                          (discounted ? discount_ : 1.0);
    }
  std::vector<Cost> m(a.size() * b.size());
  for (size_t p = 0; p < a.size(); ++p)
    for (size_t q = 0; q < b.size(); ++q) m[p * b.size() + q] = u[ia[p] * ub.size() + ib[q]];
  auto shared = std::make_shared<const std::vector<Cost>>(std::move(m));
  cache_.emplace(key, shared);
  return shared;
}

std::vector<size_t> EdgeMatrixCache::distinct(const std::vector<ShardingSpec>& v, std::vector<size_t>& first) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    size_t k = 0;
    while (k < first.size() && !(v[first[k]] == v[i])) ++k;
    if (k == first.size()) first.push_back(i);
    idx[i] = k;
  }
  return idx;
}

}  // namespace autoshard

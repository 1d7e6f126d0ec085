#include "solver/edge_classes.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>
#include <unordered_map>

namespace autoshard {
namespace {

/// Class of each of `n` blocks of `len` costs (block i at data + i * stride, elements `step`
/// apart): equal bits, equal class; classes numbered by first appearance.  `reps` receives each
/// class's first block.
std::vector<int32_t> classify(const Cost* data, size_t n, size_t len, size_t stride, size_t step,
                              std::vector<size_t>& reps) {
  std::vector<int32_t> cls(n);
  std::vector<Cost> buf(len), rep_values;
  std::unordered_multimap<size_t, int32_t> by_hash;
  reps.clear();
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < len; ++k) buf[k] = data[i * stride + k * step];
    const std::string_view bytes(reinterpret_cast<const char*>(buf.data()), len * sizeof(Cost));
    const size_t h = std::hash<std::string_view>{}(bytes);
    int32_t found = -1;
    for (auto [it, end] = by_hash.equal_range(h); it != end && found < 0; ++it)
      if (std::memcmp(rep_values.data() + sz(it->second) * len, buf.data(), len * sizeof(Cost)) == 0)
        found = it->second;
    if (found < 0) {
      found = static_cast<int32_t>(reps.size());
      reps.push_back(i);
      rep_values.insert(rep_values.end(), buf.begin(), buf.end());
      by_hash.emplace(h, found);
    }
    cls[i] = found;
  }
  return cls;
}

}  // namespace

EdgeClasses edge_classes(const std::vector<Cost>& m, size_t ku, size_t kv) {
  EdgeClasses ec;
  std::vector<size_t> row_reps, col_reps;
  ec.row_class = classify(m.data(), ku, kv, kv, 1, row_reps);
  ec.rows = static_cast<int32_t>(row_reps.size());
  // Columns compared on the representative rows only (equal rows give equal entries).
  std::vector<Cost> reduced(row_reps.size() * kv);
  for (size_t a = 0; a < row_reps.size(); ++a)
    std::copy_n(m.data() + row_reps[a] * kv, kv, reduced.data() + a * kv);
  ec.col_class = classify(reduced.data(), kv, row_reps.size(), 1, kv, col_reps);
  ec.cols = static_cast<int32_t>(col_reps.size());
  ec.costs.resize(row_reps.size() * col_reps.size());
  for (size_t a = 0; a < row_reps.size(); ++a)
    for (size_t b = 0; b < col_reps.size(); ++b)
      ec.costs[a * col_reps.size() + b] = reduced[a * kv + col_reps[b]];
  return ec;
}

}  // namespace autoshard

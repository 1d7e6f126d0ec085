#include "solver/group_model.h"

#include <algorithm>

namespace autoshard {

Cost group_cost(const GroupModel& m, const std::vector<int32_t>& x) {
  Cost c = m.offset;
  for (size_t g = 0; g < m.unary.size(); ++g) c += m.unary[g][sz(x[g])];
  for (const auto& e : m.edges) c += m.edge_cost(e, x[sz(e.a)], x[sz(e.b)]);
  return c;
}

std::vector<int64_t> group_usage(const GroupModel& m, const std::vector<int32_t>& x) {
  std::vector<int64_t> diff(sz(m.num_segments()) + 1, 0);
  for (size_t g = 0; g < m.pieces.size(); ++g)
    for (const auto& pc : m.pieces[g]) {
      diff[sz(pc.seg_lo)] += pc.du[sz(x[g])];
      diff[sz(pc.seg_hi)] -= pc.du[sz(x[g])];
    }
  std::vector<int64_t> usage(sz(m.num_segments()));
  int64_t run = 0;
  for (size_t t = 0; t < usage.size(); ++t) usage[t] = m.base[t] + (run += diff[t]);
  return usage;
}

bool group_fits(const GroupModel& m, const std::vector<int32_t>& x) {
  if (m.limit < 0) return true;
  const std::vector<int64_t> usage = group_usage(m, x);
  return std::all_of(usage.begin(), usage.end(), [&](int64_t u) { return u <= m.limit; });
}

}  // namespace autoshard

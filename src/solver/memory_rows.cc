#include "solver/memory_rows.h"

#include <algorithm>

namespace autoshard {

std::vector<MemoryRow> memory_rows(const Problem& p, const std::vector<BaseUsage>& base,
                                   bool drop_slack) {
  std::vector<MemoryRow> rows;
  if (drop_slack && p.usage_limit < 0) return rows;
  // Events: (time, kind, payload): kind 0 = node ends, 1 = node starts, 2 = base delta.
  struct Ev {
    int64_t t;
    int32_t kind;
    int64_t x;
  };
  std::vector<Ev> ev;
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const ProblemNode& n = p.nodes[sz(v)];
    if (n.end <= n.start) continue;
    ev.push_back({n.start, 1, v});
    ev.push_back({n.end, 0, v});
  }
  for (const BaseUsage& b : base) {
    if (b.end <= b.start || b.usage == 0) continue;
    ev.push_back({b.start, 2, b.usage});
    ev.push_back({b.end, 2, -b.usage});
  }
  std::sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
  // Group into time steps with their net change.
  struct Step {
    size_t begin, end;
    bool added, removed;
  };
  std::vector<Step> steps;
  for (size_t i = 0; i < ev.size();) {
    size_t j = i;
    int64_t delta = 0;
    bool add = false, rem = false;
    while (j < ev.size() && ev[j].t == ev[i].t) {
      if (ev[j].kind == 2) delta += ev[j].x;
      else if (ev[j].kind == 1) add = true;
      else rem = true;
      ++j;
    }
    add = add || delta > 0;
    rem = rem || delta < 0;
    if (add || rem) steps.push_back({i, j, add, rem});
    i = j;
  }
  std::vector<PNodeIdx> live;
  std::vector<int32_t> pos(sz(p.num_nodes()), -1);
  int64_t offset = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t i = steps[s].begin; i < steps[s].end; ++i) {
      const Ev& e = ev[i];
      if (e.kind == 2) {
        offset += e.x;
      } else if (e.kind == 1) {
        pos[sz(e.x)] = static_cast<int32_t>(live.size());
        live.push_back(static_cast<PNodeIdx>(e.x));
      } else {
        int32_t at = pos[sz(e.x)];
        live[sz(at)] = live.back();
        pos[sz(live[sz(at)])] = at;
        live.pop_back();
        pos[sz(e.x)] = -1;
      }
    }
    const bool removed_next = s + 1 == steps.size() || steps[s + 1].removed;
    if (!steps[s].added || !removed_next) continue;
    if (drop_slack) {
      int64_t mx = offset;
      for (PNodeIdx v : live) {
        const auto& u = p.nodes[sz(v)].usages;
        mx += *std::max_element(u.begin(), u.end());
      }
      if (mx <= p.usage_limit) continue;
    }
    MemoryRow row;
    row.offset = offset;
    row.nodes = live;
    std::sort(row.nodes.begin(), row.nodes.end());
    rows.push_back(std::move(row));
  }
  return rows;
}

int64_t min_possible_peak(const Problem& p, const std::vector<MemoryRow>& rows) {
  int64_t best = 0;
  for (const MemoryRow& r : rows) {
    int64_t s = r.offset;
    for (PNodeIdx v : r.nodes) {
      const auto& u = p.nodes[sz(v)].usages;
      s += *std::min_element(u.begin(), u.end());
    }
    best = std::max(best, s);
  }
  return best;
}

int64_t rows_peak(const Problem& p, const std::vector<MemoryRow>& rows,
                  const std::vector<StrategyIdx>& choice) {
  int64_t best = 0;
  for (const MemoryRow& r : rows) {
    int64_t s = r.offset;
    for (PNodeIdx v : r.nodes) s += p.nodes[sz(v)].usages[sz(choice[sz(v)])];
    best = std::max(best, s);
  }
  return best;
}

}  // namespace autoshard

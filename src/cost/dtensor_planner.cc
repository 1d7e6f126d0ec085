#include "cost/dtensor_planner.h"

#include <fmt/format.h>

#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost/collective.h"

namespace autoshard {

namespace {

constexpr int32_t kMaxDims = 16;

/// `p` with every strided shard made plain: the planner keeps the order in positions.
Placement plain(Placement p) {
  p.split_factor = 1;
  return p;
}

/// DTensor's greedy transform list (torch 2.13 _redistribute.py,
/// DTensorRedistributePlanner.generate_greedy_transform_infos): on a 1-D mesh one direct step;
/// otherwise, when the source has any shard, walk the mesh dims LAST TO FIRST, sending a mesh
/// dim to Replicate instead of its Shard(d) target when the mesh dims before it shard d
/// differently in source and target (nested sharding to undo), then walk FIRST TO LAST for the
/// remaining differences.
DtensorSteps greedy_steps(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  DtensorSteps out;
  const int32_t nd = mesh.ndim();
  const Placement* tgt = to.placements.data();
  auto push = [&](int32_t m, const Placement& a, const Placement& b) {
    out.steps[static_cast<size_t>(out.num++)] = DtensorStep{m, a, b};
  };
  if (nd == 1) {
    if (!(from.placements[0] == tgt[0])) push(0, from.placements[0], tgt[0]);
    return out;
  }
  std::array<Placement, kMaxDims> cur{};
  bool any_shard = false;
  for (int32_t m = 0; m < nd; ++m) {
    cur[static_cast<size_t>(m)] = from.placements[static_cast<size_t>(m)];
    any_shard |= cur[static_cast<size_t>(m)].is_shard() && mesh.size(m) > 1;
  }
  if (any_shard) {  // DTensor tests num_shards > 1
    for (int32_t m = nd - 1; m >= 0; --m) {
      Placement target = tgt[m];
      if (target.is_shard()) {
        for (int32_t i = 0; i < m; ++i)
          if (cur[static_cast<size_t>(i)].is_shard(target.dim) != tgt[i].is_shard(target.dim)) {
            target = Placement::replicate();
            break;
          }
      }
      if (!(cur[static_cast<size_t>(m)] == target)) {
        push(m, cur[static_cast<size_t>(m)], target);
        cur[static_cast<size_t>(m)] = target;
      }
    }
  }
  for (int32_t m = 0; m < nd; ++m)
    if (!(cur[static_cast<size_t>(m)] == tgt[m])) {
      push(m, cur[static_cast<size_t>(m)], tgt[m]);
      cur[static_cast<size_t>(m)] = tgt[m];
    }
  return out;
}

/// A planner state: plain placements plus each shard's position in its tensor dim's order
/// (torch's DistState: placements and ShardOrder).
struct State {
  std::array<Placement, kMaxDims> p{};
  std::array<int32_t, kMaxDims> pos{};

  std::string key(int32_t nd) const {
    std::string k;
    for (int32_t m = 0; m < nd; ++m) {
      const Placement& x = p[static_cast<size_t>(m)];
      k += fmt::format("{}.{}.{}.{};", static_cast<int>(x.kind), x.is_shard() ? x.dim : 0,
                       x.is_partial() ? static_cast<int>(x.reduce) : 0,
                       pos[static_cast<size_t>(m)]);
    }
    return k;
  }
};

/// The graph-based planner for one redistribution.
class GraphPlanner {
 public:
  GraphPlanner(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh)
      : mesh_(mesh), nd_(mesh.ndim()), rank_(from.meta.rank()),
        bytes_(static_cast<double>(from.meta.bytes())) {
    for (const auto* spec : {&from, &to})
      for (const Placement& x : spec->placements)
        if (x.is_partial()) ops_[static_cast<size_t>(x.reduce)] = true;
  }

  State state_of(const ShardingSpec& s) const {
    State st;
    std::array<int64_t, kMaxDims> sizes{};
    for (int32_t m = 0; m < nd_; ++m) {
      st.p[static_cast<size_t>(m)] = plain(s.placements[static_cast<size_t>(m)]);
      sizes[static_cast<size_t>(m)] = mesh_.size(m);
    }
    if (!decode_shard_positions(s.placements.data(), nd_, sizes.data(), st.pos.data()))
      throw std::invalid_argument(fmt::format("redistribute: {} decodes to no shard order",
                                              s.to_string()));
    return st;
  }

  /// torch's find_min_cost_path, then the steps between consecutive states.
  DtensorSteps plan(const State& src, const State& dst) {
    DtensorSteps out;
    const std::string dst_key = dst.key(nd_);
    struct Entry {
      double cost;
      int64_t counter;
      int32_t state;
      int32_t parent;  ///< entry index, -1 for the source
    };
    std::vector<Entry> entries{{0.0, 0, intern(src), -1}};
    auto later = [&](int32_t a, int32_t b) {
      const Entry& x = entries[static_cast<size_t>(a)];
      const Entry& y = entries[static_cast<size_t>(b)];
      return x.cost != y.cost ? x.cost > y.cost : x.counter > y.counter;
    };
    std::priority_queue<int32_t, std::vector<int32_t>, decltype(later)> heap(later);
    heap.push(0);
    int64_t counter = 0;
    std::vector<std::pair<State, double>> next;
    while (!heap.empty()) {
      const int32_t e = heap.top();
      heap.pop();
      const Entry cur = entries[static_cast<size_t>(e)];
      if (keys_[static_cast<size_t>(cur.state)] == dst_key) return path(entries, e);
      if (visited_[static_cast<size_t>(cur.state)]) continue;
      visited_[static_cast<size_t>(cur.state)] = true;
      next.clear();
      neighbours(states_[static_cast<size_t>(cur.state)], next);
      for (const auto& [st, c] : next) {
        const int32_t id = intern(st);
        if (visited_[static_cast<size_t>(id)]) continue;
        entries.push_back(Entry{cur.cost + c, ++counter, id, e});
        heap.push(static_cast<int32_t>(entries.size() - 1));
      }
    }
    out.found = false;
    return out;
  }

 private:
  int32_t intern(const State& s) {
    std::string k = s.key(nd_);
    auto it = ids_.find(k);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(states_.size());
    ids_.emplace(k, id);
    keys_.push_back(std::move(k));
    states_.push_back(s);
    visited_.push_back(false);
    return id;
  }

  template <class Entries>
  DtensorSteps path(const Entries& entries, int32_t e) const {
    std::vector<int32_t> chain;
    for (int32_t i = e; i >= 0; i = entries[static_cast<size_t>(i)].parent)
      chain.push_back(entries[static_cast<size_t>(i)].state);
    DtensorSteps out;
    for (size_t k = chain.size(); k-- > 1;) {
      const State& a = states_[static_cast<size_t>(chain[k])];
      const State& b = states_[static_cast<size_t>(chain[k - 1])];
      for (int32_t m = 0; m < nd_; ++m) {
        if (a.p[static_cast<size_t>(m)] == b.p[static_cast<size_t>(m)]) continue;
        if (out.num == DtensorSteps::kMax)
          throw std::logic_error("redistribute: DTensor plan longer than its step buffer");
        out.steps[static_cast<size_t>(out.num++)] =
            DtensorStep{m, a.p[static_cast<size_t>(m)], b.p[static_cast<size_t>(m)]};
      }
    }
    return out;
  }

  /// Mesh dim cutting tensor dim d innermost in `s`, -1 if none; `count` = how many cut d.
  int32_t innermost(const State& s, int32_t d, int32_t* count) const {
    int32_t best = -1, n = 0;
    for (int32_t m = 0; m < nd_; ++m) {
      if (!s.p[static_cast<size_t>(m)].is_shard(d)) continue;
      ++n;
      if (best < 0 || s.pos[static_cast<size_t>(m)] > s.pos[static_cast<size_t>(best)]) best = m;
    }
    if (count) *count = n;
    return best;
  }

  /// one_step_redistribute_cost: mesh dim m of `s` goes to `t` (torch's arithmetic).
  double step_cost(const State& s, int32_t m, const Placement& t) const {
    int64_t shards = 1;
    for (int32_t i = 0; i < nd_; ++i)
      if (s.p[static_cast<size_t>(i)].is_shard()) shards *= mesh_.size(i);
    double gib = bytes_ / static_cast<double>(shards) / 1024 / 1024 / 1024;
    const Placement& c = s.p[static_cast<size_t>(m)];
    if (c.is_shard() && t.is_replicate()) {
      gib *= static_cast<double>(mesh_.size(m));
      return dtensor_collective_gib_us(Collective::kAllGather, gib, mesh_, m);
    }
    if (c.is_shard() && t.is_shard())
      return dtensor_collective_gib_us(Collective::kAllGather, gib, mesh_, m) + 1.0;
    if (c.is_partial() && t.is_replicate())
      return dtensor_collective_gib_us(Collective::kAllReduce, gib, mesh_, m);
    if (c.is_partial() && t.is_shard())
      return dtensor_collective_gib_us(Collective::kReduceScatter, gib, mesh_, m);
    return 0.0;  // R -> S, R -> P
  }

  /// Adds the state with mesh dim m set to `t`, cut innermost when `t` shards.
  void add(const State& s, int32_t m, const Placement& t,
           std::vector<std::pair<State, double>>& out) const {
    State n = s;
    n.p[static_cast<size_t>(m)] = t;
    n.pos[static_cast<size_t>(m)] = -1;
    if (t.is_shard()) {
      int32_t count = 0;
      innermost(n, t.dim, &count);
      n.pos[static_cast<size_t>(m)] = count - 1;
    }
    out.emplace_back(n, step_cost(s, m, t));
  }

  /// get_next_state's cases 1-6, in its order (see the header).
  void neighbours(const State& s, std::vector<std::pair<State, double>>& out) const {
    for (int32_t a = 0; a < rank_; ++a) {  // 1: the innermost cut of a moves to b
      const int32_t m = innermost(s, a, nullptr);
      if (m < 0) continue;
      for (int32_t b = 0; b < rank_; ++b)
        if (b != a) add(s, m, Placement::shard(b), out);
    }
    for (int32_t a = 0; a < rank_; ++a) {  // 2: the innermost cut of a is gathered
      const int32_t m = innermost(s, a, nullptr);
      if (m >= 0) add(s, m, Placement::replicate(), out);
    }
    for (int32_t m = 0; m < nd_; ++m)  // 3: P -> R
      if (s.p[static_cast<size_t>(m)].is_partial()) add(s, m, Placement::replicate(), out);
    for (int32_t m = 0; m < nd_; ++m)  // 4: R -> S(b)
      if (s.p[static_cast<size_t>(m)].is_replicate())
        for (int32_t b = 0; b < rank_; ++b) add(s, m, Placement::shard(b), out);
    for (int32_t m = 0; m < nd_; ++m)  // 5: P -> S(b)
      if (s.p[static_cast<size_t>(m)].is_partial())
        for (int32_t b = 0; b < rank_; ++b) add(s, m, Placement::shard(b), out);
    for (int32_t m = 0; m < nd_; ++m) {  // 6: R -> P(op)
      if (!s.p[static_cast<size_t>(m)].is_replicate()) continue;
      for (int32_t op = 0; op < 4; ++op) {
        if (!ops_[static_cast<size_t>(op)]) continue;
        std::array<bool, 4> present{};
        present[static_cast<size_t>(op)] = true;
        for (int32_t i = 0; i < nd_; ++i)
          if (i != m && s.p[static_cast<size_t>(i)].is_partial())
            present[static_cast<size_t>(s.p[static_cast<size_t>(i)].reduce)] = true;
        const int kinds = present[0] + present[1] + present[2] + present[3];
        const bool sum_avg = kinds == 2 && present[static_cast<size_t>(ReduceOp::kSum)] &&
                             present[static_cast<size_t>(ReduceOp::kAvg)];
        if (kinds > 1 && !sum_avg) continue;
        add(s, m, Placement::partial(static_cast<ReduceOp>(op)), out);
      }
    }
  }

  const Mesh& mesh_;
  int32_t nd_;
  int32_t rank_;
  double bytes_;
  std::array<bool, 4> ops_{};  ///< reduce ops of the two specs
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> keys_;
  std::vector<State> states_;
  std::vector<bool> visited_;
};

}  // namespace

DtensorSteps dtensor_transform_steps(const ShardingSpec& from, const ShardingSpec& to,
                                     const Mesh& mesh) {
  if (from.placements == to.placements) return {};
  if (mesh.ndim() > kMaxDims) throw std::invalid_argument("redistribute: more than 16 mesh dims");
  bool strided = false;
  for (const auto* spec : {&from, &to})
    for (const Placement& x : spec->placements) strided |= x.is_strided();
  // Without strided shards both specs are in the default order (torch's normalized specs then
  // have increasing shard orders, its test for the greedy walk).
  if (!strided) return greedy_steps(from, to, mesh);
  GraphPlanner g(from, to, mesh);
  return g.plan(g.state_of(from), g.state_of(to));
}

}  // namespace autoshard

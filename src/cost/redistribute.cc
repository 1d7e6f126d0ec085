#include "cost/redistribute.h"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>

namespace autoshard {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// DTensor adds 1 us to Shard(i) -> Shard(j) "to favor allgather" (_collective_utils.py).
constexpr double kDtensorShardToShardPenaltyUs = 1.0;

void check_spec(const ShardingSpec& s, const Mesh& mesh, const char* which) {
  if (s.ndim_mesh() != mesh.ndim())
    throw std::invalid_argument(fmt::format("redistribute: {} spec {} has {} placements, mesh {} "
                                            "has {} dims",
                                            which, s.to_string(), s.ndim_mesh(),
                                            mesh.describe(), mesh.ndim()));
  if (mesh.ndim() > kMaxMeshDims)
    throw std::invalid_argument(fmt::format("redistribute: mesh {} has more than {} dims",
                                            mesh.describe(), kMaxMeshDims));
  for (const Placement& p : s.placements)
    if (p.is_shard() && (p.dim < 0 || p.dim >= s.meta.rank()))
      throw std::invalid_argument(fmt::format("redistribute: {} spec {} shards dim {} of a "
                                              "rank-{} tensor",
                                              which, s.to_string(), p.dim, s.meta.rank()));
}

/// Checks the specs; returns false when the transition is impossible for every profile.
bool compatible(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  check_spec(from, mesh, "source");
  check_spec(to, mesh, "target");
  return from.meta.shape == to.meta.shape && from.meta.dtype == to.meta.dtype;
}

/// One step of DTensor's transform list: mesh dim `dim` goes from `from` to `to`.
struct DtensorStep {
  MeshDimIdx dim = 0;
  Placement from;
  Placement to;
};

/// DTensor's greedy transform list (torch 2.13 _redistribute.py,
/// DTensorRedistributePlanner.generate_greedy_transform_infos): on a 1-D mesh one direct step;
/// otherwise, when the source has any shard, walk the mesh dims LAST TO FIRST, sending a mesh
/// dim to Replicate instead of its Shard(d) target when the mesh dims before it shard d
/// differently in source and target (nested sharding to undo), then walk FIRST TO LAST for the
/// remaining differences.  Returns the number of steps written into `steps`.
int32_t dtensor_transform_steps(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh,
                                std::array<DtensorStep, 2 * kMaxMeshDims>& steps) {
  const int32_t nd = mesh.ndim();
  const Placement* tgt = to.placements.data();
  int32_t n = 0;
  if (nd == 1) {
    if (!(from.placements[0] == tgt[0])) steps[0] = DtensorStep{0, from.placements[0], tgt[0]};
    return from.placements[0] == tgt[0] ? 0 : 1;
  }
  std::array<Placement, kMaxMeshDims> cur{};
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
        steps[static_cast<size_t>(n++)] = DtensorStep{m, cur[static_cast<size_t>(m)], target};
        cur[static_cast<size_t>(m)] = target;
      }
    }
  }
  for (int32_t m = 0; m < nd; ++m)
    if (!(cur[static_cast<size_t>(m)] == tgt[m])) {
      steps[static_cast<size_t>(n++)] = DtensorStep{m, cur[static_cast<size_t>(m)], tgt[m]};
      cur[static_cast<size_t>(m)] = tgt[m];
    }
  return n;
}

/// DTensor's collectives along the greedy transform list, with its byte tracking (see
/// plan_redistribute_dtensor in the header).
RedistributePlan dtensor_plan(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  RedistributePlan plan;
  if (from.is_replicated() || from.placements == to.placements) return plan;
  int64_t num_shards = 1;
  for (int32_t m = 0; m < mesh.ndim(); ++m)
    if (from.placements[static_cast<size_t>(m)].is_shard()) num_shards *= mesh.size(m);
  double bytes = static_cast<double>(from.meta.bytes()) / static_cast<double>(num_shards);
  std::array<DtensorStep, 2 * kMaxMeshDims> steps{};
  const int32_t num_steps = dtensor_transform_steps(from, to, mesh, steps);
  auto push = [&](Collective kind, MeshDimIdx m, double b) {
    plan.steps[static_cast<size_t>(plan.num_steps++)] = CommStep{kind, m, b};
  };
  for (int32_t i = 0; i < num_steps; ++i) {
    const DtensorStep& s = steps[static_cast<size_t>(i)];
    const auto n = static_cast<double>(mesh.size(s.dim));
    if (s.from.is_shard() && s.to.is_replicate()) {
      bytes *= n;
      push(Collective::kAllGather, s.dim, bytes);
    } else if (s.from.is_shard() && s.to.is_shard()) {
      push(Collective::kAllToAll, s.dim, bytes);
    } else if (s.from.is_partial() && s.to.is_replicate()) {
      push(Collective::kAllReduce, s.dim, bytes);
    } else if (s.from.is_partial() && s.to.is_shard()) {
      push(Collective::kReduceScatter, s.dim, bytes);
      bytes /= n;
    } else if (s.from.is_replicate() && s.to.is_shard()) {
      bytes /= n;
    } else if (!s.from.is_replicate()) {  // S -> P, P(x) -> P(y)
      plan.impossible = true;
      plan.num_steps = 0;
      return plan;
    }
  }
  return plan;
}

/// DTensor's redistribute_cost (torch 2.13 _collective_utils.py), step for step over the
/// greedy transform list (see the header).
double dtensor_cost(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  if (from.is_replicated() || from.placements == to.placements) return 0.0;
  int64_t num_shards = 1;
  for (int32_t m = 0; m < mesh.ndim(); ++m)
    if (from.placements[static_cast<size_t>(m)].is_shard()) num_shards *= mesh.size(m);
  double bytes = static_cast<double>(from.meta.bytes()) / static_cast<double>(num_shards);
  double cost = 0.0;
  std::array<DtensorStep, 2 * kMaxMeshDims> steps{};
  const int32_t num_steps = dtensor_transform_steps(from, to, mesh, steps);
  for (int32_t i = 0; i < num_steps; ++i) {
    const DtensorStep& s = steps[static_cast<size_t>(i)];
    const Placement& c = s.from;
    const Placement& t = s.to;
    const MeshDimIdx m = s.dim;
    const auto n = static_cast<double>(mesh.size(m));
    if (c.is_shard() && t.is_replicate()) {
      bytes *= n;
      cost += all_gather_us(bytes, mesh, m, CommModel::kDtensor);
    } else if (c.is_shard() && t.is_shard()) {
      cost += all_gather_us(bytes, mesh, m, CommModel::kDtensor) + kDtensorShardToShardPenaltyUs;
    } else if (c.is_partial() && t.is_replicate()) {
      cost += all_reduce_us(bytes, mesh, m, CommModel::kDtensor);
    } else if (c.is_partial() && t.is_shard()) {
      cost += reduce_scatter_us(bytes, mesh, m, CommModel::kDtensor);
      bytes /= n;
    } else if (c.is_shard() && t.is_partial()) {
      return kInf;
    } else if (c.is_partial() && t.is_partial()) {
      return kInf;  // different reduce ops (equal placements are not steps)
    } else if (c.is_replicate() && t.is_shard()) {
      bytes /= n;
    }
    // Replicate -> Partial: free.
  }
  return cost;
}

/// Per-device bytes of the largest local shard, split into a constant part (tensor dims no
/// placement of either spec touches) and the touched dims, recomputed per state.
struct ShardBytes {
  std::array<int32_t, 2 * kMaxMeshDims> dims{};
  int32_t num_dims = 0;
  double base = 1;
  const TensorMeta* meta = nullptr;
  const int64_t* mesh_sizes = nullptr;
  int32_t nd = 0;

  void touch(int32_t d) {
    for (int32_t i = 0; i < num_dims; ++i)
      if (dims[static_cast<size_t>(i)] == d) return;
    dims[static_cast<size_t>(num_dims++)] = d;
  }
  void finish() {
    base = static_cast<double>(dtype_size(meta->dtype));
    for (int32_t d = 0; d < static_cast<int32_t>(meta->shape.size()); ++d) {
      bool touched = false;
      for (int32_t i = 0; i < num_dims; ++i) touched |= dims[static_cast<size_t>(i)] == d;
      if (!touched) base *= static_cast<double>(meta->shape[static_cast<size_t>(d)]);
    }
  }
  double operator()(const Placement* cur) const {
    double b = base;
    for (int32_t i = 0; i < num_dims; ++i) {
      const int32_t d = dims[static_cast<size_t>(i)];
      int64_t shards = 1;
      for (int32_t m = 0; m < nd; ++m)
        if (cur[m].is_shard(d)) shards *= mesh_sizes[m];
      const int64_t len = meta->shape[static_cast<size_t>(d)];
      b *= static_cast<double>((len + shards - 1) / shards);  // ceil, like torch.chunk
    }
    return b;
  }
};

}  // namespace

namespace {

/// The all-reduces go in after the first `at` states (the smallest size): one state per
/// all-reduce, each taking one more Partial -> Replicate dim to Replicate, and every later
/// state holds them replicated too (the loop above never touches those dims).
void insert_all_reduce_states(std::vector<std::vector<Placement>>& states, size_t at,
                              const ShardingSpec& from, const ShardingSpec& to) {
  std::vector<Placement> base = at > 0 ? states[at - 1] : from.placements;
  std::vector<std::vector<Placement>> added;
  for (size_t m = 0; m < base.size(); ++m) {
    if (!from.placements[m].is_partial() || !to.placements[m].is_replicate()) continue;
    base[m] = Placement::replicate();
    added.push_back(base);
  }
  for (size_t k = at; k < states.size(); ++k)
    for (size_t m = 0; m < base.size(); ++m)
      if (from.placements[m].is_partial() && to.placements[m].is_replicate())
        states[k][m] = Placement::replicate();
  states.insert(states.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
}

/// plan_redistribute, recording into `states` (when given) the placements after each step.
RedistributePlan plan_steps(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh,
                            std::vector<std::vector<Placement>>* states) {
  RedistributePlan plan;
  if (!compatible(from, to, mesh)) {
    plan.impossible = true;
    return plan;
  }
  const int32_t nd = mesh.ndim();
  const Placement* src = from.placements.data();
  const Placement* tgt = to.placements.data();
  std::array<Placement, kMaxMeshDims> cur{};
  std::array<int64_t, kMaxMeshDims> sizes{};
  std::array<bool, kMaxMeshDims> remove{};  // cur[m] must leave the sharding of its tensor dim
  std::array<bool, kMaxMeshDims> add{};     // m must join the sharding of tgt[m].dim
  ShardBytes bytes_of;
  bytes_of.meta = &from.meta;
  bytes_of.mesh_sizes = sizes.data();
  bytes_of.nd = nd;

  // Tensor dims whose kept prefix has ended (see the header).
  std::array<int32_t, 2 * kMaxMeshDims> broken{};
  int32_t num_broken = 0;
  auto is_broken = [&](int32_t d) {
    for (int32_t i = 0; i < num_broken; ++i)
      if (broken[static_cast<size_t>(i)] == d) return true;
    return false;
  };
  auto mark_broken = [&](int32_t d) {
    if (!is_broken(d)) broken[static_cast<size_t>(num_broken++)] = d;
  };

  for (int32_t m = 0; m < nd; ++m) {
    const Placement& f = src[m];
    const Placement& t = tgt[m];
    cur[static_cast<size_t>(m)] = f;
    sizes[static_cast<size_t>(m)] = mesh.size(m);
    if ((f.is_shard() && t.is_partial()) ||
        (f.is_partial() && t.is_partial() && f.reduce != t.reduce)) {
      plan.impossible = true;
      return plan;
    }
    const int32_t fs = f.is_shard() ? f.dim : -1;
    const int32_t ts = t.is_shard() ? t.dim : -1;
    if (fs >= 0) bytes_of.touch(fs);
    if (ts >= 0) bytes_of.touch(ts);
    if (fs >= 0 && fs == ts) {
      if (is_broken(fs)) remove[static_cast<size_t>(m)] = add[static_cast<size_t>(m)] = true;
      continue;
    }
    if (fs >= 0) {
      mark_broken(fs);
      remove[static_cast<size_t>(m)] = true;
    }
    if (ts >= 0) {
      mark_broken(ts);
      add[static_cast<size_t>(m)] = true;
    }
  }
  bytes_of.finish();

  double cur_bytes = bytes_of(cur.data());
  double min_bytes = cur_bytes;
  int32_t min_pos = 0;  // all-reduces go before steps[min_pos]
  auto push = [&](Collective kind, MeshDimIdx m, double b) {
    plan.steps[static_cast<size_t>(plan.num_steps++)] = CommStep{kind, m, b};
  };
  // Every state the tensor passes through (a free slice's too), and where the smallest is.
  size_t min_state = 0;
  auto record = [&] {
    if (states) states->emplace_back(cur.begin(), cur.begin() + nd);
  };
  auto update = [&] {
    record();
    cur_bytes = bytes_of(cur.data());
    if (cur_bytes < min_bytes) {
      min_bytes = cur_bytes;
      min_pos = plan.num_steps;
      if (states) min_state = states->size();
    }
  };
  // Mesh dim m may leave the sharding of its tensor dim only as the innermost split.
  auto remove_ready = [&](int32_t m) {
    const int32_t d = cur[static_cast<size_t>(m)].dim;
    for (int32_t m2 = m + 1; m2 < nd; ++m2)
      if (cur[static_cast<size_t>(m2)].is_shard(d)) return false;
    return true;
  };
  // Mesh dim m may join the sharding of d once every sharding of d to undo is undone, as the
  // innermost split, after the target's outer ones.
  auto add_ready = [&](int32_t m, int32_t d) {
    for (int32_t m2 = 0; m2 < nd; ++m2) {
      const Placement& c = cur[static_cast<size_t>(m2)];
      if (remove[static_cast<size_t>(m2)] && c.is_shard(d)) return false;
      if (m2 == m) continue;
      if (m2 > m && c.is_shard(d)) return false;
      if (m2 < m && add[static_cast<size_t>(m2)] && tgt[m2].is_shard(d)) return false;
    }
    return true;
  };

  for (;;) {
    bool progress = false;
    // Free slices first (scanning first to last), so that collectives see smaller data.
    for (int32_t m = 0; m < nd; ++m) {
      const auto mi = static_cast<size_t>(m);
      if (!add[mi] || !cur[mi].is_replicate() || !add_ready(m, tgt[m].dim)) continue;
      cur[mi] = tgt[m];
      add[mi] = false;
      update();
      progress = true;
      m = -1;  // an add may enable an earlier-scanned one
    }
    // Then one reduce-scatter (P -> S) or all-to-all (S(i) -> S(j)), first ready mesh dim.
    for (int32_t m = 0; m < nd && !progress; ++m) {
      const auto mi = static_cast<size_t>(m);
      if (!add[mi] || cur[mi].is_replicate() || !add_ready(m, tgt[m].dim)) continue;
      if (cur[mi].is_partial()) {
        push(Collective::kReduceScatter, m, cur_bytes);
      } else {
        if (!remove_ready(m)) continue;  // cur is S(i), i != d, and must first leave i
        push(Collective::kAllToAll, m, cur_bytes);
        remove[mi] = false;
      }
      cur[mi] = tgt[m];
      add[mi] = false;
      update();
      progress = true;
    }
    if (progress) continue;
    for (int32_t m = nd - 1; m >= 0; --m) {
      const auto mi = static_cast<size_t>(m);
      if (!remove[mi] || !remove_ready(m)) continue;
      cur[mi] = Placement::replicate();
      remove[mi] = false;
      cur_bytes = bytes_of(cur.data());
      push(Collective::kAllGather, m, cur_bytes);  // bytes = gathered size
      record();
      if (cur_bytes < min_bytes) {
        min_bytes = cur_bytes;
        min_pos = plan.num_steps;
        if (states) min_state = states->size();
      }
      progress = true;
      break;
    }
    if (!progress) break;
  }

  for (int32_t m = 0; m < nd; ++m)
    if (add[static_cast<size_t>(m)] || remove[static_cast<size_t>(m)])
      throw std::logic_error(fmt::format("redistribute: no schedule from {} to {} on {}",
                                         from.to_string(), to.to_string(), mesh.describe()));

  // Partial -> Replicate: all-reduce at the smallest size along the schedule.
  int32_t num_ar = 0;
  for (int32_t m = 0; m < nd; ++m)
    if (src[m].is_partial() && tgt[m].is_replicate()) ++num_ar;
  if (num_ar > 0) {
    for (int32_t i = plan.num_steps - 1; i >= min_pos; --i)
      plan.steps[static_cast<size_t>(i + num_ar)] = plan.steps[static_cast<size_t>(i)];
    int32_t at = min_pos;
    for (int32_t m = 0; m < nd; ++m)
      if (src[m].is_partial() && tgt[m].is_replicate())
        plan.steps[static_cast<size_t>(at++)] = CommStep{Collective::kAllReduce, m, min_bytes};
    plan.num_steps += num_ar;
    if (states) insert_all_reduce_states(*states, min_state, from, to);
  }
  return plan;
}

}  // namespace

RedistributePlan plan_redistribute(const ShardingSpec& from, const ShardingSpec& to,
                                   const Mesh& mesh) {
  return plan_steps(from, to, mesh, nullptr);
}

std::vector<std::vector<Placement>> redistribute_path(const ShardingSpec& from,
                                                      const ShardingSpec& to, const Mesh& mesh) {
  std::vector<std::vector<Placement>> states;
  const RedistributePlan plan = plan_steps(from, to, mesh, &states);
  if (plan.impossible) return {};
  // Replicate -> Partial dims are free and left to the end.
  if (from.placements != to.placements && (states.empty() || states.back() != to.placements))
    states.push_back(to.placements);
  return states;
}

RedistributePlan plan_redistribute_dtensor(const ShardingSpec& from, const ShardingSpec& to,
                                          const Mesh& mesh) {
  if (!compatible(from, to, mesh)) {
    RedistributePlan plan;
    plan.impossible = true;
    return plan;
  }
  return dtensor_plan(from, to, mesh);
}

double redistribute_cost_us(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh,
                            CommModel model) {
  if (model == CommModel::kDtensor) {
    if (!compatible(from, to, mesh)) return kInf;
    return dtensor_cost(from, to, mesh);
  }
  const RedistributePlan plan = plan_redistribute(from, to, mesh);
  if (plan.impossible) return kInf;
  double cost = 0.0;
  for (int32_t i = 0; i < plan.num_steps; ++i) {
    const CommStep& s = plan.steps[static_cast<size_t>(i)];
    cost += collective_time_us(s.kind, s.bytes, mesh, s.dim, CommModel::kNccl);
  }
  return cost;
}

double redistribute_bytes(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  const RedistributePlan plan = plan_redistribute(from, to, mesh);
  if (plan.impossible) return kInf;
  double total = 0.0;
  for (int32_t i = 0; i < plan.num_steps; ++i) {
    const CommStep& s = plan.steps[static_cast<size_t>(i)];
    total += collective_bus_bytes(s.kind, s.bytes, mesh.size(s.dim));
  }
  return total;
}

}  // namespace autoshard

#include "cost/redistribute.h"

#include "cost/dtensor_planner.h"

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
  std::array<int64_t, kMaxMeshDims> sizes{};
  std::array<int32_t, kMaxMeshDims> pos{};
  for (int32_t m = 0; m < mesh.ndim(); ++m) sizes[static_cast<size_t>(m)] = mesh.size(m);
  if (!decode_shard_positions(s.placements.data(), mesh.ndim(), sizes.data(), pos.data()))
    throw std::invalid_argument(fmt::format("redistribute: {} spec {}: the split factors fit no "
                                            "shard order on mesh {}",
                                            which, s.to_string(), mesh.describe()));
}

/// Checks the specs; returns false when the transition is impossible for every profile.
bool compatible(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  check_spec(from, mesh, "source");
  check_spec(to, mesh, "target");
  return from.meta.shape == to.meta.shape && from.meta.dtype == to.meta.dtype;
}

/// Walks DTensor's transform list with its byte tracking (redistribute_cost in torch 2.13
/// _collective_utils.py: GiB = global bytes / num_shards / 1024^3, times n after a gather,
/// divided by n after a scatter or slice, in that order of operations), calling
/// `step(kind, mesh dim, GiB)` for every collective; all_to_all is priced by the caller.
/// Returns false when a step is impossible (S -> P, P(x) -> P(y)) or no plan exists.
template <class Step>
bool walk_dtensor(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh, Step step) {
  if (from.is_replicated() || from.placements == to.placements) return true;
  int64_t num_shards = 1;
  for (int32_t m = 0; m < mesh.ndim(); ++m)
    if (from.placements[static_cast<size_t>(m)].is_shard()) num_shards *= mesh.size(m);
  double gib = static_cast<double>(from.meta.bytes()) / static_cast<double>(num_shards) / 1024 / 1024 / 1024;
  const DtensorSteps steps = dtensor_transform_steps(from, to, mesh);
  if (!steps.found) return false;
  for (int32_t i = 0; i < steps.num; ++i) {
    const DtensorStep& s = steps.steps[static_cast<size_t>(i)];
    const auto n = static_cast<double>(mesh.size(s.dim));
    if (s.from.is_shard() && s.to.is_replicate()) {
      gib *= n;
      step(Collective::kAllGather, s.dim, gib);
    } else if (s.from.is_shard() && s.to.is_shard()) {
      step(Collective::kAllToAll, s.dim, gib);
    } else if (s.from.is_partial() && s.to.is_replicate()) {
      step(Collective::kAllReduce, s.dim, gib);
    } else if (s.from.is_partial() && s.to.is_shard()) {
      step(Collective::kReduceScatter, s.dim, gib);
      gib /= n;
    } else if (s.from.is_replicate() && s.to.is_shard()) {
      gib /= n;
    } else if (!s.from.is_replicate()) {  // S -> P, P(x) -> P(y)
      return false;
    }
    // Replicate -> Partial: free.
  }
  return true;
}

/// DTensor's collectives (see plan_redistribute_dtensor in the header).
RedistributePlan dtensor_plan(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  RedistributePlan plan;
  const bool ok = walk_dtensor(from, to, mesh, [&](Collective kind, MeshDimIdx m, double gib) {
    if (plan.num_steps == RedistributePlan::kMaxSteps)
      throw std::logic_error("redistribute: DTensor plan longer than RedistributePlan holds");
    plan.steps[static_cast<size_t>(plan.num_steps++)] = CommStep{kind, m, gib * 1024 * 1024 * 1024};
  });
  if (!ok) {
    plan.impossible = true;
    plan.num_steps = 0;
  }
  return plan;
}

/// DTensor's redistribute_cost, step for step over its transform list (see the header).
double dtensor_cost(const ShardingSpec& from, const ShardingSpec& to, const Mesh& mesh) {
  double cost = 0.0;
  const bool ok = walk_dtensor(from, to, mesh, [&](Collective kind, MeshDimIdx m, double gib) {
    cost += dtensor_collective_gib_us(kind, gib, mesh, m);
    if (kind == Collective::kAllToAll) cost += kDtensorShardToShardPenaltyUs;
  });
  return ok ? cost : kInf;
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

/// The mesh dim at `pos`ition i of tensor dim d's shard order in `p`, -1 if none.
int32_t cut_at(const Placement* p, const int32_t* pos, int32_t nd, int32_t d, int32_t i) {
  for (int32_t m = 0; m < nd; ++m)
    if (p[m].is_shard(d) && pos[m] == i) return m;
  return -1;
}

/// Whether mesh dim m shards the same tensor dim in both specs within the common prefix of
/// that dim's two shard orders (a cut both keep; everything after it is undone and redone).
bool in_common_prefix(const Placement* src, const int32_t* src_pos, const Placement* tgt,
                      const int32_t* tgt_pos, int32_t nd, int32_t m) {
  if (!src[m].is_shard() || !tgt[m].is_shard(src[m].dim) || src_pos[m] != tgt_pos[m]) return false;
  const int32_t d = src[m].dim;
  for (int32_t i = 0; i < src_pos[m]; ++i)
    if (cut_at(src, src_pos, nd, d, i) != cut_at(tgt, tgt_pos, nd, d, i)) return false;
  return true;
}

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

  std::array<int32_t, kMaxMeshDims> src_pos{}, tgt_pos{}, cur_pos{};
  for (int32_t m = 0; m < nd; ++m) sizes[static_cast<size_t>(m)] = mesh.size(m);
  decode_shard_positions(src, nd, sizes.data(), src_pos.data());  // compatible() checked both
  decode_shard_positions(tgt, nd, sizes.data(), tgt_pos.data());
  for (int32_t m = 0; m < nd; ++m) {
    const Placement& f = src[m];
    const Placement& t = tgt[m];
    cur[static_cast<size_t>(m)] = f;
    cur_pos[static_cast<size_t>(m)] = src_pos[static_cast<size_t>(m)];
    if ((f.is_shard() && t.is_partial()) ||
        (f.is_partial() && t.is_partial() && f.reduce != t.reduce)) {
      plan.impossible = true;
      return plan;
    }
    if (f.is_shard()) bytes_of.touch(f.dim);
    if (t.is_shard()) bytes_of.touch(t.dim);
    const bool keep = in_common_prefix(src, src_pos.data(), tgt, tgt_pos.data(), nd, m);
    remove[static_cast<size_t>(m)] = f.is_shard() && !keep;
    add[static_cast<size_t>(m)] = t.is_shard() && !keep;
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
  // Mesh dim m may leave the sharding of its tensor dim only as the innermost cut.
  auto remove_ready = [&](int32_t m) {
    const int32_t d = cur[static_cast<size_t>(m)].dim;
    for (int32_t m2 = 0; m2 < nd; ++m2)
      if (cur[static_cast<size_t>(m2)].is_shard(d) && cur_pos[static_cast<size_t>(m2)] > cur_pos[static_cast<size_t>(m)])
        return false;
    return true;
  };
  // Mesh dim m may join the sharding of d as its innermost cut once the current cuts of d are
  // exactly the target's cuts outside m (every cut to undo undone, every outer one in place).
  auto add_ready = [&](int32_t m, int32_t d) {
    int32_t count = 0;
    for (int32_t m2 = 0; m2 < nd; ++m2) {
      const auto i = static_cast<size_t>(m2);
      if (!cur[i].is_shard(d)) continue;
      if (m2 == m || remove[i] || !tgt[m2].is_shard(d) || tgt_pos[i] != cur_pos[i]) return false;
      ++count;
    }
    return count == tgt_pos[static_cast<size_t>(m)];
  };
  for (;;) {
    bool progress = false;
    // Free slices first (scanning first to last), so that collectives see smaller data.
    for (int32_t m = 0; m < nd; ++m) {
      const auto mi = static_cast<size_t>(m);
      if (!add[mi] || !cur[mi].is_replicate() || !add_ready(m, tgt[m].dim)) continue;
      cur[mi] = tgt[m];
      cur_pos[mi] = tgt_pos[mi];
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
      cur_pos[mi] = tgt_pos[mi];
      add[mi] = false;
      update();
      progress = true;
    }
    if (progress) continue;
    for (int32_t m = nd - 1; m >= 0; --m) {
      const auto mi = static_cast<size_t>(m);
      if (!remove[mi] || !remove_ready(m)) continue;
      cur[mi] = Placement::replicate();
      cur_pos[mi] = -1;
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

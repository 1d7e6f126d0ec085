#include "planner/prefetch_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "cost/redistribute.h"
#include "ir/dtype.h"
#include "planner/overlap.h"

namespace autoshard {

std::string_view bucketing_name(Bucketing b) { return b == Bucketing::kLayer ? "layer" : "none"; }

std::optional<Bucketing> parse_bucketing(std::string_view s) {
  if (s == "layer") return Bucketing::kLayer;
  if (s == "none") return Bucketing::kNone;
  return std::nullopt;
}

std::string bucket_key(NodeIdx issue_before, const ShardingSpec& from, const ShardingSpec& to) {
  return fmt::format("{}|{}|{}|{}", issue_before, from.to_string(), to.to_string(),
                     dtype_name(to.meta.dtype));
}

double bucket_latency_credit_us(Collective c, MeshDimIdx dim, const Mesh& mesh, CommModel model,
                                double member_us) {
  if (c == Collective::kAllToAll) return 0;  // the runtime merges no all-to-all (see header)
  return std::clamp(collective_time_us(c, 0.0, mesh, dim, model), 0.0, std::max(0.0, member_us));
}

int32_t prefetch_segment(int32_t consumer_segment, int32_t prefetch_layers) {
  if (consumer_segment < 0) return -1;
  return std::max(0, consumer_segment - std::max(0, prefetch_layers));
}

std::vector<NodeIdx> run_order(const Graph& g) {
  std::vector<NodeIdx> order(static_cast<size_t>(g.size()));
  for (NodeIdx i = 0; i < g.size(); ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

NodeIdx wait_point(const Graph& g, NodeIdx consumer, int32_t slot) {
  if (slot < 0 || consumer < 0 || consumer >= g.size() || g.node(consumer).kind != NodeKind::kOp) return kNoNode;
  return consumer;
}

NodeIdx first_backward_op(const Graph& g) {
  // The seed's ops (a tangent and what only feeds tangents) do not run: the runtime's
  // backward starts from the gradient its caller passes.
  std::vector<char> seed(static_cast<size_t>(g.size()), 0);
  for (NodeIdx t : g.tangents) seed[static_cast<size_t>(t)] = 1;
  std::vector<std::vector<NodeIdx>> users(static_cast<size_t>(g.size()));
  for (NodeIdx v = 0; v < g.size(); ++v)
    for (const TensorRef& r : g.node(v).inputs) users[static_cast<size_t>(r.node)].push_back(v);
  for (NodeIdx v = g.size() - 1; v >= 0; --v) {
    const auto& u = users[static_cast<size_t>(v)];
    if (g.node(v).phase == Phase::kBackward && !u.empty() &&
        std::all_of(u.begin(), u.end(), [&](NodeIdx w) { return seed[static_cast<size_t>(w)] != 0; }))
      seed[static_cast<size_t>(v)] = 1;
  }
  for (NodeIdx v = 0; v < g.size(); ++v)
    if (g.node(v).kind == NodeKind::kOp && g.node(v).phase == Phase::kBackward && !seed[static_cast<size_t>(v)])
      return v;
  return kNoNode;
}

PrefetchPoints::PrefetchPoints(const Graph& g)
    : segment_(layer_segments(g, &num_segments_)), first_backward_(first_backward_op(g)) {
  first_op_.assign(static_cast<size_t>(num_segments_), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t k = segment_[static_cast<size_t>(i)];
    if (k >= 0 && first_op_[static_cast<size_t>(k)] == kNoNode) first_op_[static_cast<size_t>(k)] = i;
  }
}

NodeIdx PrefetchPoints::issue_at(const Graph& g, NodeIdx consumer, int32_t prefetch_layers) const {
  const int32_t k = prefetch_segment(segment_[static_cast<size_t>(consumer)], prefetch_layers);
  const NodeIdx at = k < 0 ? kNoNode : first_op_[static_cast<size_t>(k)];
  if (g.node(consumer).phase == Phase::kBackward && first_backward_ != kNoNode &&
      (at == kNoNode || at < first_backward_))
    return first_backward_;
  return at;
}

namespace {

/// A grad pair's gradient spec and its parameter's (with the gradient's meta): the reduction's
/// two ends; nullopt where the plan places neither.
std::optional<std::pair<ShardingSpec, ShardingSpec>> grad_specs(const Graph& g, const Plan& plan,
                                                                const GradPair& gp) {
  const auto& param = plan.nodes[static_cast<size_t>(gp.param)];
  const auto& grad = plan.nodes[static_cast<size_t>(gp.grad.node)];
  if (!param || !grad) return std::nullopt;
  ShardingSpec to = param->chosen.outputs.at(0);
  to.meta = g.meta(gp.grad);
  return std::make_pair(grad->chosen.outputs.at(static_cast<size_t>(gp.grad.output)), std::move(to));
}

}  // namespace

std::vector<ReductionEntry> reduction_buckets(const Graph& g, const Plan& plan, Bucketing b,
                                              int32_t* num_buckets) {
  int32_t n_segments = 0;
  const std::vector<int32_t> segment = layer_segments(g, &n_segments);
  std::map<std::string, int32_t> bucket_of;
  std::vector<ReductionEntry> out;
  int32_t count = 0;
  for (const GradPair& gp : g.grad_pairs) {
    const auto specs = grad_specs(g, plan, gp);
    if (!specs) continue;
    const auto& [from, to] = *specs;
    if (from.to_string() == to.to_string()) continue;  // nothing to reduce or move
    int32_t bucket = count;
    if (b == Bucketing::kLayer)
      bucket = bucket_of.try_emplace(bucket_key(segment[static_cast<size_t>(gp.grad.node)], from, to), count)
                   .first->second;
    if (bucket == count) ++count;
    out.push_back({gp.param, gp.grad.node, bucket, wait_point(g, gp.param, -1)});
  }
  if (num_buckets) *num_buckets = count;
  return out;
}

namespace {

/// The states between `from` and `to` on their planned path of two or more steps (slices or
/// collectives); none for a one-step move, which DTensor makes the same way.
std::vector<std::vector<Placement>> via_states(const ShardingSpec& from, const ShardingSpec& to,
                                               const Mesh& mesh) {
  if (from.to_string() == to.to_string()) return {};
  std::vector<std::vector<Placement>> path = redistribute_path(from, to, mesh);
  if (path.size() < 2) return {};
  path.pop_back();  // the last state is `to`
  return path;
}

}  // namespace

std::vector<PathEntry> planned_paths(const Graph& g, const Plan& plan, const Mesh& mesh) {
  std::vector<PathEntry> out;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& consumer = plan.nodes[static_cast<size_t>(i)];
    if (g.node(i).kind != NodeKind::kOp || !consumer) continue;
    const Node& x = g.node(i);
    for (size_t slot = 0; slot < x.inputs.size() && slot < consumer->chosen.inputs.size(); ++slot) {
      const auto& from_plan = plan.nodes[static_cast<size_t>(x.inputs[slot].node)];
      if (!from_plan) continue;
      const ShardingSpec& from = from_plan->chosen.outputs.at(static_cast<size_t>(x.inputs[slot].output));
      ShardingSpec to = consumer->chosen.inputs[slot];
      to.meta = g.meta(x.inputs[slot]);
      auto via = via_states(from, to, mesh);
      if (!via.empty()) out.push_back({i, static_cast<int32_t>(slot), std::move(via)});
    }
  }
  for (const GradPair& gp : g.grad_pairs) {
    const auto specs = grad_specs(g, plan, gp);
    if (!specs) continue;
    auto via = via_states(specs->first, specs->second, mesh);
    if (!via.empty()) out.push_back({gp.param, -1, std::move(via)});
  }
  return out;
}

PrefetchSchedule prefetch_schedule(const Graph& g, const Plan& plan, const ScheduleOptions& o) {
  if (!plan.has_solution) throw std::runtime_error("prefetch_schedule: the plan has no solution");
  PrefetchSchedule s;
  s.options = o;
  const PrefetchPoints points(g);
  const std::vector<char> view = placeholder_views(g);
  std::map<std::string, int32_t> bucket_of;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& consumer = plan.nodes[static_cast<size_t>(i)];
    if (x.kind != NodeKind::kOp || !consumer) continue;
    for (size_t slot = 0; slot < x.inputs.size(); ++slot) {
      const TensorRef& r = x.inputs[slot];
      const auto& from_plan = plan.nodes[static_cast<size_t>(r.node)];
      if (!from_plan || slot >= consumer->chosen.inputs.size()) continue;
      const ShardingSpec& from = from_plan->chosen.outputs.at(static_cast<size_t>(r.output));
      ShardingSpec to = consumer->chosen.inputs[slot];
      if (from.to_string() == to.to_string()) continue;  // no collective to issue
      if (g.node(r.node).kind == NodeKind::kOp && !view[static_cast<size_t>(r.node)]) {
        s.issues.push_back({i, static_cast<int32_t>(slot), r.node, wait_point(g, i, static_cast<int32_t>(slot))});
        continue;
      }
      to.meta = g.meta(r);
      const NodeIdx at = points.issue_at(g, i, o.prefetch_layers);
      int32_t bucket = s.num_buckets;
      if (o.bucketing == Bucketing::kLayer)
        bucket = bucket_of.try_emplace(bucket_key(at, from, to), s.num_buckets).first->second;
      if (bucket == s.num_buckets) ++s.num_buckets;
      s.entries.push_back({i, static_cast<int32_t>(slot), at, bucket, wait_point(g, i, static_cast<int32_t>(slot))});
    }
  }
  s.reductions = reduction_buckets(g, plan, o.bucketing, &s.num_reduction_buckets);
  return s;
}

}  // namespace autoshard

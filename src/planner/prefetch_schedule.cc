#include "planner/prefetch_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "ir/dtype.h"
#include "planner/overlap.h"

namespace autoshard {

std::string_view bucketing_name(Bucketing b) { return b == Bucketing::kLayer ? "layer" : "none"; }

std::optional<Bucketing> parse_bucketing(std::string_view s) {
  if (s == "layer") return Bucketing::kLayer;
  if (s == "none") return Bucketing::kNone;
  return std::nullopt;
}

std::string bucket_key(int32_t issue_segment, const ShardingSpec& from, const ShardingSpec& to) {
  return fmt::format("{}|{}|{}|{}", issue_segment, from.to_string(), to.to_string(),
                     dtype_name(to.meta.dtype));
}

double bucket_latency_credit_us(Collective c, MeshDimIdx dim, const Mesh& mesh, CommModel model,
                                double member_us) {
  return std::clamp(collective_time_us(c, 0.0, mesh, dim, model), 0.0, std::max(0.0, member_us));
}

int32_t prefetch_segment(int32_t consumer_segment, int32_t prefetch_layers) {
  if (consumer_segment < 0) return -1;
  return std::max(0, consumer_segment - std::max(0, prefetch_layers));
}

std::vector<ReductionEntry> reduction_buckets(const Graph& g, const Plan& plan, Bucketing b,
                                              int32_t* num_buckets) {
  int32_t n_segments = 0;
  const std::vector<int32_t> segment = layer_segments(g, &n_segments);
  std::map<std::string, int32_t> bucket_of;
  std::vector<ReductionEntry> out;
  int32_t count = 0;
  for (const GradPair& gp : g.grad_pairs) {
    const auto& param = plan.nodes[static_cast<size_t>(gp.param)];
    const auto& grad = plan.nodes[static_cast<size_t>(gp.grad.node)];
    if (!param || !grad) continue;
    const ShardingSpec& from = grad->chosen.outputs.at(static_cast<size_t>(gp.grad.output));
    ShardingSpec to = param->chosen.outputs.at(0);
    if (from.to_string() == to.to_string()) continue;  // nothing to reduce or move
    to.meta = g.meta(gp.grad);
    int32_t bucket = count;
    if (b == Bucketing::kLayer)
      bucket = bucket_of.try_emplace(bucket_key(segment[static_cast<size_t>(gp.grad.node)], from, to), count)
                   .first->second;
    if (bucket == count) ++count;
    out.push_back({gp.param, gp.grad.node, bucket});
  }
  if (num_buckets) *num_buckets = count;
  return out;
}

PrefetchSchedule prefetch_schedule(const Graph& g, const Plan& plan, const ScheduleOptions& o) {
  if (!plan.has_solution) throw std::runtime_error("prefetch_schedule: the plan has no solution");
  PrefetchSchedule s;
  s.options = o;
  int32_t n_segments = 0;
  const std::vector<int32_t> segment = layer_segments(g, &n_segments);
  const std::vector<char> view = placeholder_views(g);
  std::vector<NodeIdx> first_op(static_cast<size_t>(n_segments), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const int32_t k = segment[static_cast<size_t>(i)];
    if (k >= 0 && first_op[static_cast<size_t>(k)] == kNoNode) first_op[static_cast<size_t>(k)] = i;
  }
  std::map<std::string, int32_t> bucket_of;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& x = g.node(i);
    const auto& consumer = plan.nodes[static_cast<size_t>(i)];
    if (x.kind != NodeKind::kOp || !consumer) continue;
    for (size_t slot = 0; slot < x.inputs.size(); ++slot) {
      const TensorRef& r = x.inputs[slot];
      const Node& producer = g.node(r.node);
      if (producer.kind == NodeKind::kOp && !view[static_cast<size_t>(r.node)]) continue;
      const auto& from_plan = plan.nodes[static_cast<size_t>(r.node)];
      if (!from_plan || slot >= consumer->chosen.inputs.size()) continue;
      const ShardingSpec& from = from_plan->chosen.outputs.at(static_cast<size_t>(r.output));
      ShardingSpec to = consumer->chosen.inputs[slot];
      if (from.to_string() == to.to_string()) continue;  // no collective to issue
      to.meta = g.meta(r);
      const int32_t k = prefetch_segment(segment[static_cast<size_t>(i)], o.prefetch_layers);
      int32_t bucket = s.num_buckets;
      if (o.bucketing == Bucketing::kLayer)
        bucket = bucket_of.try_emplace(bucket_key(k, from, to), s.num_buckets).first->second;
      if (bucket == s.num_buckets) ++s.num_buckets;
      s.entries.push_back({i, static_cast<int32_t>(slot),
                           k < 0 ? kNoNode : first_op[static_cast<size_t>(k)], bucket});
    }
  }
  s.reductions = reduction_buckets(g, plan, o.bucketing, &s.num_reduction_buckets);
  return s;
}

}  // namespace autoshard

#include "planner/experts.h"

#include <algorithm>
#include <string_view>

#include "cost/compute.h"

namespace autoshard {

namespace {

/// Whether forward op `n`, reading a tensor whose dim 0 is the expert dim, keeps it at dim 0.
bool keeps_expert_dim(const Node& n, const TensorMeta& in) {
  const std::string_view op = aten_packet(n.op);
  static const std::vector<std::string_view> kSame = {
      "_to_copy", "to", "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "expand"};
  if (std::find(kSame.begin(), kSame.end(), op) != kSame.end()) return true;
  if (n.outputs.empty()) return false;
  const TensorMeta& out = n.out();
  if (op == "transpose") {
    const int64_t r = in.rank();
    auto norm = [r](int64_t d) { return d < 0 ? d + r : d; };
    return norm(n.attr_int("dim0", 0)) != 0 && norm(n.attr_int("dim1", 1)) != 0;
  }
  if (op == "permute") {
    const std::vector<int64_t> dims = n.attr_ints("dims");
    return !dims.empty() && dims[0] == 0;
  }
  if (op == "view" || op == "_unsafe_view" || op == "reshape" || op == "_reshape_alias")
    return out.rank() >= 1 && in.rank() >= 1 && out.shape[0] == in.shape[0];
  return false;
}

bool is_expert_matmul(std::string_view op) {
  return op == "_grouped_mm" || op == "bmm" || op == "baddbmm";
}

}  // namespace

ExpertAnalysis expert_analysis(const Graph& g) {
  ExpertAnalysis res;
  res.expert_param.assign(static_cast<size_t>(g.size()), 0);
  // Per node: the rank-3 parameter it still holds with its expert dim at dim 0.
  std::vector<NodeIdx> alias(static_cast<size_t>(g.size()), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind == NodeKind::kParameter) {
      if (!n.outputs.empty() && n.out().rank() == 3) alias[static_cast<size_t>(i)] = i;
      continue;
    }
    if (n.kind != NodeKind::kOp || n.phase != Phase::kForward || n.inputs.empty()) continue;
    const std::string_view op = aten_packet(n.op);
    if (is_expert_matmul(op)) {
      const size_t first = op == "baddbmm" ? 1 : 0;
      for (size_t s = first; s < std::min(n.inputs.size(), first + 2); ++s) {
        const NodeIdx p = alias[static_cast<size_t>(n.inputs[s].node)];
        if (p == kNoNode) continue;
        res.expert_param[static_cast<size_t>(p)] = 1;
        const TensorMeta& out = n.out();
        if (out.rank() == 3 && out.shape[0] == g.node(p).out().shape[0]) {
          if (std::find(res.batched.begin(), res.batched.end(), i) == res.batched.end())
            res.batched.push_back(i);
        } else {
          ++res.jagged;
        }
      }
      continue;
    }
    const TensorRef& src = n.inputs[0];
    const NodeIdx p = alias[static_cast<size_t>(src.node)];
    if (p != kNoNode && keeps_expert_dim(n, g.node(src.node).outputs.at(static_cast<size_t>(src.output))))
      alias[static_cast<size_t>(i)] = p;
  }
  res.n_params = std::count(res.expert_param.begin(), res.expert_param.end(), 1);
  return res;
}

MeshDimIdx expert_parallel_dim(const Mesh& mesh) {
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) {
    const std::string& n = mesh.dim(d).name;
    if (n == "ep" || n == "expert" || n == "experts") return d;
  }
  return -1;
}

}  // namespace autoshard

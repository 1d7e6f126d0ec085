/// Reductions and softmax (sharding-rules.md, "Reductions", "Softmax").
///
/// Reductions: per mesh dim all-R; a non-reduced input dim keeps its shard, re-indexed in the
/// output (keepdim keeps the index); a reduced sharded dim gives Partial(op) for sum (sum),
/// mean (avg, only when every sharded reduced dim splits evenly), amax/max (max) and amin/min
/// (min).  sum and mean also pass P(sum) through (they are linear).  Ops returning indices
/// (max.dim, argmax, ...) and non-decomposable ones (var, std, prod, logsumexp, norms, any/all)
/// keep shards on non-reduced dims only.  Scans (cumsum, cumprod, logcumsumexp) keep shards off
/// the scan dim; cumsum passes P(sum).
///
/// Softmax / log_softmax: [S(d), S(d)] for d != softmax dim; backward
/// (_softmax_backward_data: grad_output, output) [S(d), S(d), S(d)].  No Partial.
#include <algorithm>
#include <optional>

#include "strategy/rule.h"

namespace autoshard {

namespace {

struct ReduceKind {
  std::optional<ReduceOp> partial;  ///< Partial produced by reducing a sharded dim
  bool linear = false;              ///< passes P(sum) through
  bool needs_even = false;          ///< Partial only valid with even shards (avg)
};

/// Reduced dims from the "dim" attr (absent or empty: all dims).
std::vector<bool> reduced_dims(const OpContext& c, int64_t rank) {
  std::vector<bool> red(static_cast<size_t>(rank), false);
  std::vector<int64_t> dims = c.node.attr_ints("dim");
  if (dims.empty()) {
    std::fill(red.begin(), red.end(), true);
  } else {
    for (int64_t d : dims)
      if (rank > 0) red[static_cast<size_t>(c.norm_dim(d, rank))] = true;
  }
  return red;
}

RuleResult reduction(const OpContext& c, ReduceKind kind) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("reduction needs an input and an output");
  const TensorMeta& in = c.in[0];
  const int64_t rank = in.rank();
  std::vector<bool> red = reduced_dims(c, rank);
  // keepdim: explicit attr, else inferred from the output rank.
  bool keepdim = c.node.attr_bool("keepdim", c.out(0).rank() == rank && rank > 0);
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < rank; ++d) {
    Row row = c.replicated();
    row[c.in_slot(0)] = Placement::shard(d);
    if (red[static_cast<size_t>(d)]) {
      if (!kind.partial) continue;
      for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = Placement::partial(*kind.partial);
    } else {
      int32_t od = d;
      if (!keepdim)
        for (int32_t k = 0; k < d; ++k) od -= red[static_cast<size_t>(k)] ? 1 : 0;
      for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = shard_if(c.out(i), od);
    }
    r.rows.push_back(std::move(row));
  }
  if (kind.linear) r.rows.push_back(Row(c.n_out() + c.n_in(), Placement::partial(ReduceOp::kSum)));
  if (kind.needs_even) {
    const Mesh* mesh = &c.mesh;
    std::vector<int64_t> shape = in.shape;
    size_t slot = c.in_slot(0);
    r.accept = [mesh, shape, red, slot](const Combo& combo) {
      for (size_t d = 0; d < shape.size(); ++d) {
        if (!red[d]) continue;
        int64_t n = shards_of(combo[slot], static_cast<int32_t>(d), *mesh);
        if (n > 1 && shape[d] % n != 0) return false;
      }
      return true;
    };
  }
  return r;
}

RuleFn reduce(ReduceKind k) {
  return [k](const OpContext& c) { return reduction(c, k); };
}

/// Ops whose output keeps the input's rank and whose "dim" must stay unsharded.
RuleResult along_dim(const OpContext& c, bool linear) {
  if (c.n_in() < 1) c.fail("expected an input");
  const int64_t rank = c.in[0].rank();
  int32_t dim = c.dim_attr("dim", -1, rank);
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < rank; ++d) {
    if (d == dim) continue;
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = shard_if(c.out(i), d);
    for (size_t i = 0; i < c.n_in(); ++i) row[c.in_slot(i)] = shard_if(c.in[i], d);
    // shard_if turns size-1 dims into R; keep the row only if the main input is sharded.
    if (!row[c.in_slot(0)].is_shard()) continue;
    r.rows.push_back(std::move(row));
  }
  if (linear) r.rows.push_back(Row(c.n_out() + c.n_in(), Placement::partial(ReduceOp::kSum)));
  return r;
}

/// max / min: without "dim" a full reduction to a scalar (Partial(max/min)); with "dim"
/// (max.dim -> values, indices) only non-reduced dims keep shards.
RuleFn max_min(ReduceOp op) {
  return [op](const OpContext& c) {
    bool full = !c.node.has_attr("dim") && c.n_out() == 1 && c.out(0).rank() == 0;
    if (full) return reduction(c, {op, false, false});
    if (c.n_in() == 2) {  // max.other / min.other: elementwise binary
      RuleResult r;
      r.rows.push_back(c.replicated());
      for (int32_t d = 0; d < c.out(0).rank(); ++d) {
        Row row = c.replicated();
        row[0] = Placement::shard(d);
        for (size_t i = 0; i < 2; ++i) row[c.in_slot(i)] = map_broadcast(row[0], c.out(0), c.in[i]);
        r.rows.push_back(std::move(row));
      }
      return r;
    }
    return reduction(c, {std::nullopt, false, false});
  };
}

}  // namespace

void register_reduction_rules(RuleTable& t) {
  t["sum"] = reduce({ReduceOp::kSum, true, false});
  t["mean"] = reduce({ReduceOp::kAvg, true, true});
  t["amax"] = reduce({ReduceOp::kMax, false, false});
  t["amin"] = reduce({ReduceOp::kMin, false, false});
  t["max"] = max_min(ReduceOp::kMax);
  t["min"] = max_min(ReduceOp::kMin);
  for (const char* op : {"prod", "var", "std", "var_mean", "std_mean", "argmax", "argmin",
                         "logsumexp", "norm", "linalg_vector_norm", "any", "all", "nansum",
                         "count_nonzero", "aminmax"})
    t[op] = reduce({std::nullopt, false, false});
  t["cumsum"] = [](const OpContext& c) { return along_dim(c, true); };
  for (const char* op : {"cumprod", "logcumsumexp", "cummax", "cummin", "sort", "topk"})
    t[op] = [](const OpContext& c) { return along_dim(c, false); };
  // Softmax family: the softmax dim stays whole.
  // _safe_softmax (torch 2.5+, SDPA's math path): softmax that gives 0 on fully masked rows.
  for (const char* op : {"_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax",
                         "_softmax_backward_data", "_log_softmax_backward_data"})
    t[op] = [](const OpContext& c) { return along_dim(c, false); };
}

}  // namespace autoshard

/// Normalization layers (sharding-rules.md, "Norms").
///
/// Layer norm / RMS norm, axis = ndim - len(normalized_shape), for each d < axis:
/// - native_layer_norm [out, mean, rstd | input, weight?, bias?] = [S(d), S(d), S(d) | S(d), R, R]
/// - native_layer_norm_backward [d_in, d_w, d_b | grad_out, input, mean, rstd, weight?, bias?]
///   = [S(d), P, P | S(d), S(d), S(d), S(d), R, R]
/// - _fused_rms_norm [out, rrms | input, weight?] = [S(d), S(d) | S(d), R]; rms_norm [out | ...];
///   _fused_rms_norm_backward [d_in, d_w | grad_out, input, rrms, weight?] = [S(d), P | S(d)x3, R].
/// Optional tensors absent from the node simply have no slot; which slots hold activations is
/// decided by rank (same rank as the input -> activation-like, sharded with it).
///
/// Batch norm, input [N, C, ...], per-channel tensors [C]:
/// - channel: activations S(1), per-channel tensors S(0) (exact in training and eval);
/// - batch (activations S(0)): in eval pointwise (per-channel tensors R); in training only with
///   StrategyOptions::batch_norm_local_stats (per-shard statistics like DDP without
///   SyncBatchNorm): the batch statistics (save_mean/save_invstd and updated running stats)
///   are P(avg), weight/bias/running inputs R; backward gives grad_weight/grad_bias P(sum).
///
/// Group norm (aten native_group_norm: input [N, C, *], weight/bias [C] -> out [N, C, *],
/// mean/rstd [N, group]; statistics per (sample, group) over C/group channels and HxW):
/// - batch: activations and mean/rstd S(0), weight/bias R; backward grad_weight/grad_bias
///   P(sum) (their sums over the batch).  torch 2.13 DTensor registers exactly this forward
///   strategy (torch/distributed/tensor/_ops/_math_ops.py, group_norm_strategy, which rewrites
///   the N/C/HxW scalars to local values) and none for native_group_norm_backward.
/// - channel: activations S(1), mean/rstd S(1), weight/bias (and their grads) S(0), kept only
///   when the shard count of dim 1 divides `group`: then every shard holds whole groups
///   (C = group * C/group, split like torch.chunk) and runs group norm with group/shards
///   groups.  DTensor 2.13 does not offer this one (it would also have to rewrite `group`).
///
/// Weight norm (aten _weight_norm_interface(v, g, dim) -> (w, norm), the fused kernel behind
/// torch._weight_norm, aten/src/ATen/native/WeightNorm.cpp): g and norm keep only `dim`
/// (size 1 elsewhere) and norm reduces v over every other dim, so sharding v on `dim` (g, norm,
/// w with it) is the one exact split; any other dim would need a partial sum of squares
/// under the square root, which no placement expresses.  The backward
/// [grad_v, grad_g | grad_w, v, g, norm] shards the same way, and is linear in grad_w, so
/// [P, P | P, R, R, R] holds too.  DTensor 2.13 has no rule for either op.
#include <algorithm>

#include "strategy/rule.h"

namespace autoshard {

namespace {


/// Slots of tensors with the same rank as `ref` (activation-like) get S(d); outputs in
/// `partial_outs` get P; everything else R.
RuleResult norm_rows(const OpContext& c, const TensorMeta& ref, int64_t axis,
                     const std::vector<size_t>& partial_outs) {
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < axis; ++d) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) {
      bool partial = std::find(partial_outs.begin(), partial_outs.end(), i) != partial_outs.end();
      if (partial) row[c.out_slot(i)] = P;
      else if (c.out(i).rank() == ref.rank()) row[c.out_slot(i)] = Placement::shard(d);
    }
    for (size_t i = 0; i < c.n_in(); ++i)
      if (c.in[i].rank() == ref.rank()) row[c.in_slot(i)] = Placement::shard(d);
    r.rows.push_back(std::move(row));
  }
  return r;
}

int64_t norm_axis(const OpContext& c, const TensorMeta& x) {
  std::vector<int64_t> ns = c.node.attr_ints("normalized_shape");
  int64_t axis = x.rank() - static_cast<int64_t>(ns.size());
  if (ns.empty()) axis = x.rank() - 1;  // unknown: assume the last dim
  if (axis < 0) c.fail("normalized_shape longer than the input rank");
  return axis;
}

RuleResult layer_norm(const OpContext& c) {
  if (c.n_in() < 1) c.fail("expected an input");
  return norm_rows(c, c.in[0], norm_axis(c, c.in[0]), {});
}

/// Backward: input 1 is the forward input; outputs 1.. are parameter gradients (P).
RuleResult layer_norm_backward(const OpContext& c) {
  if (c.n_in() < 2) c.fail("expected grad_out and input");
  std::vector<size_t> partial;
  for (size_t i = 1; i < c.n_out(); ++i) partial.push_back(i);
  return norm_rows(c, c.in[1], norm_axis(c, c.in[1]), partial);
}

/// Batch norm forward (backward=false) or backward.  Activation-like tensors are those with
/// the input's rank; rank-1 tensors are per-channel (parameters, running or batch stats).
RuleResult batch_norm(const OpContext& c, bool backward) {
  if (c.n_in() < (backward ? 2u : 1u)) c.fail("expected an input");
  const TensorMeta& x = c.in[backward ? 1 : 0];
  if (x.rank() < 2) c.fail("batch norm input needs rank >= 2");
  bool training = c.node.attr_bool(backward ? "train" : "training", true);
  if (c.op.base == "_native_batch_norm_legit_no_training") training = false;
  RuleResult r;
  r.rows.push_back(c.replicated());
  auto is_act = [&](const TensorMeta& m) { return m.rank() == x.rank(); };
  // channel sharding
  {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i)
      row[c.out_slot(i)] = is_act(c.out(i)) ? Placement::shard(1) : shard_if(c.out(i), 0);
    for (size_t i = 0; i < c.n_in(); ++i)
      row[c.in_slot(i)] = is_act(c.in[i]) ? Placement::shard(1) : shard_if(c.in[i], 0);
    r.rows.push_back(std::move(row));
  }
  if (!training || c.opt.batch_norm_local_stats) {
    const Placement avg = training ? Placement::partial(ReduceOp::kAvg) : Placement::replicate();
    Row row = c.replicated();
    if (!backward) {
      // outputs: out, save_mean, save_invstd[, new running_mean, new running_var]
      for (size_t i = 0; i < c.n_out(); ++i)
        row[c.out_slot(i)] = is_act(c.out(i)) ? Placement::shard(0)
                             : (c.out(i).rank() == 1 && c.out(i).shape[0] > 0) ? avg
                                                                               : Placement::replicate();
      for (size_t i = 0; i < c.n_in(); ++i)
        if (is_act(c.in[i])) row[c.in_slot(i)] = Placement::shard(0);
    } else {
      // outputs: grad_input, grad_weight, grad_bias; inputs: grad_out, input, weight?,
      // running_mean?, running_var?, save_mean?, save_invstd? -- in training the last two
      // per-channel inputs are the saved batch statistics.
      for (size_t i = 0; i < c.n_out(); ++i)
        row[c.out_slot(i)] = is_act(c.out(i)) ? Placement::shard(0) : P;
      std::vector<size_t> per_channel;
      for (size_t i = 0; i < c.n_in(); ++i) {
        if (is_act(c.in[i])) row[c.in_slot(i)] = Placement::shard(0);
        else if (c.in[i].rank() == 1) per_channel.push_back(i);
      }
      if (training)
        for (size_t k = per_channel.size() >= 2 ? per_channel.size() - 2 : 0; k < per_channel.size(); ++k)
          row[c.in_slot(per_channel[k])] = avg;
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// The accept check of group norm's channel rows: the shards of dim 1 of input `input` must
/// divide the group count, so that each shard holds whole groups.
std::function<bool(const Combo&)> whole_groups(const OpContext& c, size_t input) {
  const int64_t groups = c.node.attr_int("group", 0);
  const Mesh* mesh = &c.mesh;
  const size_t slot = c.in_slot(input);
  return [groups, mesh, slot](const Combo& combo) {
    int64_t n = shards_of(combo[slot], 1, *mesh);
    return n == 1 || (groups > 0 && groups % n == 0);
  };
}

/// native_group_norm [out, mean, rstd | input, weight?, bias?] (backward=false) or
/// native_group_norm_backward [grad_in, grad_w, grad_b | grad_out, input, mean, rstd, weight?].
/// Slots are positional: with a 2-D input ([N, C], HxW = 1) mean/rstd have the input's rank.
RuleResult group_norm(const OpContext& c, bool backward) {
  const size_t n_act_in = backward ? 2 : 1;       // grad_out, input | input
  const size_t n_stats_in = backward ? 2 : 0;     // mean, rstd
  if (c.n_in() < n_act_in + n_stats_in || c.n_out() < 1) c.fail("expected the group norm tensors");
  const TensorMeta& x = c.in[n_act_in - 1];
  if (x.rank() < 2) c.fail("group norm input needs rank >= 2");
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d : {0, 1}) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) {
      if (!backward || i == 0) row[c.out_slot(i)] = Placement::shard(d);  // out, mean, rstd
      else row[c.out_slot(i)] = d == 0 ? P : shard_if(c.out(i), 0);      // grad_w, grad_b
    }
    for (size_t i = 0; i < c.n_in(); ++i) {
      const bool per_channel = i >= n_act_in + n_stats_in;
      row[c.in_slot(i)] = !per_channel ? Placement::shard(d) : d == 0 ? R : shard_if(c.in[i], 0);
    }
    r.rows.push_back(std::move(row));
  }
  r.accept = whole_groups(c, n_act_in - 1);
  return r;
}

/// _weight_norm_interface [w, norm | v, g] and _weight_norm_interface_backward
/// [grad_v, grad_g | grad_w, v, g, norm] (header comment).
RuleResult weight_norm(const OpContext& c, bool backward) {
  if (c.n_in() < (backward ? 4u : 2u) || c.n_out() < 1) c.fail("expected the weight norm tensors");
  const TensorMeta& v = c.in[backward ? 1 : 0];
  const int32_t dim = c.dim_attr("dim", 0, v.rank());
  RuleResult r;
  r.rows.push_back(c.replicated());
  Row row = c.replicated();
  for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = shard_if(c.out(i), dim);
  for (size_t i = 0; i < c.n_in(); ++i) row[c.in_slot(i)] = shard_if(c.in[i], dim);
  r.rows.push_back(std::move(row));
  if (backward) {
    Row linear = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) linear[c.out_slot(i)] = P;
    linear[c.in_slot(0)] = P;
    r.rows.push_back(std::move(linear));
  }
  return r;
}

}  // namespace

void register_norm_rules(RuleTable& t) {
  for (const char* op : {"native_layer_norm", "layer_norm", "_fused_rms_norm", "rms_norm"})
    t[op] = layer_norm;
  for (const char* op : {"native_layer_norm_backward", "_fused_rms_norm_backward"})
    t[op] = layer_norm_backward;
  for (const char* op : {"native_batch_norm", "_native_batch_norm_legit",
                         "_native_batch_norm_legit_functional",
                         "_native_batch_norm_legit_no_training", "batch_norm"})
    t[op] = [](const OpContext& c) { return batch_norm(c, false); };
  t["native_batch_norm_backward"] = [](const OpContext& c) { return batch_norm(c, true); };
  t["native_group_norm"] = [](const OpContext& c) { return group_norm(c, false); };
  t["native_group_norm_backward"] = [](const OpContext& c) { return group_norm(c, true); };
  t["_weight_norm_interface"] = [](const OpContext& c) { return weight_norm(c, false); };
  t["_weight_norm_interface_backward"] = [](const OpContext& c) { return weight_norm(c, true); };
}

}  // namespace autoshard

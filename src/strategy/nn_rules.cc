/// Neural-network layer ops: embedding, losses, convolution, pooling and the fused optimizer
/// (scaled dot-product attention: attention_rules.cc).  Facts from sharding-rules.md;
/// choices beyond it are noted at each rule.
#include <algorithm>

#include "strategy/rule.h"

namespace autoshard {

namespace {


/// embedding [out | weight, indices]: [R | R, R]; column-wise [S(last) | S(1), R]; row-wise
/// simplified from DTensor's MaskPartial to [P(sum) | S(0), R] (each rank looks up the rows it
/// holds and zero elsewhere, so summing is exact); batch [S(d) | R, S(d)] per indices dim.
RuleResult embedding(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() != 1) c.fail("embedding takes weight and indices");
  const TensorMeta& out = c.out(0);
  RuleResult r;
  r.rows.push_back(c.replicated());
  r.rows.push_back({Placement::shard(static_cast<int32_t>(out.rank() - 1)), Placement::shard(1), R});
  r.rows.push_back({P, Placement::shard(0), R});
  for (int32_t d = 0; d < c.in[1].rank(); ++d)
    r.rows.push_back({Placement::shard(d), R, Placement::shard(d)});
  return r;
}

/// embedding_dense_backward [grad_w | grad_out, indices]: [R | R, R], [S(1) | S(last), R],
/// [P | S(d), S(d)] per indices dim, [P | P, R].
RuleResult embedding_backward(const OpContext& c) {
  if (c.n_in() != 2 || c.n_out() != 1) c.fail("embedding_dense_backward takes grad and indices");
  RuleResult r;
  r.rows.push_back(c.replicated());
  r.rows.push_back({Placement::shard(1), Placement::shard(static_cast<int32_t>(c.in[0].rank() - 1)), R});
  for (int32_t d = 0; d < c.in[1].rank(); ++d)
    r.rows.push_back({P, Placement::shard(d), Placement::shard(d)});
  r.rows.push_back({P, P, R});
  return r;
}

/// Accepts only combinations in which input `input` splits evenly on every dim: a mean over
/// shards (P(avg)) equals the global mean only then.
std::function<bool(const Combo&)> even_split(const OpContext& c, size_t input) {
  const Mesh* mesh = &c.mesh;
  std::vector<int64_t> shape = c.in[input].shape;
  size_t slot = c.in_slot(input);
  return [mesh, shape, slot](const Combo& combo) {
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t n = shards_of(combo[slot], static_cast<int32_t>(d), *mesh);
      if (n > 1 && shape[d] % n != 0) return false;
    }
    return true;
  };
}

/// Reduction attr of losses: 0 none, 1 mean (default), 2 sum.
int64_t loss_reduction(const OpContext& c) { return c.node.attr_int("reduction", 1); }

/// nll_loss_forward / nll_loss2d_forward / cross_entropy_loss, [loss(, total_weight) | self,
/// target, weight?].  self is [N, C, ...] (class dim 1), target [N, ...].  Sharding a non-class
/// dim d of self (target correspondingly) gives: reduction none -> loss S(d'); sum -> P(sum);
/// mean -> P(avg), kept only when those dims split evenly (exact when every shard has the same
/// total weight: no class weights or ignored targets).  total_weight is P(sum) (R for none).
/// The class dim is never sharded (vocab-parallel loss needs target masking, not a local op).
RuleResult nll_forward(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() < 1) c.fail("expected self and target");
  const TensorMeta& self = c.in[0];
  const TensorMeta& target = c.in[1];
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (self.rank() < 2) return r;
  const int64_t red = loss_reduction(c);
  const bool probs = target.rank() == self.rank();  // class-probability targets
  for (int32_t d = 0; d < self.rank(); ++d) {
    if (d == 1) continue;
    int32_t td = probs || d == 0 ? d : d - 1;
    Row row = c.replicated();
    row[c.in_slot(0)] = Placement::shard(d);
    row[c.in_slot(1)] = Placement::shard(td);
    row[c.out_slot(0)] = red == 0 ? Placement::shard(td)
                         : red == 2 ? P
                                    : Placement::partial(ReduceOp::kAvg);
    if (c.n_out() > 1) row[c.out_slot(1)] = red == 0 ? R : P;
    r.rows.push_back(std::move(row));
  }
  if (red == 1) r.accept = even_split(c, 0);
  return r;
}

/// nll_loss_backward / nll_loss2d_backward [grad_self | grad_out, self, target, weight?,
/// total_weight]: grad_self and self S(d), target S(d'), grad_out S(d') for reduction none
/// else R; weight and total_weight R (total_weight must be the global total: the forward's
/// P(sum) total is all-reduced, a scalar).
RuleResult nll_backward(const OpContext& c) {
  if (c.n_in() < 3 || c.n_out() != 1) c.fail("expected grad_output, self and target");
  const TensorMeta& self = c.in[1];
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (self.rank() < 2) return r;
  const bool none = loss_reduction(c) == 0;
  const bool probs = c.in[2].rank() == self.rank();
  for (int32_t d = 0; d < self.rank(); ++d) {
    if (d == 1) continue;
    int32_t td = probs || d == 0 ? d : d - 1;
    Row row = c.replicated();
    row[c.out_slot(0)] = Placement::shard(d);
    row[c.in_slot(0)] = none ? Placement::shard(td) : R;
    row[c.in_slot(1)] = Placement::shard(d);
    row[c.in_slot(2)] = Placement::shard(td);
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// _ctc_loss [neg_log_likelihood [N], log_alpha [N, T, L] | log_probs [T, N, C], targets
/// [N, S], input_lengths [N], target_lengths [N]] (the Tensor overload; reduction happens in
/// the ops after it).  The loss of one sample reads only that sample's row of every input, so
/// besides all-R there is one batch row: log_probs S(1), the other inputs and both outputs
/// S(0).  Uneven batch shards are exact (per-sample outputs, no mean here).  Not split: the
/// int-list overload (lengths are attrs holding the global batch, which no shard can slice),
/// concatenated 1-D targets (a sample's slice depends on the lengths' values) and the
/// unbatched form (0-d lengths).  DTensor has no CTC strategy; autoshard.dtensor_rules
/// registers these same rows.
RuleResult ctc_forward(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() != 2) c.fail("expected log_probs and targets, two outputs");
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (c.n_in() == 4 && c.in[0].rank() == 3 && c.in[1].rank() == 2 && c.in[2].rank() == 1 &&
      c.in[3].rank() == 1) {
    Row row = c.replicated();
    row[c.out_slot(0)] = Placement::shard(0);
    row[c.out_slot(1)] = Placement::shard(0);
    row[c.in_slot(0)] = Placement::shard(1);
    for (size_t i = 1; i < 4; ++i) row[c.in_slot(i)] = Placement::shard(0);
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// _ctc_loss_backward [grad_log_probs [T, N, C] | grad [N], log_probs, targets, input_lengths,
/// target_lengths, neg_log_likelihood, log_alpha] (Tensor overload): all-R, and the batch row
/// of ctc_forward: log_probs and its gradient S(1), every other input S(0).
RuleResult ctc_backward(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() != 1) c.fail("expected grad and log_probs, one output");
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (c.n_in() == 7 && c.in[0].rank() == 1 && c.in[1].rank() == 3 && c.in[2].rank() == 2 &&
      c.in[3].rank() == 1 && c.in[4].rank() == 1) {
    Row row = c.replicated();
    row[c.out_slot(0)] = Placement::shard(1);
    for (size_t i = 0; i < 7; ++i) row[c.in_slot(i)] = Placement::shard(i == 1 ? 1 : 0);
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// mse_loss [loss | self, target] (same shapes): all-R, and per dim d self and target S(d) with
/// loss S(d) for reduction none, P(sum) for sum, P(avg) for mean (kept only when every sharded
/// dim splits evenly, so that each shard averages the same number of elements).
RuleResult mse_forward(const OpContext& c) {
  if (c.n_in() != 2 || c.n_out() != 1) c.fail("expected self and target");
  const TensorMeta& self = c.in[0];
  RuleResult r;
  r.rows.push_back(c.replicated());
  const int64_t red = loss_reduction(c);
  for (int32_t d = 0; d < self.rank(); ++d) {
    Row row(3, Placement::shard(d));
    row[c.out_slot(0)] = red == 0 ? Placement::shard(d)
                         : red == 2 ? P
                                    : Placement::partial(ReduceOp::kAvg);
    r.rows.push_back(std::move(row));
  }
  if (red == 1) r.accept = even_split(c, 1);
  return r;
}

/// mse_loss_backward [grad_self | grad_output, self, target]: pointwise over self/target — all-R,
/// or grad_self, self and target S(d) with grad_output S(d) for reduction none, else R (the
/// scalar seed gradient).  With reduction mean the local kernel divides by the local element
/// count; like P(avg) in the forward this is exact up to the 1/shards factor an executor
/// applies (DTensor has no mse rule; this is the DDP convention).
RuleResult mse_backward(const OpContext& c) {
  if (c.n_in() != 3 || c.n_out() != 1) c.fail("expected grad_output, self and target");
  const TensorMeta& self = c.in[1];
  RuleResult r;
  r.rows.push_back(c.replicated());
  const bool none = loss_reduction(c) == 0;
  for (int32_t d = 0; d < self.rank(); ++d) {
    Row row(4, Placement::shard(d));
    if (!none) row[c.in_slot(0)] = R;
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// convolution [out | input, weight, bias?], input [N, C_in, ...], weight [C_out, C_in/g, ...]
/// ([C_in, C_out/g, ...] when transposed): all-R; batch [S(0) | S(0), R, R]; for groups == 1
/// also out-channel [S(1) | R, S(w_out), S(0)] and in-channel (contracting)
/// [P | S(1), S(w_in), P] (the bias is divided like addmm's).  Unbatched inputs: all-R only.
RuleResult convolution(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() != 1) c.fail("convolution takes input, weight[, bias]");
  const TensorMeta& x = c.in[0];
  const TensorMeta& w = c.in[1];
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (x.rank() != w.rank()) return r;
  const bool transposed = c.node.attr_bool("transposed", false);
  const int32_t w_out = transposed ? 1 : 0, w_in = transposed ? 0 : 1;
  const bool bias = c.n_in() > 2;
  Row batch = c.replicated();
  batch[0] = batch[c.in_slot(0)] = Placement::shard(0);
  r.rows.push_back(batch);
  if (c.node.attr_int("groups", 1) != 1) return r;
  Row oc = c.replicated();
  oc[0] = Placement::shard(1);
  oc[c.in_slot(1)] = Placement::shard(w_out);
  if (bias) oc[c.in_slot(2)] = Placement::shard(0);
  r.rows.push_back(oc);
  Row ic = c.replicated();
  ic[0] = P;
  ic[c.in_slot(0)] = Placement::shard(1);
  ic[c.in_slot(1)] = Placement::shard(w_in);
  if (bias) ic[c.in_slot(2)] = P;
  r.rows.push_back(ic);
  return r;
}

/// convolution_backward [grad_input, grad_weight, grad_bias | grad_out, input, weight]:
/// batch [S(0), P, P | S(0), S(0), R]; out-channel [P, S(w_out), S(0) | S(1), R, S(w_out)];
/// in-channel [S(1), S(w_in), R | R, S(1), S(w_in)].  Missing outputs simply have no slot.
RuleResult convolution_backward(const OpContext& c) {
  if (c.n_in() != 3 || c.n_out() < 1) c.fail("convolution_backward takes grad_out, input, weight");
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (c.in[1].rank() != c.in[2].rank()) return r;
  const bool transposed = c.node.attr_bool("transposed", false);
  const int32_t w_out = transposed ? 1 : 0, w_in = transposed ? 0 : 1;
  auto make = [&](std::vector<Placement> outs, std::vector<Placement> ins) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out() && i < outs.size(); ++i)
      row[c.out_slot(i)] = outs[i].is_shard() ? shard_if(c.out(i), outs[i].dim) : outs[i];
    for (size_t i = 0; i < 3; ++i) row[c.in_slot(i)] = ins[i];
    r.rows.push_back(std::move(row));
  };
  using S = Placement;
  make({S::shard(0), P, P}, {S::shard(0), S::shard(0), R});
  if (c.node.attr_int("groups", 1) != 1) return r;
  make({P, S::shard(w_out), S::shard(0)}, {S::shard(1), R, S::shard(w_out)});
  make({S::shard(1), S::shard(w_in), R}, {R, S::shard(1), S::shard(w_in)});
  return r;
}

/// Pooling / upsampling over the trailing `spatial` dims (1, 2 or 3 from the op name; triu /
/// tril work on the trailing 2): any leading (batch, channel) dim may be sharded on every
/// tensor of the activation's rank (incl. max-pool indices).
RuleResult spatial(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("expected an input");
  const std::string& b = c.op.base;
  int64_t k = b.find("1d") != std::string::npos ? 1 : b.find("3d") != std::string::npos ? 3 : 2;
  const int64_t rank = c.out(0).rank();
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < rank - k; ++d) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i)
      if (c.out(i).rank() == rank) row[c.out_slot(i)] = Placement::shard(d);
    for (size_t i = 0; i < c.n_in(); ++i)
      if (c.in[i].rank() == rank) row[c.in_slot(i)] = Placement::shard(d);
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// Upsampling (aten upsample_{nearest,linear}1d, upsample_{nearest,bilinear,bicubic}2d,
/// upsample_{nearest,trilinear}3d, the _upsample_nearest_exact* and _upsample_*_aa variants,
/// and each one's _backward [grad_input | grad_output]): the spatial rows (batch and channel
/// splits), plus [P(sum) | P(sum)]: the op is linear in its one tensor (a fixed weighting of
/// input pixels; the backward, its transpose, is linear in grad_output), so a pending sum passes
/// through.  That is torch 2.13 DTensor's set (torch/distributed/tensor/_ops/_math_ops.py,
/// interp_upsample_1out_1in_strategy) less its P(avg) row (autoshard passes P(sum) only).
/// Other layouts (an .out overload's extra `out` tensor) get the spatial rows only.
RuleResult upsample(const OpContext& c) {
  RuleResult r = spatial(c);
  if (c.n_in() == 1 && c.n_out() == 1) r.rows.push_back({P, P});
  return r;
}

/// Fused optimizer step (_fused_adam: param, grad, master, exp_avg, exp_avg_sq -> 4 updated
/// tensors): every tensor shaped like the parameter shares one placement (R or S(d)); other
/// tensors (step counts, lr) stay R.  No Partial: the grad must be reduced first.
RuleResult optimizer(const OpContext& c) {
  if (c.n_in() < 1) c.fail("expected the parameter");
  const TensorMeta& p = c.in[0];
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < p.rank(); ++d) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i)
      if (c.out(i).shape == p.shape) row[c.out_slot(i)] = Placement::shard(d);
    for (size_t i = 0; i < c.n_in(); ++i)
      if (c.in[i].shape == p.shape) row[c.in_slot(i)] = Placement::shard(d);
    r.rows.push_back(std::move(row));
  }
  return r;
}

}  // namespace

void register_nn_rules(RuleTable& t) {
  t["embedding"] = embedding;
  t["embedding_dense_backward"] = embedding_backward;
  for (const char* op : {"nll_loss_forward", "nll_loss2d_forward", "nll_loss", "nll_loss2d",
                         "cross_entropy_loss"})
    t[op] = nll_forward;
  for (const char* op : {"nll_loss_backward", "nll_loss2d_backward"}) t[op] = nll_backward;
  t["_ctc_loss"] = ctc_forward;
  t["_ctc_loss_backward"] = ctc_backward;
  t["mse_loss"] = mse_forward;
  t["mse_loss_backward"] = mse_backward;
  t["convolution"] = convolution;
  t["conv2d"] = convolution;
  t["convolution_backward"] = convolution_backward;
  for (const char* op :
       {"max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices",
        "max_pool3d_with_indices", "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices_backward", "avg_pool1d", "avg_pool2d", "avg_pool3d",
        "avg_pool2d_backward", "avg_pool3d_backward", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
        "_adaptive_avg_pool3d", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
        "adaptive_max_pool2d", "adaptive_max_pool2d_backward"})
    t[op] = spatial;
  for (const char* op :
       {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
        "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
        "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
        "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa"})
    for (const char* suffix : {"", "_backward"}) t[std::string(op) + suffix] = upsample;
  t["triu"] = spatial;
  t["tril"] = spatial;
  for (const char* op : {"_fused_adam", "_fused_adamw", "_fused_sgd"}) t[op] = optimizer;
}

}  // namespace autoshard

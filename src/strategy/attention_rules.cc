/// Scaled dot-product attention (the fused SDPA ops and their backwards), q/k/v as
/// [b, h, s, d].  Facts from sharding-rules.md; context parallelism beyond DTensor's rules:
///
/// - all-R, batch S(0) and head S(1) on every tensor of rank >= 3 (q, k, v, out, logsumexp,
///   grads, attn bias); a broadcast (size 1) dim, rank < 3 tensors (cum_seq, empty debug
///   masks) and scalars (philox seed/offset) stay R.  With grouped-query attention (q and k/v
///   head counts differ) head shards must split every head count evenly so query groups stay
///   with their key/value head.
/// - context parallel (cost/context_parallel.h): the sequence S(2) on every rank >= 3 tensor,
///   twice -- once as ring attention, once as all-gather attention -- since the specs are the
///   same and only the op-internal movement of K/V differs.  Only for self-attention without
///   a mask (q and k of equal length, no rank-4 tensor besides q, k, v, the output and their
///   gradients), a logsumexp as long as the sequence (the efficient kernel pads it to 32), and
///   a sequence that splits evenly into 2P chunks (P for non-causal attention): the
///   load-balanced layout of torch.distributed.tensor.experimental.context_parallel.
#include <algorithm>

#include "strategy/rule.h"

namespace autoshard {

namespace {

bool is_backward(const OpContext& c) { return c.op.base.ends_with("_backward"); }

/// Batch and head rows (and all-R), with the grouped-query head check.
RuleResult batch_head_rows(const OpContext& c) {
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t k : {0, 1}) {
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i)
      if (c.out(i).rank() >= 3) row[c.out_slot(i)] = shard_if(c.out(i), k);
    for (size_t i = 0; i < c.n_in(); ++i)
      if (c.in[i].rank() >= 3) row[c.in_slot(i)] = shard_if(c.in[i], k);
    r.rows.push_back(std::move(row));
  }
  std::vector<int64_t> heads;  // dim-1 size per slot (0 when not a rank >= 3 tensor)
  for (size_t i = 0; i < c.n_out(); ++i) heads.push_back(c.out(i).rank() >= 3 ? c.out(i).shape[1] : 0);
  for (size_t i = 0; i < c.n_in(); ++i) heads.push_back(c.in[i].rank() >= 3 ? c.in[i].shape[1] : 0);
  bool differ = false;
  for (int64_t h : heads) differ = differ || (h > 1 && h != heads[c.in_slot(0)]);
  if (differ) {
    const Mesh* mesh = &c.mesh;
    r.accept = [mesh, heads](const Combo& combo) {
      for (size_t t = 0; t < combo.size(); ++t) {
        int64_t n = shards_of(combo[t], 1, *mesh);
        if (heads[t] > 1 && n > 1 && heads[t] % n != 0) return false;
      }
      return true;
    };
  }
  return r;
}

/// Whether a rank >= 3 tensor may be split on the sequence: a [b, h, S, d] activation or
/// gradient (d = the head dim of q or v), or a [b, h, S] logsumexp.  Anything else (an
/// attention mask or bias [.., S, S], a padded logsumexp) rules context parallelism out.
bool sequence_tensor(const TensorMeta& m, int64_t s, int64_t dqk, int64_t dv) {
  if (m.rank() < 3 || m.numel() == 0) return true;  // stays R / holds nothing
  if (m.rank() == 3) return m.shape[2] == s;
  return m.rank() == 4 && m.shape[2] == s && (m.shape[3] == dqk || m.shape[3] == dv);
}

/// The sequence length when context parallelism applies to this node, else 0.
int64_t cp_sequence(const OpContext& c) {
  const size_t q = is_backward(c) ? 1 : 0;  // backward: (grad_out, q, k, v, out, ...)
  if (c.n_in() < q + 3) return 0;
  const TensorMeta &mq = c.in[q], &mk = c.in[q + 1], &mv = c.in[q + 2];
  if (mq.rank() != 4 || mk.rank() != 4 || mv.rank() != 4) return 0;
  const int64_t s = mq.shape[2];
  if (s < 2 || mk.shape[2] != s || mv.shape[2] != s) return 0;
  const int64_t dqk = mq.shape[3], dv = mv.shape[3];
  // A mask [.., S, S] is told from a [.., S, d] activation by its last dim: only possible
  // when the head dims differ from S (every real model; tiny ones just get no CP).
  if (dqk == s || dv == s) return 0;
  for (size_t i = 0; i < c.n_in(); ++i)
    if (!sequence_tensor(c.in[i], s, dqk, dv)) return 0;
  for (size_t i = 0; i < c.n_out(); ++i)
    if (!sequence_tensor(c.out(i), s, dqk, dv)) return 0;
  return s;
}

/// The ring and all-gather rows (S(2) on every rank >= 3 tensor) and the even-split check.
void add_cp_rows(const OpContext& c, RuleResult& r) {
  const int64_t s = c.opt.context_parallel ? cp_sequence(c) : 0;
  if (s == 0) return;
  const bool causal = c.node.attr_bool("is_causal", false);
  Row row = c.replicated();
  for (size_t i = 0; i < c.n_out(); ++i)
    if (c.out(i).rank() >= 3) row[c.out_slot(i)] = shard_if(c.out(i), 2);
  for (size_t i = 0; i < c.n_in(); ++i)
    if (c.in[i].rank() >= 3) row[c.in_slot(i)] = shard_if(c.in[i], 2);
  r.row_cp.assign(r.rows.size(), std::nullopt);
  for (CpKind k : {CpKind::kRing, CpKind::kAllGather}) {
    r.rows.push_back(row);
    r.row_cp.push_back(k);
  }
  r.cp_load_balance = causal;
  // Load balancing cuts the sequence into 2P chunks; every rank gets equal ones.
  const size_t q_slot = c.in_slot(is_backward(c) ? 1 : 0);
  const Mesh* mesh = &c.mesh;
  const int64_t chunks_per_rank = causal ? 2 : 1;
  auto even = [mesh, q_slot, s, chunks_per_rank](const Combo& combo) {
    const int64_t n = shards_of(combo[q_slot], 2, *mesh);
    return n <= 1 || s % (n * chunks_per_rank) == 0;
  };
  if (r.accept)
    r.accept = [prev = r.accept, even](const Combo& combo) { return prev(combo) && even(combo); };
  else
    r.accept = even;
}

RuleResult sdpa(const OpContext& c) {
  RuleResult r = batch_head_rows(c);
  add_cp_rows(c, r);
  return r;
}

}  // namespace

void register_attention_rules(RuleTable& t) {
  for (const char* op : {"scaled_dot_product_attention", "_scaled_dot_product_efficient_attention",
                         "_scaled_dot_product_flash_attention",
                         "_scaled_dot_product_flash_attention_for_cpu",
                         "_scaled_dot_product_cudnn_attention",
                         "_scaled_dot_product_efficient_attention_backward",
                         "_scaled_dot_product_flash_attention_backward",
                         "_scaled_dot_product_flash_attention_for_cpu_backward",
                         "_scaled_dot_product_cudnn_attention_backward"})
    t[op] = sdpa;
}

}  // namespace autoshard

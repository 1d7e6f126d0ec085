/// Complex-number ops of rotary embeddings written the way Meta's reference LLaMA, torchtitan
/// and AutoParallel's llama3 write them: `torch.polar(ones, angles)` builds a complex table,
/// `view_as_complex` pairs the last dim of a real tensor into complex numbers, a complex `mul`
/// rotates them (pointwise_rules.cc) and `view_as_real` unpairs them again.  The rules follow
/// DTensor's (torch/distributed/tensor/_ops/_view_ops.py in torch 2.13):
///
/// - view_as_complex  real [..., 2] -> complex [...]: dims 0..k-2 map 1:1; the pair dim
///   disappears, so it is never sharded; Partial(sum) passes (the view is linear).
/// - view_as_real  complex [...] -> real [..., 2]: every dim maps 1:1 (a shard of the last
///   complex dim lands on the same dim, each device keeping whole pairs); the new pair dim is
///   never sharded; Partial(sum) passes.
/// - polar(abs, angle) -> complex: pointwise with broadcasting; not linear in the angle, so no
///   Partial.  torch 2.13's DTensor has no strategy for it: python/autoshard/dtensor_rules.py
///   registers these rows for the applied step.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strategy/rule.h"

namespace autoshard {

namespace {

/// Rows of a view whose input dims 0..n-1 map to the same output dims: R, P(sum), and one
/// S(d) <- S(d) row per such dim.
RuleResult same_dim_view_rows(const OpContext& c, int64_t n) {
  RuleResult r;
  r.rows.push_back(c.replicated());
  r.rows.push_back(Row(2, P));
  for (int32_t d = 0; d < n; ++d) r.rows.push_back(Row(2, Placement::shard(d)));
  return r;
}

/// The one-tensor-in, one-tensor-out shape of both views, with a one-line error otherwise.
void check_unary(const OpContext& c) {
  if (c.n_in() != 1 || c.n_out() != 1) c.fail("expected one input and one output");
}

RuleResult view_as_complex_rule(const OpContext& c) {
  check_unary(c);
  const TensorMeta& in = c.in[0];
  if (in.rank() < 1 || in.shape.back() != 2)
    c.fail(fmt::format("view_as_complex needs a last dim of size 2, got shape [{}]",
                       fmt::join(in.shape, ", ")));
  if (c.out(0).rank() != in.rank() - 1) c.fail("view_as_complex output must drop the last dim");
  // The pair dim (in.rank() - 1) has no row: a shard of it must be gathered first.
  return same_dim_view_rows(c, in.rank() - 1);
}

RuleResult view_as_real_rule(const OpContext& c) {
  check_unary(c);
  const TensorMeta& out = c.out(0);
  if (out.rank() != c.in[0].rank() + 1 || out.shape.back() != 2)
    c.fail("view_as_real output must add a last dim of size 2");
  return same_dim_view_rows(c, c.in[0].rank());
}

/// polar(abs, angle): every output dim may be sharded, each input following through
/// broadcasting (a dim an input lacks or has as 1 stays replicated).
RuleResult polar_rule(const OpContext& c) {
  if (c.n_in() != 2 || c.n_out() != 1) c.fail("polar: expected (abs, angle) and one output");
  const TensorMeta& o = c.out(0);
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < o.rank(); ++d) {
    const Placement s = Placement::shard(d);
    r.rows.push_back({s, map_broadcast(s, o, c.in[0]), map_broadcast(s, o, c.in[1])});
  }
  return r;
}

}  // namespace

void register_complex_rules(RuleTable& t) {
  t["view_as_complex"] = view_as_complex_rule;
  t["view_as_real"] = view_as_real_rule;
  t["polar"] = polar_rule;
}

}  // namespace autoshard

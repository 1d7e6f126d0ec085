/// Mixture-of-Experts ops (DTensor's grouped_mm_strategy in _ops/_matrix_ops.py gives the
/// same rows; ../shared/reference/sharding-rules.md for the conventions).
///
/// `_grouped_mm(a, b, offs?, bias?)` multiplies G groups of rows by G expert matrices.  The
/// operand ranks say which dim is grouped, and a grouped dim is never split: `offs` (the
/// G group ends, replicated) indexes it globally, so an even split would cut groups at
/// places the local kernel cannot know.  Per mesh dim, besides all-replicated and the two
/// linear rows (a Partial operand, the other replicated, gives a Partial result):
/// - 2-D (M, K) x 3-D (G, K, N) -> (M, N), rows of a grouped (Hugging Face and torchtitan
///   experts after sorting tokens by expert): N split (b S(2) -> out S(1)) or K split
///   (a S(1), b S(1) -> out Partial).  The rows M and the experts G stay whole: splitting
///   experts needs tokens moved to their expert's owner, which this layout (a jagged row
///   range per expert) cannot express as a placement; see the capacity-padded 3-D x 3-D form.
/// - 3-D (G, M, K) x 2-D (K, N) -> (M, N), columns of b grouped: K split (a S(2), b S(0) ->
///   Partial) or M split (a S(1) -> out S(0)).
/// - 2-D (M, K) x 2-D (K, N) -> (G, M, N), the contraction grouped (the weight gradient of
///   the 2-D x 3-D form): M split (a S(0) -> out S(1)) or N split (b S(1) -> out S(2)).
/// - 3-D (G, M, K) x 3-D (G, K, N) -> (G, M, N), a batched matmul over experts (capacity-
///   padded dispatch): the expert dim G split on all three (expert parallelism), or M, N or K
///   as in bmm.
/// `bias` (rare) stays replicated and limits the op to the replicated row.
///
/// `bincount(self, weights?)` counts values: a split input gives a Partial(sum) count, like
/// histc (whose rule is in index_rules.cc).
#include "strategy/moe_rules.h"

namespace autoshard {

namespace {

/// Placements of (out, a, b) for one candidate row.
struct MmRow {
  Placement out, a, b;
};

std::vector<MmRow> grouped_rows(int64_t ra, int64_t rb) {
  using S = Placement;
  std::vector<MmRow> rows{{R, R, R}, {P, P, R}, {P, R, P}};
  if (ra == 2 && rb == 3) {
    rows.push_back({S::shard(1), R, S::shard(2)});
    rows.push_back({P, S::shard(1), S::shard(1)});
  } else if (ra == 3 && rb == 2) {
    rows.push_back({P, S::shard(2), S::shard(0)});
    rows.push_back({S::shard(0), S::shard(1), R});
  } else if (ra == 2 && rb == 2) {
    rows.push_back({S::shard(1), S::shard(0), R});
    rows.push_back({S::shard(2), R, S::shard(1)});
  } else if (ra == 3 && rb == 3) {
    rows.push_back({S::shard(0), S::shard(0), S::shard(0)});
    rows.push_back({S::shard(1), S::shard(1), R});
    rows.push_back({S::shard(2), R, S::shard(2)});
    rows.push_back({P, S::shard(2), S::shard(1)});
  }
  return rows;
}

RuleResult grouped_mm_rule(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() != 1) c.fail("_grouped_mm: expected mat_a, mat_b[, offs, bias]");
  const int64_t ra = c.in[0].rank(), rb = c.in[1].rank();
  if (ra < 2 || ra > 3 || rb < 2 || rb > 3) c.fail("_grouped_mm: operands must be 2-D or 3-D");
  // The optional tensors after a and b: offs (1-D integers) and bias.
  bool has_bias = false;
  for (size_t i = 2; i < c.n_in(); ++i)
    if (c.in[i].rank() != 1 || is_floating(c.in[i].dtype)) has_bias = true;
  RuleResult r;
  for (const MmRow& m : grouped_rows(ra, rb)) {
    Row row = c.replicated();  // offs (and bias) replicated
    row[c.out_slot(0)] = m.out;
    row[c.in_slot(0)] = m.a;
    row[c.in_slot(1)] = m.b;
    r.rows.push_back(std::move(row));
    if (has_bias) break;
  }
  return r;
}

RuleResult bincount_rule(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("bincount: expected an input");
  RuleResult r;
  r.rows.push_back(c.replicated());
  Row row = c.replicated();
  row[c.out_slot(0)] = P;
  for (size_t i = 0; i < c.n_in(); ++i) row[c.in_slot(i)] = Placement::shard(0);
  r.rows.push_back(std::move(row));
  return r;
}

}  // namespace

void register_moe_rules(RuleTable& t) {
  t["_grouped_mm"] = grouped_mm_rule;
  t["bincount"] = bincount_rule;
}

}  // namespace autoshard

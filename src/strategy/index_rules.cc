/// Indexing, scattering, padding and shifting ops, and the `new_*` factories
/// (sharding-rules.md: "index / index_put: indices replicated"; DTensor's _tensor_ops.py).
/// Per mesh dim:
/// - gather(self, dim, index): a dim other than `dim` where self and index agree in size is
///   split on self, index and out alike; with self replicated, the index (and out) may be split
///   on any dim (each shard gathers its own positions); Partial self passes (linear in self).
/// - scatter / scatter_add / scatter_reduce (self, dim, index, src): dims other than `dim`
///   where all tensors agree are split alike; Partial passes for scatter_add and scatter.src
///   (self and src both Partial: the sum of overwritten shards is the overwrite of the sums).
/// - index_select(self, dim, index) / index_add(self, dim, index, source): non-indexed dims
///   split alike; index_select may split the index (out's `dim`) with self replicated; Partial
///   passes in self (and source).
/// - index / _unsafe_index (self, indices...), integer indices (boolean masks select a
///   data-dependent set: replicated only): the indices stay replicated and the non-indexed
///   dims of self keep their shards; with self replicated, the indices (all of one shape) may
///   be split on a dim, splitting the matching output dims (an embedding-style lookup);
///   Partial self passes.  index_put (self, indices..., values): the non-indexed dims split on
///   self, out and values (through broadcasting); Partial self and values pass.
/// - constant_pad_nd / reflection / replication pads: only unpadded dims stay split (a pad is
///   at the global edges); Partial passes for a zero constant pad.
/// - roll / flip: the rolled or flipped dims stay whole; Partial passes (a permutation).
/// - topk is in reduction_rules.cc (along a dim, like sort).
/// - as_strided: only the identity (same size, contiguous strides, offset 0) follows its
///   input; otherwise it needs a replicated input (DTensor has no general rule either).
/// - new_empty / new_zeros / new_ones / new_full / new_empty_strided: the input is only a
///   dtype/device template, so the output can be created replicated or split on any dim from
///   an input in any layout (no data moves).
/// - histc: counting is additive, so a split input gives a Partial(sum) histogram, when the
///   bin range is given (min < max); otherwise each shard would bin over its own data range.
#include <algorithm>
#include <initializer_list>
#include <numeric>

#include "strategy/rule.h"

namespace autoshard {

namespace {


/// The row of an op that is linear in the inputs `linear_in` jointly: partial sums in, a partial
/// sum out (the other inputs, e.g. indices, replicated).
Row partial_row(const OpContext& c, std::initializer_list<size_t> linear_in) {
  Row row = c.replicated();
  row[c.out_slot(0)] = P;
  for (size_t i : linear_in) row[c.in_slot(i)] = P;
  return row;
}

/// A row with every output and input partial.
Row all_partial(const OpContext& c) { return Row(c.n_out() + c.n_in(), P); }

/// Dims of self, index and out (and src) that a gather/scatter along `dim` may split alike.
bool same_size_on(const std::vector<const TensorMeta*>& ts, int32_t d) {
  for (const TensorMeta* t : ts)
    if (d >= t->rank() || t->shape[static_cast<size_t>(d)] != ts[0]->shape[static_cast<size_t>(d)])
      return false;
  return true;
}

RuleResult gather_rule(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() < 1) c.fail("gather: expected self and index");
  const TensorMeta& self = c.in[0];
  const TensorMeta& index = c.in[1];
  const int32_t dim = c.dim_attr("dim", 0, self.rank());
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < index.rank(); ++d) {
    // Self replicated: every position of the index is gathered locally.
    Row row = c.replicated();
    row[c.out_slot(0)] = shard_if(c.out(0), d);
    row[c.in_slot(1)] = shard_if(index, d);
    if (row[c.in_slot(1)].is_shard()) r.rows.push_back(row);
    if (d == dim || !same_size_on({&self, &index, &c.out(0)}, d)) continue;
    row[c.in_slot(0)] = shard_if(self, d);
    if (row[c.in_slot(0)].is_shard() && row[c.in_slot(1)].is_shard()) r.rows.push_back(row);
  }
  r.rows.push_back(partial_row(c, {0}));
  return r;
}

/// scatter.src / scatter.value / scatter_add / scatter_reduce: inputs self, index[, src].
RuleFn scatter_rule(bool additive) {
  return [additive](const OpContext& c) {
    if (c.n_in() < 2 || c.n_out() < 1) c.fail("scatter: expected self and index");
    const TensorMeta& self = c.in[0];
    const int32_t dim = c.dim_attr("dim", 0, self.rank());
    std::vector<const TensorMeta*> ts{&c.out(0)};
    for (const TensorMeta& m : c.in) ts.push_back(&m);
    RuleResult r;
    r.rows.push_back(c.replicated());
    for (int32_t d = 0; d < self.rank(); ++d) {
      if (d == dim || !same_size_on(ts, d)) continue;
      Row row = c.replicated();
      row[c.out_slot(0)] = shard_if(c.out(0), d);
      for (size_t i = 0; i < c.n_in(); ++i) row[c.in_slot(i)] = shard_if(c.in[i], d);
      if (row[c.in_slot(0)].is_shard()) r.rows.push_back(row);
    }
    // Linear in (self, src) jointly when src is a tensor: scatter_add adds, scatter.src
    // overwrites with src (the shards' overwrites sum to the overwrite of the sums).
    const bool reduce = c.node.has_attr("reduce");
    if (c.n_in() >= 3 && !reduce && (additive || c.op.base == "scatter")) {
      r.rows.push_back(partial_row(c, {0, 2}));
    }
    return r;
  };
}

RuleResult index_select_rule(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() < 1) c.fail("index_select: expected self and index");
  const TensorMeta& self = c.in[0];
  const int32_t dim = c.dim_attr("dim", 0, self.rank());
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < self.rank(); ++d) {
    if (d == dim) continue;
    Row row = c.replicated();
    row[c.out_slot(0)] = shard_if(c.out(0), d);
    row[c.in_slot(0)] = shard_if(self, d);
    if (row[c.in_slot(0)].is_shard()) r.rows.push_back(row);
  }
  Row by_index = c.replicated();  // self replicated: split the selected positions
  by_index[c.out_slot(0)] = shard_if(c.out(0), dim);
  by_index[c.in_slot(1)] = shard_if(c.in[1], 0);
  if (by_index[c.in_slot(1)].is_shard()) r.rows.push_back(by_index);
  r.rows.push_back(partial_row(c, {0}));
  return r;
}

/// index_add / index_copy (self, dim, index, source): out has self's shape.
RuleFn index_add_rule(bool linear) {
  return [linear](const OpContext& c) {
    if (c.n_in() < 3 || c.n_out() < 1) c.fail("index_add: expected self, index and source");
    const TensorMeta& self = c.in[0];
    const int32_t dim = c.dim_attr("dim", 0, self.rank());
    RuleResult r;
    r.rows.push_back(c.replicated());
    for (int32_t d = 0; d < self.rank(); ++d) {
      if (d == dim || !same_size_on({&self, &c.in[2]}, d)) continue;
      Row row = c.replicated();
      row[c.out_slot(0)] = shard_if(c.out(0), d);
      row[c.in_slot(0)] = shard_if(self, d);
      row[c.in_slot(2)] = shard_if(c.in[2], d);
      if (row[c.in_slot(0)].is_shard()) r.rows.push_back(row);
    }
    if (linear) {
      r.rows.push_back(partial_row(c, {0, 2}));
    }
    return r;
  };
}

/// Which dims of self are indexed by index(self, indices) (positions of the non-None
/// indices), and how many index tensors there are.
struct Indexing {
  std::vector<int32_t> dims;  ///< indexed dims of self, ascending
  int64_t index_rank = 0;     ///< rank of the broadcast index shape
  bool front = false;         ///< non-adjacent indexed dims: the index dims go first
  bool mask = false;          ///< a boolean mask: data-dependent positions, replicated only
  /// Output dim of self's non-indexed dim d.
  int32_t out_dim(int32_t d) const {
    int32_t before = 0;
    for (int32_t x : dims) before += x < d;
    if (front) return static_cast<int32_t>(index_rank) + d - before;
    if (before == 0) return d;
    return static_cast<int32_t>(d - before + index_rank);
  }
  bool indexed(int32_t d) const { return std::find(dims.begin(), dims.end(), d) != dims.end(); }
};

Indexing indexing(const OpContext& c, size_t n_indices) {
  Indexing ix;
  std::vector<int64_t> pos = c.node.attr_ints("indices_positions");
  if (pos.empty()) {
    pos.resize(n_indices);
    std::iota(pos.begin(), pos.end(), 0);
  }
  if (pos.size() != n_indices) c.fail("index: indices_positions disagrees with the index tensors");
  for (size_t k = 0; k < n_indices; ++k) {
    if (c.in[1 + k].dtype == DType::kBool) ix.mask = true;
    ix.dims.push_back(c.norm_dim(pos[k], c.in[0].rank()));
    ix.index_rank = std::max(ix.index_rank, c.in[1 + k].rank());
  }
  for (size_t k = 1; k < ix.dims.size(); ++k)
    if (ix.dims[k] != ix.dims[k - 1] + 1) ix.front = true;
  return ix;
}

/// index.Tensor / _unsafe_index: inputs self, then the non-None indices.
RuleResult index_rule(const OpContext& c) {
  if (c.n_in() < 2 || c.n_out() < 1) c.fail("index: expected self and indices");
  const size_t n_idx = c.n_in() - 1;
  Indexing ix = indexing(c, n_idx);
  const TensorMeta& self = c.in[0];
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (ix.mask) return r;
  for (int32_t d = 0; d < self.rank(); ++d) {
    if (ix.indexed(d)) continue;
    Row row = c.replicated();
    row[c.in_slot(0)] = shard_if(self, d);
    row[c.out_slot(0)] = shard_if(c.out(0), ix.out_dim(d));
    if (row[c.in_slot(0)].is_shard() && row[c.out_slot(0)].is_shard()) r.rows.push_back(row);
  }
  // Self replicated, the indices split on one of their (common) dims.
  const int32_t first_out = ix.front ? 0 : ix.dims.front();
  for (int32_t j = 0; j < ix.index_rank; ++j) {
    Row row = c.replicated();
    bool ok = true;
    for (size_t k = 0; k < n_idx; ++k) {
      const TensorMeta& m = c.in[1 + k];
      if (m.rank() != ix.index_rank) ok = false;  // broadcast indices: keep it simple
      else row[c.in_slot(1 + k)] = shard_if(m, j);
      ok = ok && row[c.in_slot(1 + k)].is_shard();
    }
    row[c.out_slot(0)] = shard_if(c.out(0), first_out + j);
    if (ok && row[c.out_slot(0)].is_shard()) r.rows.push_back(row);
  }
  r.rows.push_back(partial_row(c, {0}));
  return r;
}

/// index_put / _unsafe_index_put: inputs self, the non-None indices, values.
RuleResult index_put_rule(const OpContext& c) {
  if (c.n_in() < 3 || c.n_out() < 1) c.fail("index_put: expected self, indices and values");
  const size_t n_idx = static_cast<size_t>(c.node.attr_int("indices_count", static_cast<int64_t>(c.n_in() - 2)));
  if (n_idx + 2 != c.n_in()) c.fail("index_put: indices_count disagrees with the inputs");
  Indexing ix = indexing(c, n_idx);
  if (ix.mask) return RuleResult{{c.replicated()}, {}, {}, false};
  const TensorMeta& self = c.in[0];
  const TensorMeta& values = c.in[c.n_in() - 1];
  // values broadcast to the shape index(self, indices) would have.
  TensorMeta indexed;
  indexed.dtype = self.dtype;
  const int64_t out_rank = self.rank() - static_cast<int64_t>(ix.dims.size()) + ix.index_rank;
  indexed.shape.assign(static_cast<size_t>(out_rank), 2);
  for (int32_t d = 0; d < self.rank(); ++d)
    if (!ix.indexed(d)) indexed.shape[static_cast<size_t>(ix.out_dim(d))] = self.shape[static_cast<size_t>(d)];
  RuleResult r;
  r.rows.push_back(c.replicated());
  for (int32_t d = 0; d < self.rank(); ++d) {
    if (ix.indexed(d)) continue;
    Row row = c.replicated();
    row[c.in_slot(0)] = shard_if(self, d);
    row[c.out_slot(0)] = shard_if(c.out(0), d);
    row[c.in_slot(c.n_in() - 1)] =
        map_broadcast(Placement::shard(ix.out_dim(d)), indexed, values);
    if (row[c.in_slot(0)].is_shard()) r.rows.push_back(row);
  }
  r.rows.push_back(partial_row(c, {0, c.n_in() - 1}));
  return r;
}

/// Rows splitting every dim not in `whole` alike on all outputs and inputs of the same rank;
/// Partial passes when `linear`.
RuleResult keep_dims_whole(const OpContext& c, const std::vector<int32_t>& whole, bool linear) {
  RuleResult r;
  r.rows.push_back(c.replicated());
  const int64_t rank = c.in.at(0).rank();
  for (int32_t d = 0; d < rank; ++d) {
    if (std::find(whole.begin(), whole.end(), d) != whole.end()) continue;
    Row row = c.replicated();
    for (size_t i = 0; i < c.n_out(); ++i) row[c.out_slot(i)] = shard_if(c.out(i), d);
    for (size_t i = 0; i < c.n_in(); ++i)
      if (c.in[i].rank() == rank) row[c.in_slot(i)] = shard_if(c.in[i], d);
    if (row[c.in_slot(0)].is_shard()) r.rows.push_back(row);
  }
  if (linear) r.rows.push_back(all_partial(c));
  return r;
}

RuleResult constant_pad_rule(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("constant_pad_nd: expected an input");
  const int64_t rank = c.in[0].rank();
  std::vector<int64_t> pad = c.node.attr_ints("pad");
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size() / 2) > rank)
    c.fail("constant_pad_nd: pad must hold two entries per padded dim");
  std::vector<int32_t> whole;
  for (size_t k = 0; k < pad.size() / 2; ++k)
    if (pad[2 * k] != 0 || pad[2 * k + 1] != 0) whole.push_back(static_cast<int32_t>(rank - 1 - k));
  return keep_dims_whole(c, whole, c.node.attr_double("value", 0) == 0);
}

/// reflection_padNd / replication_padNd (+ backward): the last N dims are padded.
RuleFn edge_pad_rule(int32_t n) {
  return [n](const OpContext& c) {
    if (c.n_in() < 1) c.fail("pad: expected an input");
    const int64_t rank = c.in[0].rank();
    std::vector<int32_t> whole;
    for (int32_t k = 0; k < n && k < rank; ++k) whole.push_back(static_cast<int32_t>(rank - 1 - k));
    return keep_dims_whole(c, whole, true);  // a pad copies values: linear
  };
}

RuleResult roll_flip_rule(const OpContext& c) {
  if (c.n_in() < 1) c.fail("expected an input");
  const int64_t rank = c.in[0].rank();
  std::vector<int32_t> whole;
  std::vector<int64_t> dims = c.node.attr_ints("dims");
  if (dims.empty()) {  // roll without dims: of the flattened tensor
    for (int32_t d = 0; d < rank; ++d) whole.push_back(d);
  }
  for (int64_t d : dims) whole.push_back(c.norm_dim(d, rank));
  return keep_dims_whole(c, whole, true);
}

RuleResult as_strided_rule(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("as_strided: expected an input");
  const TensorMeta& in = c.in[0];
  std::vector<int64_t> size = c.node.attr_ints("size");
  std::vector<int64_t> stride = c.node.attr_ints("stride");
  std::vector<int64_t> contiguous(in.shape.size());
  int64_t s = 1;
  for (size_t k = in.shape.size(); k-- > 0;) {
    contiguous[k] = s;
    s *= in.shape[k];
  }
  const bool identity = size == in.shape && c.node.attr_int("storage_offset", 0) == 0 &&
                        (stride == contiguous || in.numel() <= 1);
  if (!identity) {
    RuleResult r;
    r.rows.push_back(c.replicated());
    return r;
  }
  return keep_dims_whole(c, {}, true);
}

RuleResult new_factory_rule(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("new_*: expected a template tensor");
  RuleResult r;
  std::vector<Placement> outs{R}, ins{R, P};
  for (int32_t d = 0; d < c.out(0).rank(); ++d) outs.push_back(Placement::shard(d));
  for (int32_t d = 0; d < c.in[0].rank(); ++d) ins.push_back(Placement::shard(d));
  for (const Placement& o : outs)
    for (const Placement& i : ins) {
      Row row = c.replicated();
      row[c.out_slot(0)] = o;
      row[c.in_slot(0)] = i;
      r.rows.push_back(row);
    }
  return r;
}

RuleResult histc_rule(const OpContext& c) {
  if (c.n_in() < 1 || c.n_out() < 1) c.fail("histc: expected an input");
  RuleResult r;
  r.rows.push_back(c.replicated());
  if (!(c.node.attr_double("min", 0) < c.node.attr_double("max", 0))) return r;
  for (int32_t d = 0; d < c.in[0].rank(); ++d) {
    Row row = c.replicated();
    row[c.out_slot(0)] = P;
    row[c.in_slot(0)] = Placement::shard(d);
    r.rows.push_back(row);
  }
  return r;
}

/// nonzero / argwhere / masked_select: the output's size is a value of the data (the tracer
/// records its upper bound, docs/tracer.md "Data-dependent code"); a shard of it would hold
/// some other rank's count of elements, so only all-R (as a boolean-mask index above).  The
/// runtime runs these inside an eager island, replicated.
RuleResult data_dependent_rule(const OpContext& c) {
  if (c.n_out() < 1) c.fail("expected an output");
  return RuleResult{{c.replicated()}, {}, {}, false};
}

}  // namespace

void register_index_rules(RuleTable& t) {
  for (const char* op : {"nonzero", "argwhere", "masked_select"}) t[op] = data_dependent_rule;
  t["gather"] = gather_rule;
  t["scatter"] = scatter_rule(false);
  t["scatter_add"] = scatter_rule(true);
  t["scatter_reduce"] = scatter_rule(false);
  t["index_select"] = index_select_rule;
  t["index_add"] = index_add_rule(true);
  t["index_copy"] = index_add_rule(false);
  t["index"] = index_rule;
  t["_unsafe_index"] = index_rule;
  t["index_put"] = index_put_rule;
  t["_unsafe_index_put"] = index_put_rule;
  t["_index_put_impl"] = index_put_rule;
  t["constant_pad_nd"] = constant_pad_rule;
  for (int n = 1; n <= 3; ++n)
    for (const char* kind : {"reflection_pad", "replication_pad"}) {
      t[std::string(kind) + std::to_string(n) + "d"] = edge_pad_rule(n);
      t[std::string(kind) + std::to_string(n) + "d_backward"] = edge_pad_rule(n);
    }
  t["roll"] = roll_flip_rule;
  t["flip"] = roll_flip_rule;
  t["as_strided"] = as_strided_rule;
  for (const char* op : {"new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full"})
    t[op] = new_factory_rule;
  t["histc"] = histc_rule;
}

}  // namespace autoshard

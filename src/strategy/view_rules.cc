/// View-like ops (sharding-rules.md, "Views", "cat / split").  Every rule here is "one output
/// strategy per input strategy": per mesh dim the rows are [R | R], [P(sum) | P(sum)] (Partial
/// passes through) and, for each input dim whose shard survives, [S(out dim) | S(in dim)].  An
/// input dim whose shard cannot survive has no row: the input must be replicated on that mesh
/// dim first (the [R | R] row).
///
/// Reshapes (view, reshape, _unsafe_view, _reshape_alias, flatten, unflatten, squeeze,
/// unsqueeze, view_as) are mapped from the input and output shapes: dims are grouped into
/// runs with equal products; a 1:1 group maps directly; in a flatten/split group only the
/// leftmost (non-1) input dim may stay sharded, landing on the first (non-1) output dim, and
/// only when both sizes divide evenly by its number of shards (so the chunks coincide).
/// Nested cuts (DTensor 2.13 runs the flatten, as S(d) then _StridedShard(d, sf=1), but not the
/// split; the step runner runs both on the local shards, autoshard/apply.py): in a group of
/// several input dims flattened into one (or one split into several), mesh dims may cut later
/// dims of the group too, when in mesh order they cut the group's dims left to right and every
/// dim they leave for a later one is cut to size 1 -- then each cut, outer to inner, halves
/// (thirds, ...) one contiguous block of the group's row-major positions on both sides, so the
/// pieces coincide.  [b, s, h] with b / dp = 1 cut S(0) over dp and S(1) over cp flattens to
/// [b * s, h] cut S(0)S(0): the tokens of a context-parallel linear layer.  Only the mesh dims
/// of StrategyOptions::nested_view_dims may cut a later dim so.
/// transpose/t/permute permute dims; expand/repeat cannot shard broadcast or repeated dims;
/// slice/split/cat/select/unbind never shard the dim they cut or join (a slice covering the
/// whole dim is a plain view).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "strategy/rule.h"

namespace autoshard {

namespace {

/// Input dim -> output dim a shard survives to (-1: cannot survive), plus the (in, out) dim
/// pairs whose shards must be even.
struct DimMap {
  std::vector<int32_t> to_out;
  std::vector<std::pair<int32_t, int32_t>> even;
  /// Flatten groups (several input dims -> one output dim) and split groups (one -> several):
  /// the non-1 dims of each side, left to right; nested rows and checks (file comment).
  struct Group {
    std::vector<int32_t> in, out;
  };
  std::vector<Group> nested;
};

DimMap identity(int64_t rank) {
  DimMap m;
  m.to_out.resize(static_cast<size_t>(rank));
  std::iota(m.to_out.begin(), m.to_out.end(), 0);
  return m;
}

DimMap reshape_map(const OpContext& c, const TensorMeta& in, const TensorMeta& out) {
  DimMap m;
  m.to_out.assign(static_cast<size_t>(in.rank()), -1);
  if (in.numel() != out.numel()) c.fail(fmt::format("reshape changes numel"));
  if (in.numel() == 0) return m;
  const auto& a = in.shape;
  const auto& b = out.shape;
  size_t i = 0, o = 0;
  while (i < a.size() && o < b.size()) {
    if (a[i] == 1) { ++i; continue; }
    if (b[o] == 1) { ++o; continue; }
    size_t i0 = i, o0 = o;
    int64_t pa = a[i++], pb = b[o++];
    while (pa != pb) {
      if (pa < pb) {
        if (i >= a.size()) c.fail("reshape shapes do not match");
        pa *= a[i++];
      } else {
        if (o >= b.size()) c.fail("reshape shapes do not match");
        pb *= b[o++];
      }
    }
    m.to_out[i0] = static_cast<int32_t>(o0);
    if (i - i0 == 1 && o - o0 == 1) continue;
    DimMap::Group grp;
    for (size_t k = i0; k < i; ++k)
      if (a[k] != 1) grp.in.push_back(static_cast<int32_t>(k));
    for (size_t k = o0; k < o; ++k)
      if (b[k] != 1) grp.out.push_back(static_cast<int32_t>(k));
    if (grp.in.size() == 1 || grp.out.size() == 1) m.nested.push_back(std::move(grp));
    else m.even.emplace_back(static_cast<int32_t>(i0), static_cast<int32_t>(o0));
  }
  return m;
}

/// Dims of a tensor that lose dim `gone` (select, unbind): later dims shift down.
DimMap drop_dim(int64_t rank, int32_t gone) {
  DimMap m = identity(rank);
  for (int32_t d = 0; d < rank; ++d)
    m.to_out[static_cast<size_t>(d)] = d < gone ? d : d == gone ? -1 : d - 1;
  return m;
}

/// Dims of a tensor gaining dim `added` (stack, select_backward).
DimMap insert_dim(int64_t rank, int32_t added) {
  DimMap m = identity(rank);
  for (int32_t d = 0; d < rank; ++d) m.to_out[static_cast<size_t>(d)] = d < added ? d : d + 1;
  return m;
}

/// Right-aligned broadcast (expand, repeat): a dim survives when its size is unchanged.
DimMap broadcast_map(const TensorMeta& in, const TensorMeta& out) {
  DimMap m;
  const int64_t shift = out.rank() - in.rank();
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t od = d + shift;
    bool same = od >= 0 && od < out.rank() && in.shape[static_cast<size_t>(d)] == out.shape[static_cast<size_t>(od)];
    m.to_out.push_back(same ? static_cast<int32_t>(od) : -1);
  }
  return m;
}

/// The map of a single-tensor view op (input 0 -> every output).
DimMap view_map(const OpContext& c) {
  const TensorMeta& in = c.in.at(0);
  const TensorMeta& out = c.out(0);
  const int64_t rank = in.rank();
  const std::string& b = c.op.base;
  if (b == "transpose" || b == "swapaxes" || b == "t") {
    DimMap m = identity(rank);
    if (rank < 2) return m;
    int32_t d0 = b == "t" ? 0 : c.dim_attr("dim0", 0, rank);
    int32_t d1 = b == "t" ? 1 : c.dim_attr("dim1", 1, rank);
    std::swap(m.to_out[static_cast<size_t>(d0)], m.to_out[static_cast<size_t>(d1)]);
    return m;
  }
  if (b == "permute") {
    std::vector<int64_t> dims = c.node.attr_ints("dims");
    if (static_cast<int64_t>(dims.size()) != rank) c.fail("permute 'dims' must list every dim");
    DimMap m = identity(rank);
    for (size_t j = 0; j < dims.size(); ++j)
      m.to_out[static_cast<size_t>(c.norm_dim(dims[j], rank))] = static_cast<int32_t>(j);
    return m;
  }
  if (b == "expand" || b == "repeat" || b == "expand_as") return broadcast_map(in, out);
  if (b == "slice") {
    DimMap m = identity(rank);
    int32_t d = c.dim_attr("dim", 0, rank);
    if (rank > 0 && out.shape[static_cast<size_t>(d)] != in.shape[static_cast<size_t>(d)])
      m.to_out[static_cast<size_t>(d)] = -1;
    return m;
  }
  if (b == "select" || b == "unbind") return drop_dim(rank, c.dim_attr("dim", 0, rank));
  // The unsafe_ variants (what nn.LSTM's and GRU's decompositions emit) differ only in not
  // tracking views: the same pieces, the same layouts.
  if (b == "split" || b == "split_with_sizes" || b == "chunk" || b == "tensor_split" ||
      b == "unsafe_split" || b == "unsafe_split_with_sizes" || b == "unsafe_chunk") {
    DimMap m = identity(rank);
    int32_t d = c.dim_attr("dim", 0, rank);
    if (c.n_out() > 1) m.to_out[static_cast<size_t>(d)] = -1;
    return m;
  }
  if (b == "slice_backward") {
    DimMap m = identity(rank);
    int32_t d = c.dim_attr("dim", 0, rank);
    if (rank > 0 && out.shape[static_cast<size_t>(d)] != in.shape[static_cast<size_t>(d)])
      m.to_out[static_cast<size_t>(d)] = -1;
    return m;
  }
  if (b == "select_backward") return insert_dim(rank, c.dim_attr("dim", 0, out.rank()));
  if (b == "alias" || b == "detach" || b == "lift_fresh" || b == "view_copy_identity")
    return identity(rank);
  return reshape_map(c, in, out);  // view, reshape, flatten, squeeze, unsqueeze, ...
}

/// Whether the mesh dims that cut `dims` (of sizes `shape`, shards read from `p`, one
/// placement per mesh dim) cut them as one contiguous nest of the group's row-major positions:
/// in mesh order left to right over `dims`, each dim left for a later one cut to size 1, the
/// last one cut evenly; a later dim cut only by mesh dims in `nested`.
bool nests(const std::vector<Placement>& p, const std::vector<int32_t>& dims, const std::vector<int64_t>& shape,
           const Mesh& mesh, const std::vector<MeshDimIdx>& nested) {
  size_t at = 0;      // position in `dims` of the dim being cut
  int64_t cuts = 1;   // its shards so far
  for (size_t md = 0; md < p.size(); ++md) {
    if (!p[md].is_shard()) continue;
    auto it = std::find(dims.begin(), dims.end(), p[md].dim);
    if (it == dims.end()) continue;
    const size_t pos = static_cast<size_t>(it - dims.begin());
    if (pos < at) return false;
    if (pos > 0 && std::find(nested.begin(), nested.end(), static_cast<MeshDimIdx>(md)) == nested.end())
      return false;
    if (pos > at) {
      // the dim left must be cut to size 1, and no uncut dim may lie between
      if (pos != at + 1 || cuts != shape[static_cast<size_t>(dims[at])]) return false;
      at = pos;
      cuts = 1;
    }
    cuts *= mesh.size(static_cast<int32_t>(md));
  }
  return shape[static_cast<size_t>(dims[at])] % cuts == 0;
}

RuleResult view_rule(const OpContext& c) {
  if (c.n_in() != 1 || c.n_out() < 1) c.fail("view ops take one tensor");
  DimMap m = view_map(c);
  RuleResult r;
  r.rows.push_back(c.replicated());
  r.rows.push_back(Row(c.n_out() + 1, Placement::partial(ReduceOp::kSum)));
  auto add = [&](int32_t out_dim, int32_t in_dim) {
    Row row(c.n_out() + 1, Placement::shard(out_dim));
    row[c.in_slot(0)] = Placement::shard(in_dim);
    r.rows.push_back(std::move(row));
  };
  for (size_t d = 0; d < m.to_out.size(); ++d)
    if (m.to_out[d] >= 0) add(m.to_out[d], static_cast<int32_t>(d));
  const std::vector<MeshDimIdx>& may_nest = c.opt.nested_view_dims;
  if (!may_nest.empty()) {
    for (const DimMap::Group& grp : m.nested) {
      for (size_t k = 1; k < grp.in.size(); ++k) add(grp.out[0], grp.in[k]);  // later dims of a flatten
      for (size_t k = 1; k < grp.out.size(); ++k) add(grp.out[k], grp.in[0]);  // of a split
    }
  }
  if (m.even.empty() && m.nested.empty()) return r;
  const Mesh* mesh = &c.mesh;
  std::vector<int64_t> a = c.in[0].shape, b = c.out(0).shape;
  const size_t slot = c.in_slot(0);
  r.accept = [mesh, a, b, even = m.even, nested = m.nested, slot, may_nest](const Combo& combo) {
    for (auto [i, o] : even) {
      int64_t n = shards_of(combo[slot], i, *mesh);
      if (n > 1 && (a[static_cast<size_t>(i)] % n != 0 || b[static_cast<size_t>(o)] % n != 0)) return false;
    }
    for (const DimMap::Group& grp : nested)
      if (!nests(combo[slot], grp.in, a, *mesh, may_nest) || !nests(combo[0], grp.out, b, *mesh, may_nest))
        return false;
    return true;
  };
  return r;
}

/// cat / stack: every input maps to the output; the joined dim stays whole (cat) or is new
/// (stack).  Legacy empty inputs (shape [0]) stay replicated.
RuleResult join_rule(const OpContext& c, bool stack) {
  if (c.n_out() != 1 || c.n_in() < 1) c.fail("expected inputs and one output");
  const TensorMeta& out = c.out(0);
  int32_t dim = c.dim_attr("dim", 0, out.rank());
  RuleResult r;
  r.rows.push_back(c.replicated());
  r.rows.push_back(Row(1 + c.n_in(), Placement::partial(ReduceOp::kSum)));
  for (int32_t od = 0; od < out.rank(); ++od) {
    if (od == dim) continue;
    int32_t id = stack && od > dim ? od - 1 : od;
    Row row = c.replicated();
    row[0] = Placement::shard(od);
    for (size_t i = 0; i < c.n_in(); ++i) {
      bool legacy_empty = c.in[i].rank() == 1 && c.in[i].shape[0] == 0 && out.rank() > 1;
      row[c.in_slot(i)] = legacy_empty ? Placement::replicate() : Placement::shard(id);
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

}  // namespace

void register_view_rules(RuleTable& t) {
  for (const char* op :
       {"view", "reshape", "_unsafe_view", "_reshape_alias", "view_copy", "flatten",
        "unflatten", "squeeze", "unsqueeze", "transpose", "swapaxes", "t", "permute",
        "expand", "repeat", "slice", "select", "alias", "detach", "lift_fresh",
        "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "slice_backward",
        "select_backward", "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk"})
    t[op] = view_rule;
  t["cat"] = [](const OpContext& c) { return join_rule(c, false); };
  t["stack"] = [](const OpContext& c) { return join_rule(c, true); };
}

}  // namespace autoshard

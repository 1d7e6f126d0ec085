#pragma once
/// DTensor placements: per mesh dim, Shard(d), _StridedShard(d, sf), Replicate() or Partial(op),
/// with DTensor's semantics and short strings ("S(0)", "_S(0,8)", "R", "P(sum)"); a ShardingSpec
/// is one placement per mesh dim plus the global tensor meta.
///
/// Shard order.  When several mesh dims shard one tensor dim, the order of the cuts matters:
/// by default (DTensor's left-to-right order) the lower mesh dim cuts first (outermost), each
/// later one cuts every piece again.  A strided shard `_S(d,sf)` on mesh dim m says that mesh
/// dims AFTER m that cut d first (outer to m) have sf shards in all, as torch 2.13's
/// `_StridedShard(dim, split_factor)` does (placement_types.py) and as
/// `DTensorSpec._convert_shard_order_to_StridedShard` encodes a `shard_order`: the split factor
/// of mesh dim m is the product of the sizes of the mesh dims that come before m in the order
/// and after m in the mesh.  FSDP2 over TP on a (dp, tp) mesh: `_S(0,tp)S(0)`, tp cuts first.
/// Data layout: every tensor dim is cut with torch.chunk, one mesh dim at a time in shard order
/// (the layout `shard_order` describes; DTensor's own _StridedShard._split_tensor agrees when
/// the splits are even).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"

namespace autoshard {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
std::string_view reduce_op_name(ReduceOp op);

struct Placement {
  enum class Kind : uint8_t { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int32_t dim = 0;                 ///< tensor dim, for kShard
  ReduceOp reduce = ReduceOp::kSum;  ///< for kPartial
  /// For kShard: 1 for a plain Shard, > 1 for a _StridedShard (see the file comment).
  int64_t split_factor = 1;

  static Placement replicate() { return {}; }
  static Placement shard(int32_t d) { return {Kind::kShard, d, ReduceOp::kSum, 1}; }
  /// _StridedShard(d, sf); sf == 1 is a plain Shard(d).
  static Placement strided_shard(int32_t d, int64_t sf) {
    return {Kind::kShard, d, ReduceOp::kSum, sf};
  }
  static Placement partial(ReduceOp op = ReduceOp::kSum) { return {Kind::kPartial, 0, op, 1}; }

  bool is_replicate() const { return kind == Kind::kReplicate; }
  /// Shard or strided shard ("shard-like" in DTensor's words).
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_shard(int32_t d) const { return kind == Kind::kShard && dim == d; }
  bool is_strided() const { return kind == Kind::kShard && split_factor > 1; }
  bool is_partial() const { return kind == Kind::kPartial; }

  /// "R", "S(1)", "_S(0,8)", "P(sum)".
  std::string to_string() const;
  bool operator==(const Placement& o) const {
    if (kind != o.kind) return false;
    if (kind == Kind::kShard) return dim == o.dim && split_factor == o.split_factor;
    if (kind == Kind::kPartial) return reduce == o.reduce;
    return true;
  }
};

/// Parses a concatenation of placements, one per mesh dim: "S(0)R", "P(sum)S(1)", "RR",
/// "_S(0,8)S(0)", also accepting "P" (older DTensor, = P(sum)), "Shard(0)", "Replicate()",
/// "Partial(sum)", DTensor's "_S(0, 8)" and "_StridedShard(dim=0, sf=8)" (or split_factor=8;
/// a split factor of 1 is a plain Shard) and separators ", " between items, optionally enclosed
/// in one pair of [] or ().  Throws std::invalid_argument naming the offending 0-based position.
std::vector<Placement> parse_placements(std::string_view s);
std::string placements_to_string(const std::vector<Placement>& p);

/// The mesh dims that shard each tensor dim, outermost cut first (DTensor's ShardOrderEntry).
struct ShardOrderEntry {
  int32_t tensor_dim = 0;
  std::vector<int32_t> mesh_dims;
  bool operator==(const ShardOrderEntry&) const = default;
};
/// One entry per sharded tensor dim, sorted by tensor dim (DTensor's ShardOrder).
using ShardOrder = std::vector<ShardOrderEntry>;

/// Decodes the shard order the placements' split factors encode, as torch 2.13's
/// DTensorSpec._maybe_convert_StridedShard_to_shard_order does (mesh dims right to left, each
/// inserted where the sizes of the mesh dims before it multiply to its split factor); nullopt
/// when some split factor fits no position (e.g. _S(0,2) on a 1-D mesh: a strided shard of a
/// view, not an order).  Placements without strided shards give the default order.
std::optional<ShardOrder> decode_shard_order(const std::vector<Placement>& p, const Mesh& mesh);
/// Heap-free core of decode_shard_order: for each mesh dim m of `p` (nd of them, sizes
/// `sizes`) that shards a tensor dim, pos[m] = its 0-based position in that tensor dim's order
/// (0 = outermost); -1 for other mesh dims.  False when some split factor fits no position.
bool decode_shard_positions(const Placement* p, int32_t nd, const int64_t* sizes, int32_t* pos);
/// The placements that encode `order` (DTensor's _convert_shard_order_to_StridedShard): shard
/// placements of `p` get the split factor of their position.  Throws std::invalid_argument when
/// `order` does not list exactly the mesh dims that shard each tensor dim.
std::vector<Placement> encode_shard_order(std::vector<Placement> p, const ShardOrder& order,
                                          const Mesh& mesh);
/// "S(0)[1]S(0)[0]" style (DTensor's format_shard_order_str) for messages.
std::string shard_order_to_string(const ShardOrder& order);

/// Placements of one tensor over a mesh plus its global meta.
struct ShardingSpec {
  std::vector<Placement> placements;  ///< one per mesh dim
  TensorMeta meta;

  int32_t ndim_mesh() const { return static_cast<int32_t>(placements.size()); }
  /// Number of shards along each tensor dim (product of sizes of mesh dims sharding it).
  std::vector<int64_t> shards_per_dim(const Mesh& mesh) const;
  /// Total number of distinct shards (product over mesh dims that shard some tensor dim).
  int64_t num_shards(const Mesh& mesh) const;
  /// Shape of the largest local shard (ceil split, like torch.chunk).  The same in every shard
  /// order: the first piece of each cut is the largest and ceil(ceil(n/a)/b) = ceil(n/(ab)).
  std::vector<int64_t> local_shape(const Mesh& mesh) const;
  /// Bytes of the largest local shard.
  int64_t local_bytes(const Mesh& mesh) const;
  bool is_replicated() const;
  bool has_partial() const;
  /// A spec is valid on a mesh when it has one placement per mesh dim, every shard dim exists
  /// in the tensor, the split factors decode to a shard order and no shard is empty under
  /// torch.chunk splitting in that order (5 in 4 gives 2,2,1,0: invalid although 5 >= 4); with
  /// `require_divisible`, every sharded dim also splits evenly.
  bool valid(const Mesh& mesh, bool require_divisible = false) const;
  std::string to_string() const { return placements_to_string(placements); }
  bool operator==(const ShardingSpec& o) const {
    return placements == o.placements && meta == o.meta;
  }
};

/// Size of the shard at `index` of `size` elements split into `chunks` like torch.chunk: chunk
/// size ceil(size / chunks); the last non-empty shard may be short, trailing ones empty.
int64_t chunk_size(int64_t size, int64_t chunks, int64_t index);

}  // namespace autoshard

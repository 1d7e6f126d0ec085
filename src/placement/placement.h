#pragma once
/// DTensor placements: per mesh dim, Shard(d), Replicate() or Partial(op), with DTensor's
/// semantics and short strings ("S(0)", "R", "P(sum)"); a ShardingSpec is one placement per mesh
/// dim plus the global tensor meta.
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

  static Placement replicate() { return {}; }
  static Placement shard(int32_t d) { return {Kind::kShard, d, ReduceOp::kSum}; }
  static Placement partial(ReduceOp op = ReduceOp::kSum) { return {Kind::kPartial, 0, op}; }

  bool is_replicate() const { return kind == Kind::kReplicate; }
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_shard(int32_t d) const { return kind == Kind::kShard && dim == d; }
  bool is_partial() const { return kind == Kind::kPartial; }

  /// "R", "S(1)", "P(sum)".
  std::string to_string() const;
  bool operator==(const Placement& o) const {
    if (kind != o.kind) return false;
    if (kind == Kind::kShard) return dim == o.dim;
    if (kind == Kind::kPartial) return reduce == o.reduce;
    return true;
  }
};

/// Parses a concatenation of placements, one per mesh dim: "S(0)R", "P(sum)S(1)", "RR",
/// also accepting "P" (older DTensor, = P(sum)), "Shard(0)", "Replicate()", "Partial(sum)" and
/// separators ", " between items, optionally enclosed in one pair of [] or ().  Throws
/// std::invalid_argument naming the offending 0-based position.
std::vector<Placement> parse_placements(std::string_view s);
std::string placements_to_string(const std::vector<Placement>& p);

/// Placements of one tensor over a mesh plus its global meta.
struct ShardingSpec {
  std::vector<Placement> placements;  ///< one per mesh dim
  TensorMeta meta;

  int32_t ndim_mesh() const { return static_cast<int32_t>(placements.size()); }
  /// Number of shards along each tensor dim (product of sizes of mesh dims sharding it).
  std::vector<int64_t> shards_per_dim(const Mesh& mesh) const;
  /// Total number of distinct shards (product over mesh dims that shard some tensor dim).
  int64_t num_shards(const Mesh& mesh) const;
  /// Shape of the largest local shard (ceil split, like torch.chunk).  Sharding a dim several
  /// times splits it in mesh-dim order.
  std::vector<int64_t> local_shape(const Mesh& mesh) const;
  /// Bytes of the largest local shard.
  int64_t local_bytes(const Mesh& mesh) const;
  bool is_replicated() const;
  bool has_partial() const;
  /// A spec is valid on a mesh when it has one placement per mesh dim, every shard dim exists
  /// in the tensor and no shard is empty under torch.chunk splitting (5 in 4 gives 2,2,1,0:
  /// invalid although 5 >= 4); with `require_divisible`, every sharded dim also splits evenly.
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

#include "placement/placement.h"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace autoshard {
namespace {

using ::testing::HasSubstr;
using P = Placement;

Mesh mesh(std::vector<int64_t> shape) { return Mesh(std::move(shape), {}, *hardware_preset("h100")); }

std::string parse_error(std::string_view s) {
  try {
    parse_placements(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for '" << s << "'";
  return {};
}

TEST(Placement, ToString) {
  EXPECT_EQ(P::replicate().to_string(), "R");
  EXPECT_EQ(P::shard(1).to_string(), "S(1)");
  EXPECT_EQ(P::partial().to_string(), "P(sum)");
  EXPECT_EQ(P::partial(ReduceOp::kMax).to_string(), "P(max)");
  EXPECT_EQ(placements_to_string({P::shard(0), P::replicate()}), "S(0)R");
  EXPECT_EQ(P::strided_shard(0, 8).to_string(), "_S(0,8)");
  EXPECT_EQ(P::strided_shard(2, 1).to_string(), "S(2)");  // split factor 1: a plain shard
}

TEST(Placement, Equality) {
  EXPECT_EQ(P::shard(0), P::shard(0));
  EXPECT_NE(P::shard(0), P::shard(1));
  EXPECT_NE(P::shard(0), P::replicate());
  EXPECT_NE(P::partial(ReduceOp::kSum), P::partial(ReduceOp::kAvg));
  P r1 = P::replicate();
  r1.dim = 3;  // irrelevant fields do not matter
  EXPECT_EQ(r1, P::replicate());
  EXPECT_TRUE(P::shard(2).is_shard(2));
  EXPECT_FALSE(P::shard(2).is_shard(1));
  // A strided shard is shard-like but a different placement.
  EXPECT_NE(P::strided_shard(0, 2), P::shard(0));
  EXPECT_NE(P::strided_shard(0, 2), P::strided_shard(0, 4));
  EXPECT_EQ(P::strided_shard(0, 1), P::shard(0));
  EXPECT_TRUE(P::strided_shard(0, 2).is_shard(0));
  EXPECT_TRUE(P::strided_shard(0, 2).is_strided());
  EXPECT_FALSE(P::shard(0).is_strided());
}

TEST(ParsePlacements, RoundTrip) {
  for (const char* s : {"S(0)R", "P(sum)S(1)", "RR", "R", "S(0)S(0)", "P(avg)P(max)P(min)",
                        "S(12)R", "_S(0,8)S(0)", "R_S(1,2)S(1)", "_S(0,6)_S(0,2)S(0)"}) {
    auto p = parse_placements(s);
    EXPECT_EQ(placements_to_string(p), s);
  }
}

TEST(ParsePlacements, Spellings) {
  std::vector<P> sr{P::shard(0), P::replicate()};
  EXPECT_EQ(parse_placements("P"), (std::vector<P>{P::partial()}));
  EXPECT_EQ(parse_placements("PR"), (std::vector<P>{P::partial(), P::replicate()}));
  EXPECT_EQ(parse_placements("Shard(dim=0), Replicate()"), sr);
  EXPECT_EQ(parse_placements("Shard(0)Replicate()"), sr);
  EXPECT_EQ(parse_placements("S(0), R"), sr);
  EXPECT_EQ(parse_placements("[Shard(dim=0), Replicate()]"), sr);
  EXPECT_EQ(parse_placements("(Shard(dim=0), Replicate())"), sr);
  EXPECT_EQ(parse_placements("(S(0), R,)"), sr);
  EXPECT_EQ(parse_placements("  S( 0 ) R  "), sr);
  EXPECT_EQ(parse_placements("Shard(dim = 0)R"), sr);
  EXPECT_EQ(parse_placements("Partial(sum)"), (std::vector<P>{P::partial()}));
  EXPECT_EQ(parse_placements("Partial()"), (std::vector<P>{P::partial()}));
  EXPECT_EQ(parse_placements("Partial(reduce_op='avg')"),
            (std::vector<P>{P::partial(ReduceOp::kAvg)}));
  EXPECT_EQ(parse_placements("Partial(reduce_op=\"max\")"),
            (std::vector<P>{P::partial(ReduceOp::kMax)}));
  // DTensor's str and repr of _StridedShard, and the constructor's keyword.
  std::vector<P> fsdp_tp{P::strided_shard(0, 8), P::shard(0)};
  EXPECT_EQ(parse_placements("_S(0, 8)S(0)"), fsdp_tp);
  EXPECT_EQ(parse_placements("_StridedShard(dim=0, sf=8), Shard(dim=0)"), fsdp_tp);
  EXPECT_EQ(parse_placements("[_StridedShard(0, split_factor=8), Shard(0)]"), fsdp_tp);
  EXPECT_EQ(parse_placements("_S(0,1)R"), (std::vector<P>{P::shard(0), P::replicate()}));
}

TEST(ParsePlacements, ErrorsWithPosition) {
  EXPECT_THAT(parse_error(""), HasSubstr("no placements at position 0"));
  EXPECT_THAT(parse_error("[]"), HasSubstr("no placements"));
  EXPECT_THAT(parse_error("X"), HasSubstr("placement 'X': expected R, S(d), _S(d,sf) or P(op) at position 0"));
  EXPECT_THAT(parse_error("S(0)X"), HasSubstr("expected R, S(d), _S(d,sf) or P(op) at position 4"));
  EXPECT_THAT(parse_error("RS"), HasSubstr("Shard needs a dim in parentheses, e.g. S(0) at position 2"));
  EXPECT_THAT(parse_error("S()"), HasSubstr("Shard needs a dim, e.g. S(0) at position 1"));
  EXPECT_THAT(parse_error("S(-1)"), HasSubstr("Shard dim '-1' is not a non-negative integer at position 1"));
  EXPECT_THAT(parse_error("S(a)"), HasSubstr("at position 1"));
  EXPECT_THAT(parse_error("R_S(0)"), HasSubstr("_StridedShard needs (dim, split_factor), e.g. _S(0,8) at position 3"));
  EXPECT_THAT(parse_error("_S(0,x)"), HasSubstr("split factor 'x' is not a non-negative integer at position 2"));
  EXPECT_THAT(parse_error("_S(0,0)"), HasSubstr("split factor must be at least 1 at position 2"));
  EXPECT_THAT(parse_error("_S(,2)"), HasSubstr("Shard dim is missing at position 2"));
  EXPECT_THAT(parse_error("_StridedShard"), HasSubstr("at position 13"));
  EXPECT_THAT(parse_error("S(99999999999)"), HasSubstr("out of range"));
  EXPECT_THAT(parse_error("RS(0"), HasSubstr("missing ')' at position 3"));
  EXPECT_THAT(parse_error("P(prod)"), HasSubstr("unknown reduce op 'prod'"));
  EXPECT_THAT(parse_error("R(1)"), HasSubstr("Replicate takes no argument at position 1"));
  EXPECT_THAT(parse_error("[S(0), R"), HasSubstr("unclosed '[' at position 0"));
  EXPECT_THAT(parse_error("S(0))"), HasSubstr("at position 4"));
  EXPECT_THAT(parse_error("(S(0)]"), HasSubstr("at position 5"));
  EXPECT_THAT(parse_error("[R] R"), HasSubstr("unexpected trailing text at position 4"));
  EXPECT_THAT(parse_error("R,,R"), HasSubstr("at position 2"));
  EXPECT_THAT(parse_error(",R"), HasSubstr("at position 0"));
  // A huge string from a file is quoted as an excerpt (found by the placements fuzzer: a 6 KB
  // placement string made a 6 KB message).
  const std::string huge = "R" + std::string(5000, 'Y');
  const std::string e = parse_error(huge);
  EXPECT_LT(e.size(), 200u);
  EXPECT_THAT(e, HasSubstr("placement 'RYYY"));
  EXPECT_THAT(e, HasSubstr("...': expected R, S(d), _S(d,sf) or P(op) at position 1"));
  EXPECT_LT(parse_error("S(" + std::string(3000, '7') + ")").size(), 200u);
  EXPECT_LT(parse_error("P(" + std::string(3000, 'x') + ")").size(), 200u);
}

TEST(ChunkSize, LikeTorchChunk) {
  // 10 in 4 -> 3,3,3,1; 5 in 4 -> 2,2,1,0.
  EXPECT_EQ(chunk_size(10, 4, 0), 3);
  EXPECT_EQ(chunk_size(10, 4, 1), 3);
  EXPECT_EQ(chunk_size(10, 4, 2), 3);
  EXPECT_EQ(chunk_size(10, 4, 3), 1);
  EXPECT_EQ(chunk_size(5, 4, 0), 2);
  EXPECT_EQ(chunk_size(5, 4, 1), 2);
  EXPECT_EQ(chunk_size(5, 4, 2), 1);
  EXPECT_EQ(chunk_size(5, 4, 3), 0);
  EXPECT_EQ(chunk_size(8, 4, 3), 2);
  EXPECT_EQ(chunk_size(3, 8, 2), 1);
  EXPECT_EQ(chunk_size(3, 8, 3), 0);
  EXPECT_EQ(chunk_size(7, 1, 0), 7);
  EXPECT_EQ(chunk_size(0, 4, 0), 0);
  for (int64_t size : {0, 1, 5, 10, 17, 64})
    for (int64_t n : {1, 2, 3, 4, 8}) {
      int64_t sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += chunk_size(size, n, i);
      EXPECT_EQ(sum, size) << size << " in " << n;
    }
}

TEST(ShardingSpec, LocalShapeAndShards) {
  Mesh m = mesh({2, 4});
  ShardingSpec s{{P::shard(0), P::shard(1)}, {{10, 10}, DType::kBF16}};
  EXPECT_EQ(s.shards_per_dim(m), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(s.num_shards(m), 8);
  EXPECT_EQ(s.local_shape(m), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(s.local_bytes(m), 5 * 3 * 2);
  EXPECT_FALSE(s.is_replicated());
  EXPECT_FALSE(s.has_partial());
  EXPECT_EQ(s.to_string(), "S(0)S(1)");

  ShardingSpec r{{P::replicate(), P::partial()}, {{10, 10}, DType::kF32}};
  EXPECT_EQ(r.num_shards(m), 1);
  EXPECT_EQ(r.local_shape(m), (std::vector<int64_t>{10, 10}));
  EXPECT_TRUE(r.has_partial());
  EXPECT_FALSE(r.is_replicated());
  ShardingSpec rr{{P::replicate(), P::replicate()}, {{10, 10}, DType::kF32}};
  EXPECT_TRUE(rr.is_replicated());

  // One dim sharded on both mesh dims: split in mesh-dim order, 10 -> 5 -> 2.
  ShardingSpec ss{{P::shard(0), P::shard(0)}, {{10, 6}, DType::kF32}};
  EXPECT_EQ(ss.shards_per_dim(m), (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(ss.num_shards(m), 8);
  EXPECT_EQ(ss.local_shape(m), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(ss.local_bytes(m), 2 * 6 * 4);
}

TEST(ShardingSpec, Valid) {
  Mesh m = mesh({2, 4});
  auto spec = [](std::string_view p, std::vector<int64_t> shape) {
    return ShardingSpec{parse_placements(p), {std::move(shape), DType::kF32}};
  };
  EXPECT_TRUE(spec("S(0)S(1)", {8, 8}).valid(m));
  EXPECT_TRUE(spec("S(0)S(1)", {8, 8}).valid(m, /*require_divisible=*/true));
  EXPECT_TRUE(spec("RP(sum)", {3}).valid(m));
  EXPECT_TRUE(spec("RR", {}).valid(m));  // scalars can be replicated
  // Wrong number of placements for the mesh.
  EXPECT_FALSE(spec("S(0)", {8, 8}).valid(m));
  EXPECT_FALSE(spec("S(0)RR", {8, 8}).valid(m));
  // Shard dim outside the tensor.
  EXPECT_FALSE(spec("S(2)R", {8, 8}).valid(m));
  EXPECT_FALSE(spec("S(0)R", {}).valid(m));
  // Uneven but without empty shards: 10 in 4 -> 3,3,3,1.
  EXPECT_TRUE(spec("RS(0)", {10}).valid(m));
  EXPECT_FALSE(spec("RS(0)", {10}).valid(m, true));
  // 5 in 4 -> 2,2,1,0: an empty shard although 5 >= 4.
  EXPECT_FALSE(spec("RS(0)", {5}).valid(m));
  EXPECT_FALSE(spec("RS(0)", {3}).valid(m));
  EXPECT_TRUE(spec("RS(0)", {4}).valid(m, true));
  // One dim sharded on both mesh dims (8 shards).
  EXPECT_TRUE(spec("S(0)S(0)", {16}).valid(m, true));
  EXPECT_TRUE(spec("S(0)S(0)", {8}).valid(m, true));
  EXPECT_FALSE(spec("S(0)S(0)", {4}).valid(m));
  EXPECT_FALSE(spec("S(0)S(0)", {12}).valid(m, true));  // 12 % 8 != 0
  // 12 >= 8 shards, yet 12 -> 6,6 and 6 in 4 -> 2,2,2,0 leaves empty shards.
  EXPECT_FALSE(spec("S(0)S(0)", {12}).valid(m));
  // 14 -> 7,7 and 7 in 4 -> 2,2,2,1: uneven but no empty shard.
  EXPECT_TRUE(spec("S(0)S(0)", {14}).valid(m));
  EXPECT_FALSE(spec("S(0)S(0)", {14}).valid(m, true));
  // The split order matters.  On (4, 2): 11 -> 3,3,3,2, then 3 -> 2,1 and 2 -> 1,1: no empty
  // shard.  On (2, 4): 11 -> 6,5, then 5 in 4 -> 2,2,1,0: empty.
  Mesh m42 = mesh({4, 2});
  EXPECT_TRUE(spec("S(0)S(0)", {11}).valid(m42));
  EXPECT_FALSE(spec("S(0)S(0)", {11}).valid(m));
  EXPECT_EQ(spec("S(0)S(0)", {11}).local_shape(m42), (std::vector<int64_t>{2}));
  // The same order written as a strided shard on (2, 4): the size-4 mesh dim cuts first.
  EXPECT_TRUE(spec("_S(0,4)S(0)", {11}).valid(m));
  EXPECT_EQ(spec("_S(0,4)S(0)", {11}).local_shape(m), (std::vector<int64_t>{2}));
  EXPECT_EQ(spec("_S(0,4)S(0)", {11}).shards_per_dim(m), (std::vector<int64_t>{8}));
  EXPECT_EQ(spec("_S(0,4)S(0)", {11}).num_shards(m), 8);
  EXPECT_FALSE(spec("_S(0,4)S(0)", {12}).valid(m, true));
  EXPECT_TRUE(spec("_S(0,4)S(0)", {16}).valid(m, true));
  // 6 in 4 -> 2,2,2,0 first: empty, whereas the default order (6 -> 3,3 -> 1,1,1,0) is too.
  EXPECT_FALSE(spec("_S(0,4)S(0)", {6}).valid(m));
  // Split factors that fit no order (a strided shard of a view, not an order): invalid.
  EXPECT_FALSE(spec("_S(0,2)", {8}).valid(mesh({4})));
  EXPECT_FALSE(spec("_S(0,3)S(0)", {16}).valid(m));
  EXPECT_FALSE(spec("_S(0,4)S(1)", {16, 16}).valid(m));
}

TEST(ShardOrder, DecodesLikeTorch) {
  // torch's _maybe_convert_StridedShard_to_shard_order docstring: mesh (4, 3, 2),
  // (_S(0,2), _S(0,2), S(0)) is tensor dim 0 cut by mesh dims 2, 0, 1 in that order.
  Mesh m = mesh({4, 3, 2});
  auto order = decode_shard_order(parse_placements("_S(0,2)_S(0,2)S(0)"), m);
  ASSERT_TRUE(order.has_value());
  EXPECT_EQ(*order, (ShardOrder{{0, {2, 0, 1}}}));
  EXPECT_EQ(shard_order_to_string(*order), "(0: [2, 0, 1])");
  // Default order without strided shards; tensor dims sorted.
  EXPECT_EQ(*decode_shard_order(parse_placements("S(1)S(0)S(1)"), m),
            (ShardOrder{{0, {1}}, {1, {0, 2}}}));
  EXPECT_EQ(*decode_shard_order(parse_placements("RPR"), m), ShardOrder{});
  EXPECT_FALSE(decode_shard_order(parse_placements("_S(0,2)"), mesh({4})).has_value());
  EXPECT_FALSE(decode_shard_order(parse_placements("RR"), m).has_value());  // wrong length
}

TEST(ShardOrder, EncodeDecodeRoundTrip) {
  // Every order of three mesh dims cutting one tensor dim, and two tensor dims sharing a mesh.
  Mesh m = mesh({4, 3, 2});
  std::vector<int32_t> perm{0, 1, 2};
  int n = 0;
  do {
    const auto p = encode_shard_order(parse_placements("S(0)S(0)S(0)"), {{0, perm}}, m);
    EXPECT_EQ(*decode_shard_order(p, m), (ShardOrder{{0, perm}})) << placements_to_string(p);
    EXPECT_EQ(parse_placements(placements_to_string(p)), p);
    ++n;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(n, 6);
  EXPECT_EQ(placements_to_string(encode_shard_order(parse_placements("S(0)S(0)S(0)"),
                                                    {{0, {2, 0, 1}}}, m)),
            "_S(0,2)_S(0,2)S(0)");
  // FSDP2 over TP on (dp=8, tp=8): tp cuts first.
  Mesh dp_tp = mesh({8, 8});
  EXPECT_EQ(placements_to_string(encode_shard_order(parse_placements("S(0)S(0)"), {{0, {1, 0}}},
                                                    dp_tp)),
            "_S(0,8)S(0)");
  const auto two = encode_shard_order(parse_placements("S(1)S(0)S(1)"), {{0, {1}}, {1, {2, 0}}}, m);
  EXPECT_EQ(placements_to_string(two), "_S(1,2)S(0)S(1)");
  EXPECT_EQ(*decode_shard_order(two, m), (ShardOrder{{0, {1}}, {1, {2, 0}}}));
  // Orders that do not match the placements.
  EXPECT_THROW(encode_shard_order(parse_placements("S(0)S(0)R"), {{0, {0}}}, m),
               std::invalid_argument);
  EXPECT_THROW(encode_shard_order(parse_placements("S(0)RR"), {{0, {0, 1}}}, m),
               std::invalid_argument);
  EXPECT_THROW(encode_shard_order(parse_placements("S(0)RR"), {{1, {0}}}, m),
               std::invalid_argument);
}

}  // namespace
}  // namespace autoshard

// Indexing, scatter, pad, roll/flip, as_strided and new_* rules (index_rules.cc), checked
// against DTensor's semantics (sharding-rules.md) on a 1-D mesh of 4.
#include <gtest/gtest.h>

#include <algorithm>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;
using Ints = std::vector<int64_t>;

bool has(const V& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(IndexRules, GatherSplitsNonGatheredDimsOrTheIndex) {
  Graph g;
  auto self = input(g, {8, 16});
  auto idx = input(g, {8, 4}, DType::kI64);
  NodeIdx n = op(g, "gather", {self, idx}, {T({8, 4})}, {{"dim", int64_t{1}}});
  V s = names(g, n, mesh1());
  EXPECT_TRUE(has(s, "R <- R, R"));
  EXPECT_TRUE(has(s, "S(0) <- S(0), S(0)"));  // rows split alike
  EXPECT_TRUE(has(s, "S(1) <- R, S(1)"));     // self whole, positions split
  EXPECT_TRUE(has(s, "P(sum) <- P(sum), R"));  // linear in self
  EXPECT_FALSE(has(s, "S(1) <- S(1), S(1)"));  // never split the gathered dim of self
  EXPECT_FALSE(enumerate_strategies(g, n, mesh1()).fallback);
}

TEST(IndexRules, ScatterAddIsLinearScatterValueIsNot) {
  Graph g;
  auto self = input(g, {8, 16});
  auto idx = input(g, {8, 16}, DType::kI64);
  auto src = input(g, {8, 16});
  NodeIdx add = op(g, "scatter_add", {self, idx, src}, {T({8, 16})}, {{"dim", int64_t{1}}});
  V s = names(g, add, mesh1());
  EXPECT_EQ(s, (V{"R <- R, R, R", "S(0) <- S(0), S(0), S(0)", "P(sum) <- P(sum), R, P(sum)"}));
  NodeIdx val = op(g, "scatter.value", {self, idx}, {T({8, 16})},
                   {{"dim", int64_t{0}}, {"value", 1.0}});
  EXPECT_EQ(names(g, val, mesh1()), (V{"R <- R, R", "S(1) <- S(1), S(1)"}));
  NodeIdx red = op(g, "scatter_reduce.two", {self, idx, src}, {T({8, 16})},
                   {{"dim", int64_t{1}}, {"reduce", std::string("amax")}});
  EXPECT_FALSE(has(names(g, red, mesh1()), "P(sum) <- P(sum), R, P(sum)"));
}

TEST(IndexRules, IndexKeepsIndicesReplicatedOrSplitsThemWithSelfWhole) {
  // x[:, idx] with x [8, 16, 32] and idx [4, 8]: out [8, 4, 8, 32].
  Graph g;
  auto x = input(g, {8, 16, 32});
  auto idx = input(g, {4, 8}, DType::kI64);
  NodeIdx n = op(g, "index.Tensor", {x, idx}, {T({8, 4, 8, 32})},
                 {{"indices_count", int64_t{1}}, {"indices_positions", Ints{1}}});
  V s = names(g, n, mesh1());
  EXPECT_EQ(s, (V{"R <- R, R", "S(0) <- S(0), R", "S(3) <- S(2), R", "S(1) <- R, S(0)",
                  "S(2) <- R, S(1)", "P(sum) <- P(sum), R"}));
  // Boolean masks select a data-dependent set: only the replicated layout is known correct.
  Graph b;
  auto y = input(b, {8, 16});
  auto mask = input(b, {8, 16}, DType::kBool);
  NodeIdx m = op(b, "index.Tensor", {y, mask}, {T({40})}, {{"indices_count", int64_t{1}}});
  EXPECT_EQ(names(b, m, mesh1()), (V{"R <- R, R"}));
}

TEST(IndexRules, IndexPutSplitsNonIndexedDimsThroughValues) {
  // x[idx] = v with x [16, 8], idx [4], v [4, 8]: dim 1 may be split on x, out and v.
  Graph g;
  auto x = input(g, {16, 8});
  auto idx = input(g, {4}, DType::kI64);
  auto v = input(g, {4, 8});
  NodeIdx n = op(g, "index_put", {x, idx, v}, {T({16, 8})},
                 {{"indices_count", int64_t{1}}, {"accumulate", true}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R, R, R", "S(1) <- S(1), R, S(1)", "P(sum) <- P(sum), R, P(sum)"}));
}

TEST(IndexRules, PaddedRolledAndFlippedDimsStayWhole) {
  Graph g;
  auto x = input(g, {8, 16, 12});
  // F.pad(x, (1, 1)) pads the last dim only.
  NodeIdx pad = op(g, "constant_pad_nd", {x}, {T({8, 16, 14})},
                   {{"pad", Ints{1, 1}}, {"value", 0.0}});
  EXPECT_EQ(names(g, pad, mesh1()),
            (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)", "P(sum) <- P(sum)"}));
  NodeIdx pad1 = op(g, "constant_pad_nd", {x}, {T({8, 18, 12})},
                    {{"pad", Ints{0, 0, 1, 1}}, {"value", 1.0}});
  EXPECT_EQ(names(g, pad1, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(2) <- S(2)"}));
  NodeIdx roll = op(g, "roll", {x}, {T({8, 16, 12})}, {{"shifts", Ints{1}}, {"dims", Ints{1}}});
  EXPECT_EQ(names(g, roll, mesh1()),
            (V{"R <- R", "S(0) <- S(0)", "S(2) <- S(2)", "P(sum) <- P(sum)"}));
  NodeIdx flat = op(g, "roll", {x}, {T({8, 16, 12})}, {{"shifts", Ints{3}}});
  EXPECT_EQ(names(g, flat, mesh1()), (V{"R <- R", "P(sum) <- P(sum)"}));
  NodeIdx flip = op(g, "flip", {x}, {T({8, 16, 12})}, {{"dims", Ints{0, -1}}});
  EXPECT_EQ(names(g, flip, mesh1()), (V{"R <- R", "S(1) <- S(1)", "P(sum) <- P(sum)"}));
}

TEST(IndexRules, AsStridedFollowsOnlyTheIdentity) {
  Graph g;
  auto x = input(g, {8, 4});
  NodeIdx id = op(g, "as_strided", {x}, {T({8, 4})}, {{"size", Ints{8, 4}}, {"stride", Ints{4, 1}}});
  EXPECT_EQ(names(g, id, mesh1()), (V{"R <- R", "S(0) <- S(0)", "S(1) <- S(1)", "P(sum) <- P(sum)"}));
  NodeIdx win = op(g, "as_strided", {x}, {T({7, 8})}, {{"size", Ints{7, 8}}, {"stride", Ints{4, 1}}});
  auto ns = enumerate_strategies(g, win, mesh1());
  EXPECT_FALSE(ns.fallback);
  EXPECT_EQ(names(ns), (V{"R <- R"}));
}

TEST(IndexRules, NewFactoriesTakeAnyTemplateLayout) {
  Graph g;
  auto x = input(g, {8, 4});
  NodeIdx n = op(g, "new_zeros", {x}, {T({16})}, {{"size", Ints{16}}});
  V s = names(g, n, mesh1());
  EXPECT_EQ(s.size(), 8u);  // out R or S(0), template R, P, S(0) or S(1)
  EXPECT_TRUE(has(s, "S(0) <- S(1)"));
  EXPECT_TRUE(has(s, "R <- P(sum)"));
  for (const char* o : {"new_empty", "new_empty_strided", "new_ones", "new_full"})
    EXPECT_TRUE(has_rule(o)) << o;
}

TEST(IndexRules, TopkSafeSoftmaxHistcAndHardsigmoidBackward) {
  Graph g;
  auto x = input(g, {8, 16});
  NodeIdx tk = op(g, "topk", {x}, {T({8, 2}), T({8, 2}, DType::kI64)},
                  {{"k", int64_t{2}}, {"dim", int64_t{-1}}});
  EXPECT_EQ(names(g, tk, mesh1()), (V{"R, R <- R", "S(0), S(0) <- S(0)"}));
  NodeIdx sm = op(g, "_safe_softmax", {x}, {T({8, 16})}, {{"dim", int64_t{-1}}});
  EXPECT_EQ(names(g, sm, mesh1()), (V{"R <- R", "S(0) <- S(0)"}));
  NodeIdx h = op(g, "histc", {x}, {T({10})},
                 {{"bins", int64_t{10}}, {"min", 0.0}, {"max", 1.0}});
  EXPECT_EQ(names(g, h, mesh1()), (V{"R <- R", "P(sum) <- S(0)", "P(sum) <- S(1)"}));
  for (const char* o : {"hardsigmoid_backward", "index.Tensor", "index_put", "scatter.src",
                        "roll", "constant_pad_nd", "as_strided", "topk", "index_select",
                        "reflection_pad2d", "replication_pad2d_backward"})
    EXPECT_TRUE(has_rule(o)) << o;
}

TEST(IndexRules, DataDependentSizesStayReplicated) {
  Graph g;  // the tracer's upper bounds: every element of the mask kept
  auto mask = input(g, {8, 4}, DType::kBool);
  auto x = input(g, {8, 4});
  NodeIdx nz = op(g, "nonzero", {mask}, {T({32, 2}, DType::kI64)});
  EXPECT_EQ(names(g, nz, mesh1(2)), (V{"R <- R"}));
  NodeIdx ms = op(g, "masked_select", {x, mask}, {T({32})});
  EXPECT_EQ(names(g, ms, mesh1(2)), (V{"R <- R, R"}));
  NodeIdx aw = op(g, "argwhere", {mask}, {T({32, 2}, DType::kI64)});
  EXPECT_EQ(names(g, aw, mesh1(2)), (V{"R <- R"}));
}

}  // namespace
}  // namespace autoshard

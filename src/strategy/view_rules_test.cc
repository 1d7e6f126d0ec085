#include <algorithm>
#include <gtest/gtest.h>

#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;
using V = std::vector<std::string>;
using Ints = std::vector<int64_t>;

TEST(View, FlattenKeepsLeftmostShard) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx n = g.add_op("v", "view", {a}, T({32, 16}), Phase::kForward, {{"size", Ints{-1, 16}}});
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(1) <- S(2)"}));
}

TEST(View, FlattenNeedsEvenSplit) {
  Graph g;
  auto a = input(g, {6, 8});
  NodeIdx n = g.add_op("v", "reshape", {a}, T({48}));
  EXPECT_EQ(names(g, n, mesh1()), (V{"R <- R", "P(sum) <- P(sum)"}));
  EXPECT_EQ(names(g, n, mesh1(2)), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)"}));
}

TEST(View, SplitKeepsFirstPiece) {
  Graph g;
  auto a = input(g, {32, 16});
  NodeIdx n = g.add_op("v", "_unsafe_view", {a}, T({4, 8, 16}));
  EXPECT_EQ(names(g, n, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(2) <- S(1)"}));
  Graph g2;
  auto b = input(g2, {8, 16});
  NodeIdx m = g2.add_op("v", "view", {b}, T({2, 4, 16}));  // first piece 2 < 4 shards
  EXPECT_EQ(names(g2, m, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(2) <- S(1)"}));
}

TEST(View, FlattenOnTwoDimMesh) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx n = g.add_op("v", "flatten.using_ints", {a}, T({32, 16}), Phase::kForward,
                       {{"start_dim", int64_t{0}}, {"end_dim", int64_t{1}}});
  V got = names(g, n, mesh2());
  EXPECT_EQ(got.size(), 16u);
  EXPECT_EQ(got[10], "S(0)S(0) <- S(0)S(0)");
  Graph g2;
  auto b = input(g2, {2, 8, 16});
  NodeIdx m = g2.add_op("v", "view", {b}, T({16, 16}));
  V got2 = names(g2, m, mesh2());
  EXPECT_EQ(got2.size(), 15u);  // S(0)S(0) needs 4 rows of dim 0, which has 2
  StrategyOptions nest;
  nest.nested_view_dims = {1};
  V got3 = names(g2, m, mesh2(), nest);
  EXPECT_EQ(got3.size(), 16u);  // ... or tp nested in dp
  EXPECT_EQ(std::count(got3.begin(), got3.end(), "S(0)S(0) <- S(0)S(0)"), 0);
  EXPECT_EQ(std::count(got3.begin(), got3.end(), "S(0)S(0) <- S(0)S(1)"), 1);
}

// One sequence per dp rank, its tokens cut over cp: the flatten of a context-parallel linear
// layer keeps both cuts, and its split back restores them (view_rules.cc, "Nested cuts").
TEST(View, NestedFlattenAndSplitKeepBothCuts) {
  const Mesh dp_cp({2, 4}, {"dp", "cp"}, *hardware_preset("h100"));
  StrategyOptions o;
  o.nested_view_dims = {1};
  auto names = [&](const Graph& gr, NodeIdx n, const Mesh& m) { return testing::names(gr, n, m, o); };
  Graph g;
  auto a = input(g, {2, 16, 8});
  NodeIdx flat = g.add_op("f", "view", {a}, T({32, 8}));
  auto f = names(g, flat, dp_cp);
  EXPECT_EQ(std::count(f.begin(), f.end(), "S(0)S(0) <- S(0)S(1)"), 1);
  EXPECT_EQ(std::count(f.begin(), f.end(), "S(0)S(0) <- S(1)S(0)"), 0);  // cp outside dp
  EXPECT_EQ(std::count(f.begin(), f.end(), "S(0)S(0) <- S(0)S(0)"), 0);  // 2 rows, 8 cuts
  Graph g2;
  auto b = input(g2, {32, 8});
  NodeIdx split = g2.add_op("s", "_unsafe_view", {b}, T({2, 16, 8}));
  auto s = names(g2, split, dp_cp);
  EXPECT_EQ(std::count(s.begin(), s.end(), "S(0)S(1) <- S(0)S(0)"), 1);
  EXPECT_EQ(std::count(s.begin(), s.end(), "S(1)S(0) <- S(0)S(0)"), 0);
  EXPECT_EQ(std::count(s.begin(), s.end(), "S(1)S(1) <- S(0)S(0)"), 0);  // 2 blocks a rank
  // Two sequences per dp rank: a dp rank's 2 x 4 tokens are not one block of [b * s].
  Graph g3;
  auto c = input(g3, {4, 16, 8});
  NodeIdx flat3 = g3.add_op("f", "view", {c}, T({64, 8}));
  auto f3 = names(g3, flat3, dp_cp);
  EXPECT_EQ(std::count(f3.begin(), f3.end(), "S(0)S(0) <- S(0)S(1)"), 0);
  // A dim between the cut ones that nobody cuts breaks the block, size-1 dims do not.
  Graph g4;
  auto d = input(g4, {2, 3, 16, 8});
  NodeIdx flat4 = g4.add_op("f", "view", {d}, T({96, 8}));
  auto f4 = names(g4, flat4, dp_cp);
  EXPECT_EQ(std::count(f4.begin(), f4.end(), "S(0)S(0) <- S(0)S(2)"), 0);
  Graph g5;
  auto e = input(g5, {2, 1, 16, 8});
  NodeIdx flat5 = g5.add_op("f", "view", {e}, T({32, 8}));
  auto f5 = names(g5, flat5, dp_cp);
  EXPECT_EQ(std::count(f5.begin(), f5.end(), "S(0)S(0) <- S(0)S(2)"), 1);
  // Only the listed mesh dims nest: cp here, not dp.
  o.nested_view_dims = {0};
  auto off = names(g, flat, dp_cp);
  EXPECT_EQ(std::count(off.begin(), off.end(), "S(0)S(0) <- S(0)S(1)"), 0);
}

TEST(View, TransposePermuteT) {
  Graph g;
  auto a = input(g, {4, 8, 16});
  NodeIdx tr = g.add_op("tr", "transpose.int", {a}, T({4, 16, 8}), Phase::kForward,
                        {{"dim0", int64_t{-1}}, {"dim1", int64_t{1}}});
  EXPECT_EQ(names(g, tr, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(2) <- S(1)", "S(1) <- S(2)"}));
  NodeIdx p = g.add_op("p", "permute", {a}, T({16, 4, 8}), Phase::kForward,
                       {{"dims", Ints{2, 0, 1}}});
  EXPECT_EQ(names(g, p, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(1) <- S(0)", "S(2) <- S(1)", "S(0) <- S(2)"}));
  auto w = input(g, {8, 16});
  NodeIdx t = g.add_op("t", "t", {w}, T({16, 8}));
  EXPECT_EQ(names(g, t, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(1) <- S(0)", "S(0) <- S(1)"}));
}

TEST(View, ExpandSqueezeUnsqueeze) {
  Graph g;
  auto a = input(g, {1, 8});
  NodeIdx e = g.add_op("e", "expand", {a}, T({2, 4, 8}), Phase::kForward,
                       {{"size", Ints{2, 4, 8}}});
  EXPECT_EQ(names(g, e, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(2) <- S(1)"}));
  auto b = input(g, {4, 8});
  NodeIdx u = g.add_op("u", "unsqueeze", {b}, T({4, 1, 8}), Phase::kForward,
                       {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, u, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(2) <- S(1)"}));
  NodeIdx s = g.add_op("s", "squeeze.dim", {{u, 0}}, T({4, 8}), Phase::kForward,
                       {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, s, mesh1()),
            (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(1) <- S(2)"}));
}

TEST(View, SliceAndSelect) {
  Graph g;
  auto a = input(g, {8, 16});
  NodeIdx part = g.add_op("sl", "slice.Tensor", {a}, T({8, 4}), Phase::kForward,
                          {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{4}}});
  EXPECT_EQ(names(g, part, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)"}));
  NodeIdx full = g.add_op("sf", "slice.Tensor", {a}, T({8, 16}), Phase::kForward,
                          {{"dim", int64_t{0}}, {"start", int64_t{0}},
                           {"end", int64_t{9223372036854775807}}});
  EXPECT_EQ(names(g, full, mesh1()).size(), 4u);
  NodeIdx sel = g.add_op("se", "select.int", {a}, T({16}), Phase::kForward,
                         {{"dim", int64_t{0}}, {"index", int64_t{3}}});
  EXPECT_EQ(names(g, sel, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(1)"}));
  auto go = input(g, {8, 4});
  NodeIdx sb = g.add_op("sb", "slice_backward", {go}, T({8, 16}), Phase::kBackward,
                        {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{4}},
                         {"step", int64_t{1}}});
  EXPECT_EQ(names(g, sb, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)"}));
  auto gs = input(g, {16});
  NodeIdx sel_b = g.add_op("sel_b", "select_backward", {gs}, T({8, 16}), Phase::kBackward,
                           {{"dim", int64_t{0}}, {"index", int64_t{3}}});
  EXPECT_EQ(names(g, sel_b, mesh1()), (V{"R <- R", "P(sum) <- P(sum)", "S(1) <- S(0)"}));
}

TEST(View, SplitAndUnbindMultiOutput) {
  Graph g;
  auto a = input(g, {8, 16});
  NodeIdx sp = op(g, "split.Tensor", {a}, {T({8, 8}), T({8, 8})},
                  {{"split_size", int64_t{8}}, {"dim", int64_t{1}}});
  EXPECT_EQ(names(g, sp, mesh1()),
            (V{"R, R <- R", "P(sum), P(sum) <- P(sum)", "S(0), S(0) <- S(0)"}));
  NodeIdx ub = op(g, "unbind.int", {a}, {T({16}), T({16}), T({16}), T({16}), T({16}), T({16}),
                                        T({16}), T({16})},
                  {{"dim", int64_t{0}}});
  EXPECT_EQ(names(g, ub, mesh1()).back(), "S(0), S(0), S(0), S(0), S(0), S(0), S(0), S(0) <- S(1)");
}

TEST(View, UnsafeSplitsAreSplits) {
  // nn.LSTM's decomposition: unsafe_split of the gates; the same rule as split.
  Graph g;
  auto a = input(g, {8, 16});
  const std::vector<std::string> want = {"R, R <- R", "P(sum), P(sum) <- P(sum)",
                                         "S(0), S(0) <- S(0)"};
  NodeIdx us = op(g, "unsafe_split.Tensor", {a}, {T({8, 8}), T({8, 8})},
                  {{"split_size", int64_t{8}}, {"dim", int64_t{1}}});
  EXPECT_EQ(names(g, us, mesh1()), want);
  NodeIdx uw = op(g, "unsafe_split_with_sizes", {a}, {T({8, 8}), T({8, 8})},
                  {{"split_sizes", std::vector<int64_t>{8, 8}}, {"dim", int64_t{1}}});
  EXPECT_EQ(names(g, uw, mesh1()), want);
  NodeIdx uc = op(g, "unsafe_chunk", {a}, {T({4, 16}), T({4, 16})},
                  {{"chunks", int64_t{2}}, {"dim", int64_t{0}}});
  EXPECT_EQ(names(g, uc, mesh1()),
            (V{"R, R <- R", "P(sum), P(sum) <- P(sum)", "S(1), S(1) <- S(1)"}));
}

TEST(View, CatAndStack) {
  Graph g;
  auto a = input(g, {4, 8});
  auto b = input(g, {4, 8});
  NodeIdx c = g.add_op("c", "cat", {a, b}, T({8, 8}), Phase::kForward, {{"dim", int64_t{0}}});
  EXPECT_EQ(names(g, c, mesh1()),
            (V{"R <- R, R", "P(sum) <- P(sum), P(sum)", "S(1) <- S(1), S(1)"}));
  NodeIdx s = g.add_op("s", "stack", {a, b}, T({4, 2, 8}), Phase::kForward, {{"dim", int64_t{1}}});
  EXPECT_EQ(names(g, s, mesh1()),
            (V{"R <- R, R", "P(sum) <- P(sum), P(sum)", "S(0) <- S(0), S(0)",
               "S(2) <- S(1), S(1)"}));
}

TEST(View, DetachAndAliasAreIdentity) {
  Graph g;
  auto a = input(g, {4, 8});
  for (const char* o : {"detach", "alias", "_reshape_alias"}) {
    NodeIdx n = g.add_op(std::string("n_") + o, o, {a}, T({4, 8}));
    EXPECT_EQ(names(g, n, mesh1()),
              (V{"R <- R", "P(sum) <- P(sum)", "S(0) <- S(0)", "S(1) <- S(1)"}))
        << o;
  }
}

}  // namespace
}  // namespace autoshard

// Tied problems are built the same whatever the heap did: the edges between two classes are
// summed in the order of their first edge, not by the shared matrices' addresses.
#include "planner/cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

namespace autoshard {
namespace {

/// Three layers of two nodes each (classes {0, 2, 4} and {1, 3, 5}), one edge per layer, each
/// with its own matrix; `order` is the order in which the three matrices are allocated.
BuiltProblem three_layers(const std::array<int, 3>& order) {
  BuiltProblem bp;
  for (int v = 0; v < 6; ++v) {
    ProblemNode n;
    n.costs = {0.0, 0.0};
    n.usages = {0, 0};
    bp.problem.nodes.push_back(n);
    bp.graph_node.push_back(v);
    bp.pnode.push_back(v);
  }
  // Their sum in layer order is 0 (1 is lost against 1e16, then 1e16 cancels); in another
  // order it is 1.
  const std::array<Cost, 3> value = {1.0, 1e16, -1e16};
  std::array<std::shared_ptr<const std::vector<Cost>>, 3> mats;
  for (int k : order) {
    const auto i = static_cast<size_t>(k);
    mats[i] = std::make_shared<const std::vector<Cost>>(4, value[i]);
  }
  for (int k = 0; k < 3; ++k) bp.edges.push_back({2 * k, 2 * k + 1, mats[static_cast<size_t>(k)]});
  return bp;
}

TEST(ClusterProblem, EdgeSumsDoNotDependOnMatrixAddresses) {
  const std::vector<std::pair<NodeIdx, NodeIdx>> ties = {{0, 2}, {2, 4}, {1, 3}, {3, 5}};
  std::array<int, 3> order = {0, 1, 2};
  int tried = 0;
  do {
    const ClusteredProblem cp = cluster_problem(three_layers(order), ties);
    ASSERT_EQ(cp.problem.num_nodes(), 2);
    ASSERT_EQ(cp.problem.edges.size(), 1u);
    for (Cost c : cp.problem.edges[0].costs)
      EXPECT_EQ(c, 0.0) << "allocation order " << order[0] << order[1] << order[2];
    ++tried;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(tried, 6);
}

}  // namespace
}  // namespace autoshard

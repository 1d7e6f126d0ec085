// Op coverage on graphs traced with torch 2.13 (tests/fixtures/coverage, made by
// tests/fixtures/coverage/regenerate.sh): every op of the LLaMA (also with complex rotary),
// GPT-2, ViT, ResNet, MobileNet-style and mixture-of-experts training steps has a sharding
// rule, so planning them never falls back to "no sharding rule for op".
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ir/graph_json.h"
#include "strategy/test_util.h"

namespace autoshard {
namespace {

using namespace autoshard::testing;

class Coverage : public ::testing::TestWithParam<std::string> {};

TEST_P(Coverage, EveryOpHasARuleAndEnumerates) {
  const std::string path =
      std::string(AUTOSHARD_SOURCE_DIR) + "/tests/fixtures/coverage/" + GetParam() + ".graph.json";
  Graph g = load_graph_file(path);
  std::set<std::string> missing;
  const Mesh mesh = mesh2(2, 2);
  int ops = 0;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.kind != NodeKind::kOp) continue;
    ++ops;
    if (!has_rule(n.op)) missing.insert(n.op);
    NodeStrategies ns = enumerate_strategies(g, i, mesh);
    EXPECT_FALSE(ns.fallback) << n.name << " (" << n.op << ")";
    EXPECT_FALSE(ns.strategies.empty()) << n.name;
  }
  EXPECT_GT(ops, 50);
  std::string list;
  for (const std::string& op : missing) list += " " + op;
  EXPECT_TRUE(missing.empty()) << GetParam() << ": no rule for" << list;
}

INSTANTIATE_TEST_SUITE_P(Torch213, Coverage,
                         ::testing::Values("llama2l_t213", "vit_tiny_t213", "gpt2_tiny",
                                           "resnet_tiny", "mobilenet_tiny", "moe_tiny",
                                           "complex_rotary_tiny"));

}  // namespace
}  // namespace autoshard

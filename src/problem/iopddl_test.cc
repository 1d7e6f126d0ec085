#include "problem/iopddl.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace autoshard {
namespace {

const std::string kExample = std::string(AUTOSHARD_SOURCE_DIR) + "/tests/fixtures/iopddl/example.json";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("autoshard_iopddl_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string error_of(const std::string& text) {
  try {
    parse_iopddl(text, "bad.json");
  } catch (const IopddlError& e) {
    return e.what();
  }
  return "";
}

TEST(Iopddl, ReadsExample) {
  IopddlInstance inst = read_iopddl(kExample);
  const Problem& p = inst.problem;
  EXPECT_EQ(p.name, "example");
  ASSERT_EQ(p.num_nodes(), 5);
  ASSERT_EQ(p.num_edges(), 5);
  EXPECT_EQ(p.usage_limit, 50);
  EXPECT_EQ(p.nodes[2].start, 50);
  EXPECT_EQ(p.nodes[2].end, 120);
  EXPECT_EQ(p.nodes[2].costs, (std::vector<Cost>{25, 45, 35}));
  EXPECT_EQ(p.nodes[2].usages, (std::vector<int64_t>{15, 20, 15}));
  EXPECT_EQ(p.edges[2].u, 1);
  EXPECT_EQ(p.edges[2].v, 3);
  EXPECT_EQ(inst.edge_costs[2], (std::vector<int64_t>{90, 10, 20, 80}));
  EXPECT_EQ(p.validate(), "");
}

TEST(Iopddl, ReadsGzip) {
  std::string text = slurp(kExample);
  std::string gz = temp_path("example.json.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  IopddlInstance a = read_iopddl(gz);
  IopddlInstance b = read_iopddl(kExample);
  EXPECT_EQ(a.node_costs, b.node_costs);
  EXPECT_EQ(a.edge_costs, b.edge_costs);
  EXPECT_EQ(a.problem.usage_limit, 50);
  std::remove(gz.c_str());
  // A truncated gzip stream is an error naming the file.
  std::string trunc = temp_path("trunc.json.gz");
  {
    std::string z = slurp(kExample);
    gzFile g = gzopen(trunc.c_str(), "wb");
    gzwrite(g, z.data(), static_cast<unsigned>(z.size()));
    gzclose(g);
    std::string all = slurp(trunc);
    std::ofstream(trunc, std::ios::binary) << all.substr(0, all.size() / 2);
  }
  try {
    read_iopddl(trunc);
    FAIL() << "no error";
  } catch (const IopddlError& e) {
    EXPECT_NE(std::string(e.what()).find(trunc), std::string::npos) << e.what();
  }
  std::remove(trunc.c_str());
}

TEST(Iopddl, ForbiddenCostsBecomeInfinite) {
  IopddlInstance inst = parse_iopddl(R"({"problem":{"nodes":{"intervals":[[0,1],[0,1]],
      "costs":[[1000000000000000000, 3],[1, 2]],"usages":[[1,1],[1,1]]},
      "edges":{"nodes":[[0,1]],"costs":[[0,1e18,2,3]]},"usage_limit":5}})");
  EXPECT_TRUE(std::isinf(inst.problem.nodes[0].costs[0]));
  EXPECT_EQ(inst.problem.nodes[0].costs[1], 3);
  EXPECT_TRUE(std::isinf(inst.problem.edges[0].costs[1]));
  EXPECT_EQ(inst.edge_costs[0][1], 1000000000000000000LL);
}

TEST(Iopddl, MalformedFilesGiveOneLineErrors) {
  std::string e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1,x]],"usages":[[1,1]]}}})");
  EXPECT_NE(e.find("bad.json:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("/problem/nodes/costs/0/1"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1],[0,1]],"costs":[[1],[1,2]],"usages":[[1],[1,2]]},
      "edges":{"nodes":[[0,1],[1,0]],"costs":[[1,2],[1,2,3]]}}})");
  EXPECT_NE(e.find("/problem/edges/costs/1"), std::string::npos) << e;
  EXPECT_NE(e.find("expected 2 x 1 = 2"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1]],"usages":[[1]]},
      "edges":{"nodes":[[0,7]],"costs":[[1]]}}})");
  EXPECT_NE(e.find("/problem/edges/nodes/0"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1]],"usages":[[1, 2]]}}})");
  EXPECT_NE(e.find("/problem/nodes/usages/0"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1,2]],"costs":[[1]],"usages":[[1]]}}})");
  EXPECT_NE(e.find("/problem/nodes/intervals/0"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[99999999999999999999]],"usages":[[1]]}}})");
  EXPECT_NE(e.find("int64"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1]],"usages":[[1]]}})");
  EXPECT_NE(e.find("end of file"), std::string::npos) << e;

  e = error_of(R"({"problem":{"nodes":{"costs":[[1]],"usages":[[1]]}}})");
  EXPECT_NE(e.find("missing \"intervals\""), std::string::npos) << e;

  try {
    read_iopddl("/nonexistent/x.json");
    FAIL();
  } catch (const IopddlError& err) {
    EXPECT_NE(std::string(err.what()).find("/nonexistent/x.json"), std::string::npos);
  }
}

TEST(Iopddl, EvaluatesExample) {
  IopddlInstance inst = read_iopddl(kExample);
  IopddlEvaluation ev = evaluate(inst, {0, 0, 2, 1, 0});
  EXPECT_TRUE(ev.valid);
  EXPECT_TRUE(ev.feasible) << ev.message;
  EXPECT_EQ(ev.cost_str, "445");
  EXPECT_EQ(static_cast<int64_t>(ev.cost), 445);
  EXPECT_LE(ev.peak_usage, 50);
  EXPECT_EQ(evaluate_cost(inst.problem, {0, 0, 2, 1, 0}), 445);

  // Strategy 1 at node 2 (usage 20) with node 1 (25) and node 0 (10) live together: 55 > 50.
  ev = evaluate(inst, {0, 0, 1, 1, 0});
  EXPECT_TRUE(ev.valid);
  EXPECT_FALSE(ev.feasible);
  EXPECT_EQ(ev.peak_usage, 55);
  EXPECT_NE(ev.message.find("exceeds the limit 50"), std::string::npos) << ev.message;

  ev = evaluate(inst, {0, 0, 3, 1, 0});
  EXPECT_FALSE(ev.valid);
  EXPECT_NE(ev.message.find("node 2"), std::string::npos) << ev.message;
  EXPECT_FALSE(evaluate(inst, {0, 0}).valid);
}

TEST(Iopddl, ExactCostBeyondDouble) {
  // Two forbidden-size costs sum beyond int64 only in 128 bits.
  IopddlInstance inst = parse_iopddl(R"({"problem":{"nodes":{"intervals":[[0,1],[0,1]],
      "costs":[[9000000000000000001],[9000000000000000001]],"usages":[[0],[0]]}}})");
  IopddlEvaluation ev = evaluate(inst, {0, 0});
  EXPECT_EQ(ev.cost_str, "18000000000000000002");
  EXPECT_TRUE(ev.uses_forbidden);
  EXPECT_FALSE(ev.feasible);
}

TEST(Iopddl, WriteRoundTrip) {
  IopddlInstance inst = read_iopddl(kExample);
  inst.problem.nodes[1].costs[1] = kInfCost;
  std::string out = temp_path("rt.json");
  write_iopddl_json(inst.problem, out);
  IopddlInstance back = read_iopddl(out);
  EXPECT_EQ(back.problem.name, "example");
  EXPECT_EQ(back.problem.usage_limit, 50);
  EXPECT_TRUE(std::isinf(back.problem.nodes[1].costs[1]));
  ASSERT_EQ(back.problem.num_edges(), 5);
  for (size_t k = 0; k < 5; ++k) EXPECT_EQ(back.edge_costs[k], inst.edge_costs[k]);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp" + std::to_string(::getpid())));
  std::remove(out.c_str());
}

}  // namespace
}  // namespace autoshard

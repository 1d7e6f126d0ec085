// Tests of io/plan_export.h and of the placements workflow (io/placements_json.h): plan JSON
// fields and deterministic bytes; the MPS of a small model solved by Debian's `cbc` gives our
// optimum; the IOPDDL export reads back with the same cost for our choice; placements load
// into the identical plan without a solve, and bad files name every bad node on one line.
#include "io/plan_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unistd.h>

#include "io/placements_json.h"
#include "ir/file_util.h"
#include "models/models.h"
#include "planner/problem_builder.h"
#include "planner/whatif.h"
#include "problem/iopddl.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;

/// A 2-layer MLP on `devices` devices (1-D mesh) or a 2x2 mesh, untied (--no-cluster: the
/// planner's optimum is then the optimum of the full problem that write_mps exports).
ShardingOptimizer make_opt(bool mesh_2x2, int64_t memory_limit = 0) {
  ModelOptions mo;
  mo.layers = 2;
  Mesh mesh = mesh_2x2 ? Mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100"))
                       : Mesh({2}, {"d"}, *hardware_preset("h100"));
  PlannerOptions o;
  o.objective = Objective::kAdditive;  // these tests pin the additive formulation
  o.memory_limit_bytes = memory_limit;
  o.cluster = false;
  return ShardingOptimizer(build_model("mlp", mo), mesh, o);
}

/// A fresh directory per test, removed when the test ends.
class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("autoshard-export-" + std::to_string(::getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

TEST(PlanJson, FieldsAndDeterministicBytes) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  ASSERT_TRUE(plan.has_solution);
  nlohmann::ordered_json j = plan_to_json(opt, plan);
  EXPECT_EQ(j["mesh"]["shape"], nlohmann::ordered_json::array({2, 2}));
  EXPECT_EQ(j["mesh"]["dim_names"], nlohmann::ordered_json::array({"dp", "tp"}));
  ASSERT_TRUE(j["nodes"].is_array());
  double compute = 0, comm = 0, input_comm = 0;
  bool saw_placeholder = false;
  for (const auto& n : j["nodes"]) {
    for (const char* k : {"name", "op", "phase", "placement", "compute_cost", "transition_cost", "inputs",
                          "dtype", "shape", "module_path", "cluster_id", "cluster_root", "memory_bytes",
                          "strategy", "comm_cost"})
      EXPECT_TRUE(n.contains(k)) << k << " in " << n["name"];
    compute += n["compute_cost"].get<double>();
    comm += n["comm_cost"].get<double>();
    for (const auto& in : n["inputs"]) {
      for (const char* k : {"name", "src_placement", "dst_placement", "comm_cost", "transition_cost"})
        EXPECT_TRUE(in.contains(k)) << k;
      input_comm += in["comm_cost"].get<double>();
    }
    if (n.contains("placeholder_kind")) saw_placeholder = true;
  }
  EXPECT_TRUE(saw_placeholder);
  const auto& s = j["summary"];
  EXPECT_EQ(s["total"].get<double>(), plan.objective_us);
  EXPECT_EQ(s["status"], "optimal");
  EXPECT_EQ(s["peak_memory_bytes"], plan.peak_memory_bytes);
  for (const char* k : {"comm", "compute", "transition", "lower_bound_us", "gap", "compute_us", "comm_us"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_NEAR(compute, plan.compute_us, 1e-9 * plan.objective_us);
  EXPECT_NEAR(comm, plan.comm_us, 1e-9 * plan.objective_us + 1e-12);
  EXPECT_LE(input_comm, comm + 1e-9);  // the rest: parameter <- gradient agreements
  // Same plan, same bytes; and a freshly built optimizer gives them too.
  const std::string text = plan_json_text(opt, plan);
  EXPECT_EQ(text, plan_json_text(opt, plan));
  ShardingOptimizer again = make_opt(true);
  EXPECT_EQ(plan_json_text(again, again.get_solution()), text);
}

TEST(PlanJson, ClusterIdsOnTiedLayers) {
  ModelOptions mo;
  mo.layers = 3;
  ShardingOptimizer opt(build_model("mlp", mo), Mesh({2}, {"d"}, *hardware_preset("h100")), [] {
    PlannerOptions o;
    o.objective = Objective::kAdditive;  // these tests pin the additive formulation
    o.memory_limit_bytes = 0;
    return o;
  }());
  Plan plan = opt.get_solution();
  nlohmann::ordered_json j = plan_to_json(opt, plan);
  std::map<int, int> members;
  for (const auto& n : j["nodes"])
    if (!n["cluster_id"].is_null()) {
      ++members[n["cluster_id"].get<int>()];
      EXPECT_TRUE(n["cluster_root"].is_string());
    }
  EXPECT_FALSE(members.empty()) << "3 identical layers should be tied";
  for (const auto& [id, m] : members) EXPECT_GE(m, 2) << "class " << id;
}

TEST(PlanJson, NoSolutionIsAClearError) {
  ShardingOptimizer opt = make_opt(false);
  Plan none;
  try {
    plan_to_json(opt, none);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("no solution"));
  }
}

/// Runs Debian's cbc on an MPS text; returns {objective, assignment per problem node}.
struct CbcResult {
  bool ran = false;
  std::string status;
  double objective = 0;
  std::map<std::string, double> values;
};

CbcResult run_cbc(const std::string& mps, const std::filesystem::path& dir) {
  CbcResult r;
  const auto in = dir / "p.mps", out = dir / "solution.txt";
  write_file_atomic(in.string(), mps);
  const std::string cmd = "cbc '" + in.string() + "' solve solu '" + out.string() + "' > '" +
                          (dir / "cbc.log").string() + "' 2>&1";
  if (std::system(cmd.c_str()) != 0) return r;
  std::ifstream f(out);
  std::string first;
  std::getline(f, first);
  r.status = first;
  auto pos = first.find("objective value");
  if (pos == std::string::npos) return r;
  r.objective = std::stod(first.substr(pos + 15));
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string idx, name;
    double v = 0;
    if (ls >> idx >> name >> v) r.values[name] = v;
  }
  r.ran = true;
  return r;
}

void expect_cbc_matches(ShardingOptimizer& opt, const std::string& label) {
  if (std::system("command -v cbc > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "Debian's cbc command (coinor-cbc) is not installed: MPS cross-check skipped";
  Plan plan = opt.get_solution();
  ASSERT_TRUE(plan.has_solution);
  ASSERT_EQ(plan.status, SolveStatus::kOptimal) << label;
  const std::string mps = write_mps(opt);
  EXPECT_EQ(mps, write_mps(opt));  // deterministic
  TempDir dir;
  CbcResult r = run_cbc(mps, dir.path());
  ASSERT_TRUE(r.ran) << label << ": cbc failed: " << r.status;
  EXPECT_THAT(r.status, HasSubstr("Optimal")) << label;
  EXPECT_NEAR(r.objective, plan.objective_us, 1e-6 * plan.objective_us) << label;
  // CBC's assignment, evaluated with our cost model, is an optimum too.
  const BuiltProblem& bp = opt.problem();
  std::vector<StrategyIdx> choice(static_cast<size_t>(bp.problem.num_nodes()), -1);
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v)
    for (StrategyIdx q = 0; q < bp.problem.nodes[static_cast<size_t>(v)].num_strategies(); ++q)
      if (r.values[mps_node_column(v, q)] > 0.5) choice[static_cast<size_t>(v)] = q;
  for (size_t v = 0; v < choice.size(); ++v) ASSERT_GE(choice[v], 0) << label << ": node " << v;
  EXPECT_NEAR(evaluate_cost(bp, choice), plan.objective_us, 1e-6 * plan.objective_us) << label;
  if (bp.problem.usage_limit >= 0) {
    EXPECT_LE(peak_usage(bp.problem, choice), bp.problem.usage_limit) << label;
  }
}

TEST(Mps, CbcFindsOurOptimumWithoutMemoryLimit) {
  ShardingOptimizer opt = make_opt(false);
  expect_cbc_matches(opt, "mlp 2 layers, mesh 2, no limit");
}

TEST(Mps, CbcFindsOurOptimumWithABindingMemoryLimit) {
  // Halfway between the smallest peak any plan reaches and the unlimited optimum's peak: the
  // memory rows bind (the optimum changes) but a plan exists.
  ShardingOptimizer free_opt = make_opt(false);
  Plan unlimited = free_opt.get_solution();
  const BuiltProblem& bp = free_opt.problem();
  std::vector<StrategyIdx> smallest(static_cast<size_t>(bp.problem.num_nodes()));
  for (PNodeIdx v = 0; v < bp.problem.num_nodes(); ++v) {
    const auto& u = bp.problem.nodes[static_cast<size_t>(v)].usages;
    smallest[static_cast<size_t>(v)] = static_cast<StrategyIdx>(std::min_element(u.begin(), u.end()) - u.begin());
  }
  const int64_t low = peak_usage(bp.problem, smallest);
  ASSERT_LT(low, unlimited.peak_memory_bytes) << "the memory limit could not bind";
  const int64_t limit = (low + unlimited.peak_memory_bytes) / 2;
  ShardingOptimizer opt = make_opt(false, limit);
  Plan limited = opt.get_solution();
  ASSERT_TRUE(limited.has_solution);
  EXPECT_LE(limited.peak_memory_bytes, limit);
  EXPECT_GE(limited.objective_us, unlimited.objective_us * (1 - 1e-12));  // a restriction
  EXPECT_THAT(write_mps(opt), HasSubstr(" L  m0\n"));
  expect_cbc_matches(opt, "mlp 2 layers, mesh 2, binding limit");
}

TEST(Iopddl, ExportReadsBackWithTheSameCost) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  TempDir dir;
  const auto path = dir / "problem.json";
  write_problem_iopddl(opt, path.string());
  IopddlInstance inst = read_iopddl(path.string());
  const BuiltProblem& bp = opt.problem();
  ASSERT_EQ(inst.problem.num_nodes(), bp.problem.num_nodes());
  IopddlEvaluation ev = evaluate(inst, plan_choice(opt, plan));
  ASSERT_TRUE(ev.feasible) << ev.message;
  // Integer picoseconds: each term is rounded by at most 0.5 ps.
  const double terms = static_cast<double>(inst.problem.num_nodes() + inst.problem.num_edges());
  EXPECT_NEAR(static_cast<double>(ev.cost_ld) / kIopddlCostScale, plan.objective_us,
              terms * 0.5 / kIopddlCostScale + 1e-9 * plan.objective_us);
}

// ---- placements workflow ------------------------------------------------------------------

TEST(Placements, FileCarriesFingerprintAndVersion) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  nlohmann::json j = nlohmann::json::parse(write_placements_json(plan, opt.graph(), opt.mesh()));
  ASSERT_TRUE(j["graph_fingerprint"].is_string());
  EXPECT_EQ(j["graph_fingerprint"].get<std::string>(), graph_fingerprint(opt.graph()));
  EXPECT_EQ(j["graph_fingerprint"].get<std::string>().size(), 16u);
  EXPECT_TRUE(j["autoshard_version"].is_string());
  // The fingerprint follows the structure.
  ModelOptions mo;
  mo.layers = 3;
  EXPECT_NE(graph_fingerprint(build_model("mlp", mo)), graph_fingerprint(opt.graph()));
}

TEST(Placements, LoadGivesTheIdenticalPlanWithoutASolve) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  TempDir dir;
  const auto path = (dir / "placements.json").string();
  save_placements(opt, path);
  ShardingOptimizer fresh = make_opt(true);
  Plan loaded = load_placements(fresh, path);
  EXPECT_EQ(loaded.objective_us, plan.objective_us);  // bit for bit
  EXPECT_EQ(loaded.compute_us, plan.compute_us);
  EXPECT_EQ(loaded.comm_us, plan.comm_us);
  EXPECT_EQ(loaded.peak_memory_bytes, plan.peak_memory_bytes);
  EXPECT_TRUE(loaded.phase_seconds.empty());  // nothing was solved
  for (NodeIdx i = 0; i < opt.graph().size(); ++i) {
    const auto& a = plan.nodes[static_cast<size_t>(i)];
    const auto& b = loaded.nodes[static_cast<size_t>(i)];
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a) {
      EXPECT_EQ(a->strategy, b->strategy) << opt.graph().node(i).name;
    }
  }
  ASSERT_TRUE(fresh.solution());
  EXPECT_EQ(fresh.solution()->objective_us, plan.objective_us);
  // Exports of the loaded plan equal those of the solved one (same placements bytes).
  EXPECT_EQ(write_placements_json(loaded, fresh.graph(), fresh.mesh()),
            write_placements_json(plan, opt.graph(), opt.mesh()));
}

TEST(Placements, BadFilesNameEveryBadNodeOnOneLine) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  nlohmann::json j = nlohmann::json::parse(write_placements_json(plan, opt.graph(), opt.mesh()));
  auto error_of = [&](const nlohmann::json& doc) -> std::string {
    ShardingOptimizer o = make_opt(true);
    try {
      placements_plan(o, doc.dump(), "saved.json");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  // Wrong mesh.
  nlohmann::json m = j;
  m["mesh_shape"] = {4, 1};
  EXPECT_THAT(error_of(m), HasSubstr("saved.json: /mesh_shape"));
  m = j;
  m["mesh_dim_names"] = {"a", "b"};
  EXPECT_THAT(error_of(m), HasSubstr("saved.json: /mesh_dim_names"));
  // Unknown nodes, an unmatched spec and a missing node, all in one message.
  std::vector<std::string> names;
  for (auto it = j["placements"].begin(); it != j["placements"].end(); ++it) names.push_back(it.key());
  ASSERT_GE(names.size(), 3u);
  nlohmann::json bad = j;
  bad["placements"]["ghost_a"] = j["placements"][names[0]];
  bad["placements"]["ghost_b"] = j["placements"][names[0]];
  bad["placements"]["ghost\nc"] = j["placements"][names[0]];  // a newline in a key
  std::string mm;  // an mm node with two inputs: ask for an impossible input combination
  for (const auto& n : names)
    if (opt.graph().node(*opt.graph().find(n)).op == "mm") mm = n;
  ASSERT_FALSE(mm.empty());
  bad["placements"][mm]["inputs"] = {"S(0)S(0)", "S(0)S(0)"};
  bad["placements"].erase(names[1]);
  std::string e = error_of(bad);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_THAT(e, HasSubstr("saved.json: "));
  EXPECT_THAT(e, HasSubstr("/placements/ghost_a: no such node"));
  EXPECT_THAT(e, HasSubstr("/placements/ghost_b: no such node"));
  EXPECT_THAT(e, HasSubstr("/placements/ghost c: no such node"));
  EXPECT_THAT(e, HasSubstr("/placements/" + mm + ": output"));
  EXPECT_THAT(e, HasSubstr("matches none"));
  EXPECT_THAT(e, HasSubstr("/placements/" + names[1] + ": missing"));
  EXPECT_THAT(e, HasSubstr("(5 mismatched nodes)"));
  // Many mismatches: the first few, then a count, still one line.
  nlohmann::json many = j;
  for (int k = 0; k < 30; ++k) many["placements"]["ghost_" + std::to_string(k)] = j["placements"][names[0]];
  e = error_of(many);
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_THAT(e, HasSubstr("and 22 more"));
  EXPECT_THAT(e, HasSubstr("(30 mismatched nodes)"));
  // Megabyte keys and placement strings are quoted as excerpts: the line stays short.
  nlohmann::json huge = j;
  huge["placements"][std::string(100000, 'k')] = j["placements"][names[0]];
  huge["placements"][mm]["output"] = "R" + std::string(100000, 'Y');
  e = error_of(huge);
  EXPECT_LT(e.size(), 1000u);
  EXPECT_THAT(e, HasSubstr("/placements/kkkk"));
  EXPECT_THAT(e, HasSubstr("k...: no such node"));
  EXPECT_THAT(e, HasSubstr("YYY...': expected R, S(d), _S(d,sf) or P(op)"));
}

TEST(Placements, AnotherGraphsFingerprintIsAWarning) {
  ShardingOptimizer opt = make_opt(true);
  Plan plan = opt.get_solution();
  nlohmann::json j = nlohmann::json::parse(write_placements_json(plan, opt.graph(), opt.mesh()));
  j["graph_fingerprint"] = "0123456789abcdef";
  ShardingOptimizer o = make_opt(true);
  Plan loaded = placements_plan(o, j.dump(), "saved.json");
  EXPECT_EQ(loaded.objective_us, plan.objective_us);
  bool warned = false;
  for (const std::string& w : loaded.warnings) warned = warned || w.find("fingerprint") != std::string::npos;
  EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace autoshard

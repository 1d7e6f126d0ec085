// Tests for io/state.h: state and replay files round-trip a planning session exactly; bad files
// fail with one-line errors; the solution file (MASE's preload_solution) is reused or ignored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <stdexcept>
#include <string>

#include "io/container.h"
#include "io/placements_json.h"
#include "io/plan_json.h"
#include "io/state.h"
#include "io/state_codec.h"
#include "ir/file_util.h"
#include "ir/graph_json.h"
#include "mesh/hardware.h"
#include "models/models.h"
#include "planner/recompute_block.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

Graph small_gpt2(int layers = 2) {
  ModelOptions mo;
  mo.layers = layers;
  mo.batch = 2;
  mo.seq = 64;
  return build_model("gpt2", mo);
}

PlannerOptions no_limit() {
  PlannerOptions o;
  o.memory_limit_bytes = 0;
  return o;
}

Mesh mesh_2x2() { return Mesh({2, 2}, {"dp", "tp"}, *hardware_preset("h100")); }

/// A two-layer GPT-2 on 2x2 with a pin and a parameter-memory constraint (shadow nodes and tie
/// matrices), solved under the additive objective: one solve instead of the overlap
/// objective's several (KernelOptionsRoundTrip keeps an overlap-objective state).
ShardingOptimizer solved_optimizer() {
  PlannerOptions o = no_limit();
  o.objective = Objective::kAdditive;
  ShardingOptimizer so(small_gpt2(), mesh_2x2(), o);
  so.pin("transformer.wte.weight", parse_placements("RS(0)"));
  so.add_parameter_memory_constraint(0, 0.6);
  so.get_solution();
  return so;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_plan(const Plan& a, const Plan& b) {
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    ASSERT_EQ(a.nodes[i].has_value(), b.nodes[i].has_value()) << i;
    if (!a.nodes[i]) continue;
    EXPECT_EQ(a.nodes[i]->strategy, b.nodes[i]->strategy) << i;
    EXPECT_EQ(a.nodes[i]->chosen.name(), b.nodes[i]->chosen.name()) << i;
    EXPECT_TRUE(same_bits(a.nodes[i]->compute_us, b.nodes[i]->compute_us)) << i;
    EXPECT_TRUE(same_bits(a.nodes[i]->comm_us, b.nodes[i]->comm_us)) << i;
  }
  EXPECT_EQ(a.status, b.status);
  for (auto [x, y] : {std::pair{a.objective_us, b.objective_us}, {a.lower_bound_us, b.lower_bound_us},
                      {a.gap, b.gap}, {a.compute_us, b.compute_us}, {a.comm_us, b.comm_us},
                      {a.recompute_us, b.recompute_us}})
    EXPECT_TRUE(same_bits(x, y)) << x << " vs " << y;
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  EXPECT_EQ(a.memory_limit_bytes, b.memory_limit_bytes);
  EXPECT_EQ(a.min_peak_memory_bytes, b.min_peak_memory_bytes);
  EXPECT_EQ(a.min_peak_lower_bound_bytes, b.min_peak_lower_bound_bytes);
  EXPECT_EQ(a.graph_nodes, b.graph_nodes);
  EXPECT_EQ(a.problem_nodes, b.problem_nodes);
  EXPECT_EQ(a.problem_edges, b.problem_edges);
  EXPECT_EQ(a.alpa_variables, b.alpa_variables);
  EXPECT_EQ(a.clustered_nodes, b.clustered_nodes);
  EXPECT_EQ(a.reduced_nodes, b.reduced_nodes);
  EXPECT_EQ(a.reduced_edges, b.reduced_edges);
  EXPECT_EQ(a.mip_variables, b.mip_variables);
  EXPECT_EQ(a.layer_clusters, b.layer_clusters);
  EXPECT_TRUE(b.phase_seconds.empty());  // timings are not stored (deterministic bytes)
  EXPECT_EQ(a.warnings, b.warnings);
  EXPECT_EQ(a.checked, b.checked);
  EXPECT_EQ(a.has_solution, b.has_solution);
  EXPECT_EQ(a.layer_recompute, b.layer_recompute);
  EXPECT_EQ(a.recomputed_nodes, b.recomputed_nodes);
}

void expect_same_problem(const BuiltProblem& a, const BuiltProblem& b) {
  ASSERT_EQ(a.problem.num_nodes(), b.problem.num_nodes());
  for (PNodeIdx v = 0; v < a.problem.num_nodes(); ++v) {
    const ProblemNode& x = a.problem.nodes[static_cast<size_t>(v)];
    const ProblemNode& y = b.problem.nodes[static_cast<size_t>(v)];
    EXPECT_EQ(x.name, y.name);
    ASSERT_EQ(x.costs.size(), y.costs.size());
    EXPECT_EQ(std::memcmp(x.costs.data(), y.costs.data(), x.costs.size() * sizeof(Cost)), 0) << v;
    EXPECT_EQ(x.usages, y.usages);
    EXPECT_EQ(x.start, y.start);
    EXPECT_EQ(x.end, y.end);
    const auto& sa = a.strategies[static_cast<size_t>(v)];
    const auto& sb = b.strategies[static_cast<size_t>(v)];
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t q = 0; q < sa.size(); ++q) {
      ASSERT_EQ(sa[q].outputs.size(), sb[q].outputs.size());
      ASSERT_EQ(sa[q].inputs.size(), sb[q].inputs.size());
      for (size_t k = 0; k < sa[q].outputs.size(); ++k) EXPECT_TRUE(sa[q].outputs[k] == sb[q].outputs[k]);
      for (size_t k = 0; k < sa[q].inputs.size(); ++k) EXPECT_TRUE(sa[q].inputs[k] == sb[q].inputs[k]);
    }
  }
  EXPECT_EQ(a.problem.usage_limit, b.problem.usage_limit);
  ASSERT_EQ(a.edges.size(), b.edges.size());
  for (size_t k = 0; k < a.edges.size(); ++k) {
    EXPECT_EQ(a.edges[k].u, b.edges[k].u);
    EXPECT_EQ(a.edges[k].v, b.edges[k].v);
    ASSERT_EQ(a.edges[k].costs->size(), b.edges[k].costs->size());
    EXPECT_EQ(std::memcmp(a.edges[k].costs->data(), b.edges[k].costs->data(),
                          a.edges[k].costs->size() * sizeof(Cost)), 0) << k;
    EXPECT_EQ(a.edge_origin[k].consumer, b.edge_origin[k].consumer);
    EXPECT_EQ(a.edge_origin[k].slot, b.edge_origin[k].slot);
    EXPECT_EQ(a.edge_origin[k].producer, b.edge_origin[k].producer);
  }
  EXPECT_EQ(a.graph_node, b.graph_node);
  EXPECT_EQ(a.pnode, b.pnode);
  EXPECT_EQ(a.fallback_ops, b.fallback_ops);
  EXPECT_EQ(a.memory_limit, b.memory_limit);
  EXPECT_EQ(a.has_optimizer, b.has_optimizer);
  ASSERT_EQ(a.cp_buffers.size(), b.cp_buffers.size());
  for (size_t k = 0; k < a.cp_buffers.size(); ++k) {
    EXPECT_EQ(a.cp_buffers[k].node, b.cp_buffers[k].node);
    EXPECT_EQ(a.cp_buffers[k].owner, b.cp_buffers[k].owner);
  }
}

size_t distinct_matrices(const BuiltProblem& bp) {
  std::set<const void*> s;
  for (const auto& e : bp.edges) s.insert(e.costs.get());
  return s.size();
}

/// The message of `f()`'s std::runtime_error; fails the test if it does not throw one.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(State, RoundTripKeepsEverything) {
  ShardingOptimizer so = solved_optimizer();
  ASSERT_TRUE(so.solution() && so.solution()->has_solution);
  std::string bytes = state_bytes(so);
  ShardingOptimizer back = state_from_bytes(bytes, "plan.ap");
  ASSERT_NE(back.built_problem(), nullptr);
  ASSERT_TRUE(back.solution());
  EXPECT_EQ(back.solution_choice(), so.solution_choice());
  expect_same_plan(*so.solution(), *back.solution());
  expect_same_problem(*so.built_problem(), *back.built_problem());
  Plan untimed = *so.solution();
  untimed.phase_seconds.clear();  // wall-clock timings are not stored (deterministic bytes)
  EXPECT_EQ(plan_summary_json(untimed, so.graph(), so.mesh()).dump(),
            plan_summary_json(*back.solution(), back.graph(), back.mesh()).dump());
  EXPECT_EQ(write_placements_json(*so.solution(), so.graph(), so.mesh()),
            write_placements_json(*back.solution(), back.graph(), back.mesh()));
  ASSERT_EQ(back.constraints().size(), 2u);
  EXPECT_EQ(describe(back.constraints()[0]), describe(so.constraints()[0]));
  EXPECT_EQ(back.constraints()[1].high, 0.6);
  EXPECT_EQ(problem_fingerprint(back), problem_fingerprint(so));
  // Saving the loaded optimizer writes the same bytes: nothing was lost or changed.
  EXPECT_EQ(state_bytes(back), bytes);
  // The loaded costs evaluate the stored assignment to the stored objective.
  EXPECT_TRUE(same_bits(back.evaluate(back.solution_choice()).objective_us, so.solution()->objective_us));
}

/// A plan priced with Float8 linears and compiled memory-bound ops (KernelOptions) loads with
/// them: the mesh's hardware keeps the options and figures, the fingerprint differs from eager.
TEST(State, KernelOptionsRoundTrip) {
  Hardware hw = *hardware_preset("h100");
  hw.kernels.float8_linear = true;
  hw.kernels.compiled = true;
  ShardingOptimizer so(small_gpt2(1), Mesh({2, 2}, {"dp", "tp"}, hw), no_limit());
  so.get_solution();
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  const Hardware& h = back.mesh().hardware();
  EXPECT_TRUE(h.kernels.float8_linear && h.kernels.compiled);
  EXPECT_EQ(h.peak_fp8_tflops, 1979);
  EXPECT_EQ(h.compile_memory_speedup, kCompileMemorySpeedup);
  EXPECT_TRUE(same_bits(back.evaluate(back.solution_choice()).objective_us, so.solution()->objective_us));
  EXPECT_EQ(problem_fingerprint(back), problem_fingerprint(so));
  ShardingOptimizer eager(small_gpt2(1), mesh_2x2(), no_limit());
  EXPECT_NE(problem_fingerprint(eager), problem_fingerprint(so));
}

/// A plan with strided shards (shard orders on, a weight pinned tp-first) saves and loads with
/// its split factors and the option; placement codes of plain shards are as before.
TEST(State, ShardOrdersRoundTrip) {
  EXPECT_EQ(placement_code(Placement::shard(3)), static_cast<uint32_t>(Placement::Kind::kShard) | (3u << 2));
  EXPECT_NE(placement_code(Placement::strided_shard(3, 8)), placement_code(Placement::shard(3)));
  PlannerOptions po = no_limit();
  po.shard_orders = true;
  ModelOptions mo;
  mo.layers = 1;
  ShardingOptimizer so(build_model("llama3-8b", mo), Mesh({2, 4}, {"dp", "tp"}, *hardware_preset("h100")), po);
  Constraint c;
  c.kind = Constraint::Kind::kPin;
  c.node = "layers.0.feed_forward.w1.weight";
  c.output = parse_placements("_S(0,4)S(0)");
  c.name = "fsdp2";
  so.add_constraint(c);
  ASSERT_TRUE(so.get_solution().has_solution);
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  EXPECT_TRUE(back.options().shard_orders);
  expect_same_plan(*so.solution(), *back.solution());
  const auto w1 = back.graph().find("layers.0.feed_forward.w1.weight");
  ASSERT_TRUE(w1.has_value());
  EXPECT_EQ(back.solution()->nodes[static_cast<size_t>(*w1)]->chosen.outputs[0].to_string(), "_S(0,4)S(0)");
  EXPECT_EQ(problem_fingerprint(back), problem_fingerprint(so));
  // The option is part of the fingerprint (a solution file for one does not fit the other).
  PlannerOptions plain = no_limit();
  ShardingOptimizer other(build_model("llama3-8b", mo), Mesh({2, 4}, {"dp", "tp"}, *hardware_preset("h100")), plain);
  EXPECT_NE(problem_fingerprint(other), problem_fingerprint(so));
}

/// Context-parallel attention's buffer nodes (planner/cp_memory.h) are not stored: loading reads
/// them back from their tie edges, so the loaded problem ties and floors as the built one.
TEST(State, ContextParallelBufferNodesRoundTrip) {
  ModelOptions mo;
  mo.layers = 2;
  mo.batch = 1;
  mo.seq = 4096;
  mo.vocab = 512;
  ShardingOptimizer so(build_model("llama3-8b", mo), Mesh({2, 2}, {"cp", "tp"}, *hardware_preset("h100")),
                       no_limit());
  so.get_solution();
  ASSERT_EQ(so.built_problem()->cp_buffers.size(), 4u);  // 2 layers x (forward + backward)
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  expect_same_problem(*so.built_problem(), *back.built_problem());
  expect_same_plan(*so.solution(), *back.solution());
}

/// The default recomputation policy under a binding budget: the state keeps the problem built
/// with recomputation, and loading it restores that the optimizer planned with it.
TEST(State, DefaultPolicyThatRecomputedRoundTrips) {
  const Graph g = testing::tiny_llama(2);
  const Mesh one({1}, {"dp"}, *hardware_preset("h100"));
  PlannerOptions o;
  o.memory_limit_bytes = 0;
  o.recompute = RecomputePolicy::kNone;
  const int64_t keep = ShardingOptimizer(g, one, o).get_solution().peak_memory_bytes;
  o.recompute = RecomputePolicy::kFull;
  const int64_t full = ShardingOptimizer(g, one, o).get_solution().peak_memory_bytes;
  o.recompute = RecomputePolicy::kIfNeeded;
  o.memory_limit_bytes = (keep + full) / 2;
  ShardingOptimizer so(g, one, o);
  const Plan p = so.get_solution();
  ASSERT_TRUE(p.has_solution);
  ASSERT_TRUE(so.recompute_escalated());
  const std::string bytes = state_bytes(so);
  ShardingOptimizer back = state_from_bytes(bytes, "plan.ap");
  EXPECT_EQ(back.options().recompute, RecomputePolicy::kIfNeeded);
  EXPECT_TRUE(back.recompute_escalated());
  EXPECT_EQ(back.built_policy(), RecomputePolicy::kAuto);
  EXPECT_EQ(back.solution_choice(), so.solution_choice());
  EXPECT_EQ(back.solution()->recomputed_nodes, p.recomputed_nodes);
  EXPECT_TRUE(same_bits(back.evaluate(back.solution_choice()).objective_us, p.objective_us));
  EXPECT_EQ(state_bytes(back), bytes);
  // placements.json carries the recomputed nodes: evaluating it plans them again.
  const std::string text = write_placements_json(p, g, one);
  ShardingOptimizer fresh(g, one, o);
  const Plan loaded = placements_plan(fresh, text, "p.json");
  EXPECT_TRUE(fresh.recompute_escalated());
  EXPECT_EQ(loaded.recomputed_nodes, p.recomputed_nodes);
  EXPECT_TRUE(same_bits(loaded.objective_us, p.objective_us));
  EXPECT_EQ(loaded.peak_memory_bytes, p.peak_memory_bytes);
  // An explicit none cannot recompute: it says so and evaluates them kept.
  o.recompute = RecomputePolicy::kNone;
  ShardingOptimizer none(g, one, o);
  const Plan kept = placements_plan(none, text, "p.json");
  EXPECT_TRUE(kept.recomputed_nodes.empty());
  EXPECT_NE(std::find_if(kept.warnings.begin(), kept.warnings.end(),
                         [](const std::string& w) { return w.find("evaluated kept") != std::string::npos; }),
            kept.warnings.end());
}

TEST(State, SharedMatricesAreStoredOnce) {
  ShardingOptimizer so = solved_optimizer();
  const BuiltProblem& bp = *so.built_problem();
  size_t stored = 0;
  state_bytes(so, &stored);
  EXPECT_EQ(stored, distinct_matrices(bp));
  EXPECT_LT(stored * 2, bp.edges.size());  // repeated layers share most matrices
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  EXPECT_EQ(distinct_matrices(*back.built_problem()), stored);  // sharing restored in memory
}

size_t distinct_strategy_lists(const BuiltProblem& bp) {
  std::vector<const StrategyList*> seen;
  for (const StrategyList& l : bp.strategies)
    if (std::none_of(seen.begin(), seen.end(), [&](const StrategyList* o) { return o->shares(l); }))
      seen.push_back(&l);
  return seen.size();
}

TEST(State, SharedStrategyListsAreSharedAfterLoad) {
  // Repeated layers share one strategy list in memory; the file stores it once, and loading
  // shares it again instead of decoding one copy per node.
  ShardingOptimizer so = solved_optimizer();
  const BuiltProblem& bp = *so.built_problem();
  const size_t built = distinct_strategy_lists(bp);
  EXPECT_LT(built * 2, bp.strategies.size());
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  // (At most as many: equal lists the builder made twice are one list in the file.)
  EXPECT_LE(distinct_strategy_lists(*back.built_problem()), built);
  expect_same_problem(bp, *back.built_problem());
}

TEST(StateLarge, ResolveAfterLoadUsesTheStoredProblem) {
  ShardingOptimizer so = solved_optimizer();
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "plan.ap");
  const BuiltProblem* stored = back.built_problem();
  Plan again = back.get_solution();
  EXPECT_EQ(back.built_problem(), stored);  // not rebuilt
  EXPECT_TRUE(same_bits(again.objective_us, so.solution()->objective_us));
  // After a new constraint the problem is rebuilt from the stored graph, mesh and options.
  back.pin("transformer.wpe.weight", parse_placements("RR"));
  Plan pinned = back.get_solution();
  EXPECT_TRUE(pinned.has_solution);
  EXPECT_GE(pinned.objective_us, again.objective_us - 1e-9);
}

TEST(State, UnsolvedOptimizerRoundTrips) {
  ShardingOptimizer so(small_gpt2(1), mesh_2x2(), no_limit());
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "x.ap");
  EXPECT_EQ(back.built_problem(), nullptr);
  EXPECT_FALSE(back.solution());
  EXPECT_EQ(back.graph().size(), so.graph().size());
  EXPECT_EQ(write_graph_json(back.graph()), write_graph_json(so.graph()));
}

TEST(State, EmptyIntListAttributeRoundTrips) {
  // Found by the state fuzzer: an attribute holding an empty int list (a reduction over
  // dim=[]) was written without its value, so the file did not load again.
  Graph g = small_gpt2(1);
  Node* mean = nullptr;
  for (Node& n : g.nodes)
    if (n.kind == NodeKind::kOp && !n.attrs.empty() && !mean) mean = &n;
  ASSERT_NE(mean, nullptr);
  mean->attrs["empty_dims"] = std::vector<int64_t>{};
  const std::string name = mean->name;
  ShardingOptimizer so(std::move(g), mesh_2x2(), no_limit());
  const std::string once = state_bytes(so);
  ShardingOptimizer back = state_from_bytes(once, "x.ap");
  const Node& n = back.graph().node(*back.graph().find(name));
  ASSERT_TRUE(n.attrs.count("empty_dims"));
  EXPECT_EQ(std::get<std::vector<int64_t>>(n.attrs.at("empty_dims")), std::vector<int64_t>{});
  EXPECT_EQ(state_bytes(back), once);
}

TEST(State, ComplexDtypesRoundTrip) {
  // The state file stores DType's value: the complex types, added last, read back as such.
  Graph g = small_gpt2(1);
  g.nodes[0].outputs[0].dtype = DType::kC64;
  g.nodes[1].outputs[0].dtype = DType::kC128;
  ShardingOptimizer so(std::move(g), mesh_2x2(), no_limit());
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "x.ap");
  EXPECT_EQ(back.graph().node(0).outputs[0].dtype, DType::kC64);
  EXPECT_EQ(back.graph().node(1).outputs[0].dtype, DType::kC128);
}

TEST(State, TangentsAndEagerIslandsRoundTrip) {
  Graph g = small_gpt2(1);
  g.tangents = {g.size() - 2};
  g.islands = {{"h.0.mlp", {"gpt2.py:30", "gpt2.py:31"}}};
  ShardingOptimizer so(std::move(g), mesh_2x2(), no_limit());
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "x.ap");
  EXPECT_EQ(back.graph().tangents, so.graph().tangents);
  ASSERT_EQ(back.graph().islands.size(), 1u);
  EXPECT_EQ(back.graph().islands[0].module, "h.0.mlp");
  EXPECT_EQ(back.graph().islands[0].sources, so.graph().islands[0].sources);
}

TEST(ReplayLarge, RegeneratesTheSameOptimum) {
  ShardingOptimizer so = solved_optimizer();
  std::string replay = replay_bytes(so);
  EXPECT_LT(replay.size() * 4, state_bytes(so).size());
  ReplayInfo info;
  ShardingOptimizer back = replay_from_bytes(replay, "plan.replay", &info);
  EXPECT_EQ(info.writer_version, std::string(autoshard_version()));
  EXPECT_THAT(info.note, HasSubstr("regenerated from a replay written by autoshard "));
  EXPECT_EQ(back.built_problem(), nullptr);  // nothing derived is stored
  EXPECT_EQ(problem_fingerprint(back), problem_fingerprint(so));
  Plan p = back.get_solution();
  EXPECT_TRUE(same_bits(p.objective_us, so.solution()->objective_us));
  EXPECT_EQ(back.solution_choice(), so.solution_choice());
  // A replay is not a state and vice versa.
  EXPECT_THAT(error_of([&] { state_from_bytes(replay, "plan.replay"); }),
              HasSubstr("plan.replay: byte 0: this is an autoshard replay file, not a state file"));
  EXPECT_THAT(error_of([&] { replay_from_bytes(state_bytes(so), "plan.ap"); }),
              HasSubstr("not a replay file"));
}

TEST(StateErrors, BadMagicAndNewerVersion) {
  ShardingOptimizer so(small_gpt2(1), mesh_2x2(), no_limit());
  std::string bytes = state_bytes(so);
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(error_of([&] { state_from_bytes(bad, "f.ap"); }),
            "f.ap: byte 0: not an autoshard state file (bad magic)");
  std::string newer = bytes;
  newer[4] = static_cast<char>(kStateFormatVersion + 1);
  EXPECT_EQ(error_of([&] { state_from_bytes(newer, "f.ap"); }),
            fmt::format("f.ap: state format version {} is newer than this autoshard supports ({})",
                        kStateFormatVersion + 1, kStateFormatVersion));
  EXPECT_THAT(error_of([&] { state_from_bytes(bytes + "x", "f.ap"); }), HasSubstr("trailing data"));
  EXPECT_THAT(error_of([&] { state_from_bytes("{\"format\": 1}", "f.ap"); }), HasSubstr("bad magic"));
  EXPECT_THAT(error_of([&] { load_state("/nonexistent/plan.ap"); }), StartsWith("/nonexistent/plan.ap: "));
}

TEST(StateErrors, EveryTruncationFailsCleanly) {
  ModelOptions mo;
  mo.batch = 4;
  mo.layers = 1;
  ShardingOptimizer so(build_model("mlp", mo), Mesh({2}, {"dp"}, *hardware_preset("h100")), no_limit());
  so.get_solution();
  std::string bytes = state_bytes(so);
  ASSERT_GT(bytes.size(), kContainerHeaderSize);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string msg = error_of([&] { state_from_bytes(std::string_view(bytes).substr(0, n), "t.ap"); });
    ASSERT_THAT(msg, StartsWith("t.ap: byte ")) << n;
    ASSERT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(StateErrors, BitFlipsFailCleanly) {
  ShardingOptimizer so = solved_optimizer();
  std::string bytes = state_bytes(so);
  std::mt19937_64 rng(7);
  for (int t = 0; t < 300; ++t) {
    std::string bad = bytes;
    size_t at = rng() % bad.size();
    bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
    std::string msg = error_of([&] { state_from_bytes(bad, "c.ap"); });
    ASSERT_THAT(msg, StartsWith("c.ap: ")) << at;
  }
}

/// Corrupt payloads behind a valid checksum (what a crafted file could hold): decoding either
/// fails with a one-line error or yields a self-consistent optimizer; it never crashes.
TEST(StateErrors, CorruptPayloadsAreValidated) {
  ShardingOptimizer so(small_gpt2(1), mesh_2x2(), no_limit());
  so.pin("transformer.wte.weight", parse_placements("RS(0)"));
  so.get_solution();
  std::string payload = unpack_container(FileKind::kState, state_bytes(so), "x");
  std::mt19937_64 rng(11);
  int rejected = 0;
  for (int t = 0; t < 200; ++t) {
    std::string bad = payload;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      size_t at = rng() % bad.size();
      bad[at] = static_cast<char>(rng() % 3 == 0 ? rng() : (bad[at] ^ (1 << (rng() % 8))));
    }
    std::string file = pack_container(FileKind::kState, bad, 1);
    try {
      ShardingOptimizer x = state_from_bytes(file, "p.ap");
      if (x.solution() && !x.solution_choice().empty()) x.evaluate(x.solution_choice());
    } catch (const std::runtime_error& e) {
      ++rejected;
      ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_GT(rejected, 50);
}

TEST(StateErrors, SemanticChecksNameTheField) {
  ShardingOptimizer so = solved_optimizer();
  StateParts s = decode_state(unpack_container(FileKind::kState, state_bytes(so), "x"), "x");
  auto fails = [&](auto mutate) {
    StateParts t = s;
    mutate(t);
    StateRef r{t.writer_version, &t.graph, &t.mesh, &t.options, &t.constraints,
               t.problem ? &*t.problem : nullptr, t.solution ? &*t.solution : nullptr,
               &t.solution_choice};
    return error_of([&] { decode_state(encode_state(r), "s.ap"); });
  };
  EXPECT_THAT(fails([](StateParts& t) { t.problem->edges[3].v = 100000; }),
              HasSubstr("s.ap: problem.edges[3]: endpoints"));
  EXPECT_THAT(fails([](StateParts& t) { t.problem->edges[0].u = t.problem->edges[0].v; }),
              HasSubstr("self loop"));
  EXPECT_THAT(fails([](StateParts& t) { t.problem->problem.nodes[2].costs.push_back(1); t.problem->problem.nodes[2].usages.push_back(1); }),
              HasSubstr("s.ap: problem.edges"));
  EXPECT_THAT(fails([](StateParts& t) { t.solution_choice[5] = 9999; }), HasSubstr("s.ap: solution_choice[5]: strategy 9999"));
  EXPECT_THAT(fails([](StateParts& t) { t.problem->pnode[1] = 0; }), HasSubstr("s.ap: problem.pnode[1]"));
  EXPECT_THAT(fails([](StateParts& t) { t.graph.nodes[5].inputs.push_back({5000, 0}); }),
              HasSubstr("s.ap: graph.nodes[5]"));
  EXPECT_THAT(fails([](StateParts& t) {
                t.graph.nodes[0].outputs[0].dtype = static_cast<DType>(static_cast<int>(kLastDType) + 1);
              }),
              HasSubstr("s.ap: graph.nodes[0]"));
  EXPECT_THAT(fails([](StateParts& t) { t.constraints[0].node = "nope"; }),
              HasSubstr("s.ap: constraints[0] ('pin:transformer.wte.weight').node: no node named 'nope'"));
  EXPECT_THAT(fails([](StateParts& t) {
                std::vector<Strategy> fewer = t.problem->strategies[0].vec();
                fewer.pop_back();
                t.problem->strategies[0] = std::move(fewer);
              }),
              HasSubstr("strategies but"));
}

TEST(Fingerprint, StableAndComponentWise) {
  ShardingOptimizer a(small_gpt2(1), mesh_2x2(), no_limit());
  ShardingOptimizer b(small_gpt2(1), mesh_2x2(), no_limit());
  EXPECT_EQ(problem_fingerprint(a), problem_fingerprint(b));
  EXPECT_EQ(problem_fingerprint(a).size(), 16u);
  PlannerOptions o = no_limit();
  o.time_limit_s = 5;  // does not change the problem
  o.threads = 2;
  EXPECT_EQ(problem_fingerprint(ShardingOptimizer(small_gpt2(1), mesh_2x2(), o)), problem_fingerprint(a));
  auto fa = fingerprint_parts(a.graph(), a.mesh(), a.options(), a.constraints());
  o.skip_fully_replicated = true;
  Mesh m4({4}, {"dp"}, *hardware_preset("a100"));
  auto fb = fingerprint_parts(small_gpt2(2), m4, o, a.constraints());
  EXPECT_EQ(fa.differences(fb), "graph, mesh, hardware, options");
  b.pin("transformer.wte.weight", parse_placements("RR"));
  EXPECT_EQ(fa.differences(fingerprint_parts(b.graph(), b.mesh(), b.options(), b.constraints())), "constraints");
}

TEST(SolutionFile, PathIsNotStoredInStateFiles) {
  PlannerOptions o = no_limit();
  o.ilp_solution_file = "/tmp/somewhere/else.json";
  o.preload_solution = true;
  ShardingOptimizer so(small_gpt2(1), mesh_2x2(), o);
  ShardingOptimizer back = state_from_bytes(state_bytes(so), "x.ap");
  EXPECT_EQ(back.options().ilp_solution_file, "");
  EXPECT_FALSE(back.options().preload_solution);
  EXPECT_EQ(replay_from_bytes(replay_bytes(so), "x.replay").options().ilp_solution_file, "");
}

TEST(SolutionFile, ReusedWhenTheProblemMatches) {
  std::string dir = ::testing::TempDir() + "/state_solution_file";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/sol.json";
  std::filesystem::remove(path);
  PlannerOptions o = no_limit();
  o.objective = Objective::kAdditive;  // one solve per plan: the file's reuse is what is tested
  o.ilp_solution_file = path;
  o.preload_solution = true;
  ShardingOptimizer first(small_gpt2(1), mesh_2x2(), o);
  Plan solved = first.get_solution();  // no file yet: solves and writes it
  ASSERT_TRUE(std::filesystem::exists(path));
  auto j = nlohmann::json::parse(read_text_file(path));
  EXPECT_EQ(j["fingerprint"], problem_fingerprint(first));

  ShardingOptimizer again(small_gpt2(1), mesh_2x2(), o);
  Plan reused = again.get_solution();
  EXPECT_TRUE(same_bits(reused.objective_us, solved.objective_us));
  EXPECT_TRUE(same_bits(reused.lower_bound_us, solved.lower_bound_us));
  EXPECT_EQ(reused.status, solved.status);
  EXPECT_EQ(again.solution_choice(), first.solution_choice());
  ASSERT_FALSE(reused.warnings.empty());
  EXPECT_THAT(reused.warnings.back(), HasSubstr("reused the solution in " + path));
  bool solved_again = false;
  for (const auto& [name, s] : reused.phase_seconds) solved_again |= name.rfind("solve.", 0) == 0;
  EXPECT_FALSE(solved_again);

  // Another problem: the file is ignored with a warning naming what differs, and rewritten.
  PlannerOptions o2 = o;
  o2.mip_gap = 1e-3;
  ShardingOptimizer other(small_gpt2(1), mesh_2x2(), o2);
  Plan p = other.get_solution();
  ASSERT_TRUE(p.has_solution);
  std::string all;
  for (const auto& w : p.warnings) all += w + "\n";
  EXPECT_THAT(all, HasSubstr("solution file " + path + " ignored: it solves a different problem "
                             "(options differ); solving"));
  EXPECT_EQ(nlohmann::json::parse(read_text_file(path))["fingerprint"], problem_fingerprint(other));

  // A damaged file is ignored, not fatal.
  write_file_atomic(path, "{ not json");
  ShardingOptimizer broken(small_gpt2(1), mesh_2x2(), o);
  Plan b = broken.get_solution();
  EXPECT_TRUE(b.has_solution);
  EXPECT_THAT(b.warnings.back(), HasSubstr("ignored"));
}

}  // namespace
}  // namespace autoshard

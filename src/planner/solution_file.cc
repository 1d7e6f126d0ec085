#include "planner/solution_file.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "ir/file_util.h"
#include "planner/clock.h"
#include "planner/recompute.h"
#include "planner/sharding_optimizer.h"

#ifndef AUTOSHARD_VERSION
#define AUTOSHARD_VERSION "unknown"
#endif

namespace autoshard {

namespace {

/// FNV-1a over a canonical encoding: every value is written with its length or fixed width,
/// so different sequences cannot collide by concatenation.
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ c[i]) * 1099511628211ULL;
  }
  void u64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(b, 8);
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    u64(b);
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  std::string hex() const { return fmt::format("{:016x}", h_); }

 private:
  uint64_t h_ = 1469598103934665603ULL;
};

void hash_meta(Hasher& h, const TensorMeta& m) {
  h.u64(static_cast<uint64_t>(m.dtype));
  h.u64(m.shape.size());
  for (int64_t d : m.shape) h.i64(d);
}

void hash_placements(Hasher& h, const std::vector<Placement>& p) {
  h.u64(p.size());
  for (const Placement& x : p) {
    h.u64(static_cast<uint64_t>(x.kind));
    h.i64(x.is_shard() ? x.dim : x.is_partial() ? static_cast<int64_t>(x.reduce) : 0);
  }
}

std::string hash_graph(const Graph& g) {
  Hasher h;
  h.str(g.name);
  h.u64(g.nodes.size());
  for (const Node& n : g.nodes) {
    h.str(n.name);
    h.u64(static_cast<uint64_t>(n.kind));
    h.str(n.op);
    h.u64(static_cast<uint64_t>(n.phase));
    h.u64(n.inputs.size());
    for (const TensorRef& r : n.inputs) {
      h.i64(r.node);
      h.i64(r.output);
    }
    h.u64(n.outputs.size());
    for (const TensorMeta& m : n.outputs) hash_meta(h, m);
    h.u64(n.attrs.size());
    for (const auto& [key, value] : n.attrs) {
      h.str(key);
      h.u64(value.index());
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, bool>) h.u64(v ? 1 : 0);
            else if constexpr (std::is_same_v<T, int64_t>) h.i64(v);
            else if constexpr (std::is_same_v<T, double>) h.f64(v);
            else if constexpr (std::is_same_v<T, std::string>) h.str(v);
            else {
              h.u64(v.size());
              for (int64_t e : v) h.i64(e);
            }
          },
          value);
    }
    h.str(n.module_path);
    h.str(n.source);
  }
  h.u64(g.grad_pairs.size());
  for (const GradPair& gp : g.grad_pairs) {
    h.i64(gp.param);
    h.i64(gp.grad.node);
    h.i64(gp.grad.output);
  }
  h.u64(g.loss ? 1 : 0);
  if (g.loss) {
    h.i64(g.loss->node);
    h.i64(g.loss->output);
  }
  return h.hex();
}

std::string hash_mesh(const Mesh& m) {
  Hasher h;
  h.u64(static_cast<uint64_t>(m.ndim()));
  for (MeshDimIdx i = 0; i < m.ndim(); ++i) {
    const MeshDim& d = m.dim(i);
    h.str(d.name);
    h.i64(d.size);
    h.u64(d.inter_node ? 1 : 0);
    h.f64(d.busbw_gbps);
    h.f64(d.latency_us);
  }
  h.u64(static_cast<uint64_t>(m.backend()));
  return h.hex();
}

std::string hash_hardware(const Hardware& x) {
  Hasher h;
  h.str(x.name);
  for (double v : {x.peak_bf16_tflops, x.peak_fp32_tflops, x.hbm_gbps, x.nvlink_gbps,
                   x.intra_busbw_gbps, x.inter_busbw_gbps, x.intra_latency_us,
                   x.inter_latency_us, x.base_latency_us, x.efficiency, x.launch_floor_us})
    h.f64(v);
  h.i64(x.memory_bytes);
  h.i64(x.gpus_per_node);
  // Only when they change costs, so fingerprints from before stay.
  if (x.kernels.float8_linear) {
    h.str("float8 linears");
    h.f64(x.peak_fp8_tflops);
  }
  if (x.kernels.compiled) {
    h.str("compiled");
    h.f64(x.compile_memory_speedup);
  }
  return h.hex();
}

std::string hash_options(const PlannerOptions& o) {
  Hasher h;
  h.u64(static_cast<uint64_t>(o.comm_model));
  h.i64(o.memory_limit_bytes);
  h.f64(o.mip_gap);
  h.u64(o.skip_fully_replicated ? 1 : 0);
  h.u64(o.cluster ? 1 : 0);
  h.u64(o.require_divisible ? 1 : 0);
  h.u64(static_cast<uint64_t>(o.optimizer.kind));
  h.u64(o.optimizer.sgd_momentum ? 1 : 0);
  h.u64(static_cast<uint64_t>(o.recompute));
  h.u64(o.overlap ? 1 : 0);
  h.f64(o.overlap_discount);
  h.u64(o.objective == Objective::kOverlap ? 1 : 0);
  if (!o.context_parallel) h.str("no context parallelism");  // fingerprints from before stay
  if (o.shard_orders) h.str("shard orders");                 // likewise
  if (o.optimizer_cost_scale != 1.0) h.f64(o.optimizer_cost_scale);  // older files: 1
  if (o.params_gathered_once) h.str("params gathered once");           // older files: per use
  if (o.inflight_microbatches != 1.0) {  // older files: 1
    h.str("inflight");
    h.f64(o.inflight_microbatches);
  }
  if (o.boundary_memory_price > 0) {  // older files: none
    h.str("boundary memory price");
    h.f64(o.boundary_memory_price);
  }
  for (const auto& c : o.output_costs) {  // older files: none
    h.str(c.node);
    h.i64(c.output);
    h.f64(c.latency_us);
    h.f64(c.us_per_byte);
  }
  return h.hex();
}

std::string hash_constraints(const std::vector<Constraint>& cs) {
  Hasher h;
  h.u64(cs.size());
  for (const Constraint& c : cs) {
    h.str(c.name);
    h.u64(static_cast<uint64_t>(c.kind));
    h.str(c.node);
    hash_placements(h, c.output);
    h.u64(c.inputs ? 1 : 0);
    if (c.inputs) {
      h.u64(c.inputs->size());
      for (const auto& in : *c.inputs) hash_placements(h, in);
    }
    h.f64(c.low);
    h.f64(c.high);
  }
  return h.hex();
}

}  // namespace

std::string ProblemFingerprint::combined() const {
  Hasher h;
  for (const std::string* s : {&graph, &mesh, &hardware, &options, &constraints}) h.str(*s);
  return h.hex();
}

std::string ProblemFingerprint::differences(const ProblemFingerprint& o) const {
  std::string out;
  auto add = [&](bool differs, std::string_view name) {
    if (differs) out += fmt::format("{}{}", out.empty() ? "" : ", ", name);
  };
  add(graph != o.graph, "graph");
  add(mesh != o.mesh, "mesh");
  add(hardware != o.hardware, "hardware");
  add(options != o.options, "options");
  add(constraints != o.constraints, "constraints");
  return out;
}

ProblemFingerprint fingerprint_parts(const Graph& g, const Mesh& mesh, const PlannerOptions& o,
                                     const std::vector<Constraint>& constraints) {
  return {hash_graph(g), hash_mesh(mesh), hash_hardware(mesh.hardware()), hash_options(o),
          hash_constraints(constraints)};
}

std::string problem_fingerprint(const ShardingOptimizer& opt) {
  return fingerprint_parts(opt.graph(), opt.mesh(), opt.options(), opt.constraints()).combined();
}

void save_solution_file(const ShardingOptimizer& opt, const Plan& plan,
                        const std::vector<StrategyIdx>& choice, const std::string& path) {
  const BuiltProblem* bp = opt.built_problem();
  if (!bp || static_cast<PNodeIdx>(choice.size()) != bp->problem.num_nodes())
    throw std::runtime_error(fmt::format("{}: cannot write the solution file: no solved problem", path));
  ProblemFingerprint fp = fingerprint_parts(opt.graph(), opt.mesh(), opt.options(), opt.constraints());
  nlohmann::ordered_json j;
  j["format"] = "autoshard-solution";
  j["version"] = kSolutionFileVersion;
  j["autoshard"] = AUTOSHARD_VERSION;
  j["fingerprint"] = fp.combined();
  // Which problem the choice indexes: --recompute if-needed builds recomputation nodes only
  // when memory binds.
  j["problem_recompute"] = std::string(recompute_policy_name(opt.built_policy()));
  j["components"] = {{"graph", fp.graph}, {"mesh", fp.mesh}, {"hardware", fp.hardware},
                     {"options", fp.options}, {"constraints", fp.constraints}};
  j["solver"] = {{"status", std::string(solve_status_name(plan.status))},
                 {"objective_us", plan.objective_us},
                 {"lower_bound_us", plan.lower_bound_us},
                 {"gap", plan.gap},
                 {"clustered_nodes", plan.clustered_nodes},
                 {"layer_clusters", plan.layer_clusters},
                 {"reduced_nodes", plan.reduced_nodes},
                 {"reduced_edges", plan.reduced_edges},
                 {"mip_variables", plan.mip_variables}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (NodeIdx i = 0; i < opt.graph().size(); ++i) {
    PNodeIdx v = bp->pnode[static_cast<size_t>(i)];
    if (v < 0) continue;
    StrategyIdx q = choice[static_cast<size_t>(v)];
    nodes.push_back({{"node", opt.graph().node(i).name},
                     {"strategy", q},
                     {"name", bp->strategies[static_cast<size_t>(v)][static_cast<size_t>(q)].name()}});
  }
  j["nodes"] = std::move(nodes);
  j["choice"] = choice;
  write_file_atomic(path, j.dump(1) + "\n");
}

SolutionFileLoad try_load_solution_file(ShardingOptimizer& opt, const std::string& path) {
  SolutionFileLoad out;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return out;  // first run: nothing to reuse yet
  auto ignore = [&](const std::string& why) {
    out.warning = one_line(fmt::format("solution file {} ignored: {}; solving", path, why));
    return out;
  };
  nlohmann::json j;
  try {
    j = parse_json_text(read_text_file(path), path);
  } catch (const std::exception& e) {
    return ignore(e.what());
  }
  try {
    if (j.value("format", "") != "autoshard-solution") return ignore("not an autoshard solution file");
    if (j.at("version").get<int>() > kSolutionFileVersion)
      return ignore(fmt::format("version {} is newer than this autoshard reads ({})",
                                j.at("version").get<int>(), kSolutionFileVersion));
    const auto& c = j.at("components");
    ProblemFingerprint saved{c.at("graph").get<std::string>(), c.at("mesh").get<std::string>(),
                             c.at("hardware").get<std::string>(), c.at("options").get<std::string>(),
                             c.at("constraints").get<std::string>()};
    ProblemFingerprint now = fingerprint_parts(opt.graph(), opt.mesh(), opt.options(), opt.constraints());
    std::string diff = now.differences(saved);
    if (!diff.empty()) return ignore(fmt::format("it solves a different problem ({} differ)", diff));

    auto t0 = std::chrono::steady_clock::now();
    if (opt.options().recompute == RecomputePolicy::kIfNeeded)
      opt.set_recompute_escalated(j.value("problem_recompute", "none") == "auto");
    const BuiltProblem& bp = opt.problem();
    const auto& saved_choice = j.at("choice");
    std::vector<StrategyIdx> choice(static_cast<size_t>(bp.problem.num_nodes()), -1);
    bool same_size = saved_choice.is_array() && saved_choice.size() == choice.size();
    bool as_saved = same_size;  // every planned node kept its saved index
    for (const auto& e : j.at("nodes")) {
      const std::string name = e.at("node").get<std::string>();
      auto i = opt.graph().find(name);
      if (!i || bp.pnode[static_cast<size_t>(*i)] < 0) return ignore(fmt::format("node '{}' is not planned here", name));
      PNodeIdx v = bp.pnode[static_cast<size_t>(*i)];
      const auto& strats = bp.strategies[static_cast<size_t>(v)];
      const std::string want = e.at("name").get<std::string>();
      StrategyIdx q = e.at("strategy").get<StrategyIdx>();
      if (q < 0 || q >= static_cast<StrategyIdx>(strats.size()) || strats[static_cast<size_t>(q)].name() != want) {
        as_saved = false;
        q = -1;
        for (size_t k = 0; k < strats.size() && q < 0; ++k)
          if (strats[k].name() == want) q = static_cast<StrategyIdx>(k);
        if (q < 0) return ignore(fmt::format("node '{}' has no strategy '{}' in this build", name, want));
      }
      choice[static_cast<size_t>(v)] = q;
    }
    for (size_t v = 0; v < choice.size(); ++v) {
      if (choice[v] >= 0) continue;
      // Auxiliary nodes (parameter-memory shadows, recomputation): the saved assignment.
      if (!as_saved) return ignore("its auxiliary problem nodes do not line up with this build");
      StrategyIdx q = saved_choice[v].get<StrategyIdx>();
      if (q < 0 || q >= bp.problem.nodes[v].num_strategies()) return ignore(fmt::format("bad assignment of problem node {}", v));
      choice[v] = q;
    }
    if (bp.problem.usage_limit >= 0 && peak_usage(bp.problem, choice) > bp.problem.usage_limit)
      return ignore("its plan exceeds the memory limit");
    Plan plan = opt.evaluate(choice);
    const auto& s = j.at("solver");
    const std::string status = s.at("status").get<std::string>();
    for (SolveStatus st : {SolveStatus::kOptimal, SolveStatus::kFeasible, SolveStatus::kInfeasible, SolveStatus::kTimedOut})
      if (solve_status_name(st) == status) plan.status = st;
    plan.lower_bound_us = s.at("lower_bound_us").get<double>();
    plan.gap = s.at("gap").get<double>();
    plan.clustered_nodes = s.at("clustered_nodes").get<int32_t>();
    plan.layer_clusters = s.at("layer_clusters").get<int32_t>();
    plan.reduced_nodes = s.at("reduced_nodes").get<int32_t>();
    plan.reduced_edges = s.at("reduced_edges").get<int32_t>();
    plan.mip_variables = s.at("mip_variables").get<int64_t>();
    plan.checked = opt.options().run_checks;  // evaluate() recomputed cost and memory
    plan.phase_seconds.push_back(
        {"solution file", seconds_since(t0)});
    plan.warnings.push_back(fmt::format("reused the solution in {} (fingerprint {}): not solved again",
                                        path, j.at("fingerprint").get<std::string>()));
    out.plan = std::move(plan);
    out.choice = std::move(choice);
  } catch (const nlohmann::json::exception& e) {
    return ignore(fmt::format("malformed: {}", e.what()));
  }
  return out;
}

}  // namespace autoshard

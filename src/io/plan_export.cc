#include "io/plan_export.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <stdexcept>

#include "io/placements_json.h"
#include "io/plan_json.h"
#include "io/state.h"
#include "planner/cluster.h"
#include "planner/problem_builder.h"
#include "planner/whatif.h"
#include "problem/iopddl.h"
#include "solver/memory_rows.h"

namespace autoshard {

namespace {

/// Repeated-layer classes per graph node (only classes with several members get an id; -1 and
/// kNoNode elsewhere).
struct ClusterIds {
  std::vector<int32_t> id;
  std::vector<NodeIdx> root;  ///< the class's first member
};

ClusterIds cluster_ids(ShardingOptimizer& opt) {
  const Graph& g = opt.graph();
  const BuiltProblem& bp = opt.problem();
  ClusterIds out{std::vector<int32_t>(static_cast<size_t>(g.size()), -1),
                 std::vector<NodeIdx>(static_cast<size_t>(g.size()), kNoNode)};
  if (!opt.options().cluster) return out;
  ClusteredProblem cp = cluster_problem(g, bp);
  std::vector<int32_t> members(static_cast<size_t>(cp.problem.num_nodes()), 0);
  std::vector<NodeIdx> first(static_cast<size_t>(cp.problem.num_nodes()), kNoNode);
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0) continue;
    const PNodeIdx c = cp.class_of[static_cast<size_t>(v)];
    ++members[static_cast<size_t>(c)];
    if (first[static_cast<size_t>(c)] == kNoNode) first[static_cast<size_t>(c)] = i;
  }
  // Ids are dense in order of the class's first member.
  std::map<PNodeIdx, int32_t> dense;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (v < 0) continue;
    const PNodeIdx c = cp.class_of[static_cast<size_t>(v)];
    if (members[static_cast<size_t>(c)] < 2) continue;
    auto [it, fresh] = dense.try_emplace(c, static_cast<int32_t>(dense.size()));
    out.id[static_cast<size_t>(i)] = it->second;
    out.root[static_cast<size_t>(i)] = first[static_cast<size_t>(c)];
  }
  return out;
}

/// Cost of every tensor use under the plan, by (consumer, slot).
using UseCosts = std::map<std::pair<NodeIdx, int32_t>, double>;

UseCosts use_costs(const BuiltProblem& bp, const std::vector<StrategyIdx>& choice) {
  UseCosts use_cost;
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& o = bp.edge_origin[k];
    if (o.slot < 0) continue;
    const BuiltProblem::Edge& e = bp.edges[k];
    const size_t nv = bp.problem.nodes[static_cast<size_t>(e.v)].costs.size();
    use_cost[{o.consumer, o.slot}] +=
        (*e.costs)[static_cast<size_t>(choice[static_cast<size_t>(e.u)]) * nv +
                   static_cast<size_t>(choice[static_cast<size_t>(e.v)])];
  }
  return use_cost;
}

/// Node i's inputs: each producer, both placements and the cost of the use.
nlohmann::ordered_json inputs_json(const Graph& g, const Plan& plan, NodeIdx i, const UseCosts& use_cost) {
  const Node& n = g.node(i);
  const auto& np = plan.nodes[static_cast<size_t>(i)];
  nlohmann::ordered_json ins = nlohmann::ordered_json::array();
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const TensorRef r = n.inputs[k];
    const auto& up = plan.nodes[static_cast<size_t>(r.node)];
    auto it = use_cost.find({i, static_cast<int32_t>(k)});
    nlohmann::ordered_json in;
    in["name"] = g.node(r.node).name;
    if (r.output != 0) in["output_index"] = r.output;
    in["src_placement"] = up ? up->chosen.outputs.at(static_cast<size_t>(r.output)).to_string() : "";
    in["dst_placement"] = k < np->chosen.inputs.size() ? np->chosen.inputs[k].to_string() : "";
    in["comm_cost"] = number_or_null(it == use_cost.end() ? 0.0 : it->second);
    in["transition_cost"] = 0.0;
    ins.push_back(std::move(in));
  }
  return ins;
}

/// The output's dtype and shape: plain values for one output, arrays for several.
void outputs_json(const Node& n, nlohmann::ordered_json& x) {
  if (n.outputs.size() == 1) {
    x["dtype"] = std::string(dtype_name(n.out().dtype));
    x["shape"] = n.out().shape;
    return;
  }
  nlohmann::ordered_json dts = nlohmann::ordered_json::array(), shs = nlohmann::ordered_json::array();
  for (const TensorMeta& m : n.outputs) {
    dts.push_back(std::string(dtype_name(m.dtype)));
    shs.push_back(m.shape);
  }
  x["dtype"] = std::move(dts);
  x["shape"] = std::move(shs);
}

/// One entry of "nodes" (plan.nodes[i] is set).
nlohmann::ordered_json export_node_json(ShardingOptimizer& opt, const Plan& plan, const std::vector<StrategyIdx>& choice,
                                 const ClusterIds& clusters, const UseCosts& use_cost, NodeIdx i) {
  const Graph& g = opt.graph();
  const BuiltProblem& bp = opt.problem();
  const auto& np = plan.nodes[static_cast<size_t>(i)];
  const Node& n = g.node(i);
  const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
  const bool placeholder = n.kind == NodeKind::kInput || n.kind == NodeKind::kParameter ||
                           n.kind == NodeKind::kBuffer;
  nlohmann::ordered_json x;
  x["name"] = n.name;
  x["op"] = placeholder ? std::string("placeholder") : n.op;
  x["phase"] = std::string(phase_name(n.phase));
  x["placement"] = output_spec_string(np->chosen);
  x["compute_cost"] = number_or_null(np->compute_us);
  x["transition_cost"] = 0.0;
  x["inputs"] = inputs_json(g, plan, i, use_cost);
  if (placeholder) x["placeholder_kind"] = std::string(node_kind_name(n.kind));
  outputs_json(n, x);
  if (!n.source.empty()) x["source"] = n.source;
  x["module_path"] = n.module_path;
  const int32_t cid = clusters.id[static_cast<size_t>(i)];
  const NodeIdx croot = clusters.root[static_cast<size_t>(i)];
  x["cluster_id"] = cid >= 0 ? nlohmann::ordered_json(cid) : nlohmann::ordered_json(nullptr);
  x["cluster_root"] = croot != kNoNode ? nlohmann::ordered_json(g.node(croot).name) : nlohmann::ordered_json(nullptr);
  // autoshard's additions.
  x["strategy"] = np->chosen.name();
  if (const ContextParallel& cp = np->chosen.cp; cp.active())
    x["context_parallel"] = {{"mesh_dim", opt.mesh().dim(cp.mesh_dim).name},
                             {"kind", std::string(cp_kind_name(cp.kind))},
                             {"load_balance", cp.load_balance},
                             {"op_comm_us", bp.op_comm_us(v, choice[static_cast<size_t>(v)])}};
  x["comm_cost"] = number_or_null(np->comm_us);
  x["memory_bytes"] = bp.problem.nodes[static_cast<size_t>(v)].usages[static_cast<size_t>(choice[static_cast<size_t>(v)])];
  return x;
}

nlohmann::ordered_json export_summary_json(const Plan& plan) {
  nlohmann::ordered_json s;
  // AutoParallel's total is the sum of its parts: the additive cost.
  s["total"] = number_or_null(plan.additive_us);
  s["comm"] = number_or_null(plan.comm_us);
  s["compute"] = number_or_null(plan.compute_us);
  s["transition"] = 0.0;
  s["objective_us"] = number_or_null(plan.objective_us);
  s["objective"] = plan.overlap_aware ? "overlap" : "additive";
  s["additive_us"] = number_or_null(plan.additive_us);
  s["overlapped_us"] = number_or_null(plan.overlapped_us);
  s["lower_bound_us"] = number_or_null(plan.lower_bound_us);
  s["gap"] = number_or_null(plan.gap);
  s["status"] = std::string(solve_status_name(plan.status));
  s["compute_us"] = number_or_null(plan.compute_us);
  s["comm_us"] = number_or_null(plan.comm_us);
  s["recompute_us"] = number_or_null(plan.recompute_us);
  s["peak_memory_bytes"] = plan.peak_memory_bytes;
  s["memory_limit_bytes"] = plan.memory_limit_bytes;
  s["checked"] = plan.checked;
  s["warnings"] = plan.warnings;
  return s;
}

}  // namespace

nlohmann::ordered_json plan_to_json(ShardingOptimizer& opt, const Plan& plan) {
  if (!plan.has_solution)
    throw std::runtime_error(fmt::format("plan export: no solution (status {})", solve_status_name(plan.status)));
  const Graph& g = opt.graph();
  const Mesh& mesh = opt.mesh();
  const std::vector<StrategyIdx> choice = plan_choice(opt, plan);
  const ClusterIds clusters = cluster_ids(opt);
  const UseCosts use_cost = use_costs(opt.problem(), choice);

  nlohmann::ordered_json j;
  j["format"] = "autoshard-plan";
  j["version"] = 1;
  j["autoshard_version"] = std::string(autoshard_version());
  j["graph"] = g.name;
  j["graph_fingerprint"] = graph_fingerprint(g);
  j["mesh"] = {{"shape", mesh.shape()}, {"dim_names", mesh.names()}, {"hardware", mesh.hardware().name}};
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (plan.nodes[static_cast<size_t>(i)]) nodes.push_back(export_node_json(opt, plan, choice, clusters, use_cost, i));
  j["nodes"] = std::move(nodes);
  j["summary"] = export_summary_json(plan);
  return j;
}

std::string plan_json_text(ShardingOptimizer& opt, const Plan& plan) {
  return plan_to_json(opt, plan).dump(1) + "\n";
}

std::string mps_node_column(PNodeIdx v, StrategyIdx q) { return fmt::format("s{}_{}", v, q); }

namespace {

/// The MIP as MPS sections: columns in MPS order (all entries of one column together), node
/// columns first, then edge columns.
struct MpsModel {
  struct Entry {
    std::string row;
    double coef;
  };
  struct Column {
    std::string name;
    double cost = 0;
    bool binary = false;
    bool fixed_zero = false;
    std::vector<Entry> entries;
  };
  const Problem& p;
  std::vector<std::string> eq_rows;  // = rhs
  std::vector<double> eq_rhs;
  std::vector<std::vector<size_t>> node_cols;
  std::vector<Column> cols;
  std::vector<Column> edge_cols;
  std::vector<std::string> mem_rows;
  std::vector<double> mem_rhs;

  explicit MpsModel(const Problem& p_) : p(p_), node_cols(static_cast<size_t>(p_.num_nodes())) {}

  Column& node_col(PNodeIdx v, StrategyIdx q) {
    return cols[node_cols[static_cast<size_t>(v)][static_cast<size_t>(q)]];
  }
  void add_eq_row(const std::string& row, double rhs) {
    eq_rows.push_back(row);
    eq_rhs.push_back(rhs);
  }
  void add_nodes();
  void add_edge(EdgeIdx k);
  void add_memory_rows();
  std::string text() const;
};

/// A binary column per strategy (forbidden ones fixed at zero), one row choosing one.
void MpsModel::add_nodes() {
  for (PNodeIdx v = 0; v < p.num_nodes(); ++v) {
    const ProblemNode& n = p.nodes[static_cast<size_t>(v)];
    const std::string row = fmt::format("n{}", v);
    add_eq_row(row, 1);
    for (StrategyIdx q = 0; q < n.num_strategies(); ++q) {
      Column c;
      c.name = mps_node_column(v, q);
      c.binary = true;
      const double cost = n.costs[static_cast<size_t>(q)];
      c.fixed_zero = !std::isfinite(cost);
      c.cost = c.fixed_zero ? 0 : cost;
      c.entries.push_back({row, 1});
      node_cols[static_cast<size_t>(v)].push_back(cols.size());
      cols.push_back(std::move(c));
    }
  }
}

/// Edge k's pair columns and their marginal rows (one per strategy of either end).
void MpsModel::add_edge(EdgeIdx k) {
  const ProblemEdge& e = p.edges[static_cast<size_t>(k)];
  bool all_zero = true;
  for (Cost c : e.costs) all_zero = all_zero && c == 0;
  if (all_zero) return;  // contributes nothing to any assignment
  const StrategyIdx nu = p.nodes[static_cast<size_t>(e.u)].num_strategies();
  const StrategyIdx nv = p.nodes[static_cast<size_t>(e.v)].num_strategies();
  for (StrategyIdx a = 0; a < nu; ++a) {
    const std::string row = fmt::format("a{}_{}", k, a);
    add_eq_row(row, 0);
    node_col(e.u, a).entries.push_back({row, -1});
  }
  for (StrategyIdx b = 0; b < nv; ++b) {
    const std::string row = fmt::format("b{}_{}", k, b);
    add_eq_row(row, 0);
    node_col(e.v, b).entries.push_back({row, -1});
  }
  for (StrategyIdx a = 0; a < nu; ++a)
    for (StrategyIdx b = 0; b < nv; ++b) {
      const Cost c = p.edge_cost(e, a, b);
      if (!std::isfinite(c)) continue;  // forbidden pair: no column, so it is 0
      Column col;
      col.name = fmt::format("e{}_{}_{}", k, a, b);
      col.cost = c;
      col.entries.push_back({fmt::format("a{}_{}", k, a), 1});
      col.entries.push_back({fmt::format("b{}_{}", k, b), 1});
      edge_cols.push_back(std::move(col));
    }
}

/// Memory rows at the maximal live sets (in MiB: dividing by 2^20 is exact).
void MpsModel::add_memory_rows() {
  if (p.usage_limit < 0) return;
  const double mib = 1048576.0;
  std::vector<MemoryRow> rows = memory_rows(p, {}, /*drop_slack=*/false);
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string row = fmt::format("m{}", r);
    mem_rows.push_back(row);
    mem_rhs.push_back(static_cast<double>(p.usage_limit - rows[r].offset) / mib);
    for (PNodeIdx v : rows[r].nodes) {
      const ProblemNode& n = p.nodes[static_cast<size_t>(v)];
      for (StrategyIdx q = 0; q < n.num_strategies(); ++q)
        if (n.usages[static_cast<size_t>(q)] != 0)
          node_col(v, q).entries.push_back({row, static_cast<double>(n.usages[static_cast<size_t>(q)]) / mib});
    }
  }
}

std::string MpsModel::text() const {
  std::string out;
  out += "NAME          autoshard\n";
  out += "ROWS\n N  obj\n";
  for (const std::string& r : eq_rows) out += fmt::format(" E  {}\n", r);
  for (const std::string& r : mem_rows) out += fmt::format(" L  {}\n", r);
  out += "COLUMNS\n";
  auto write_col = [&](const Column& c) {
    if (c.cost != 0) out += fmt::format("    {}  obj  {}\n", c.name, c.cost);
    for (const Entry& e : c.entries) out += fmt::format("    {}  {}  {}\n", c.name, e.row, e.coef);
  };
  out += "    MARKER  'MARKER'  'INTORG'\n";
  for (const Column& c : cols) write_col(c);
  out += "    MARKER  'MARKER'  'INTEND'\n";
  for (const Column& c : edge_cols) write_col(c);
  out += "RHS\n";
  for (size_t r = 0; r < eq_rows.size(); ++r)
    if (eq_rhs[r] != 0) out += fmt::format("    rhs  {}  {}\n", eq_rows[r], eq_rhs[r]);
  for (size_t r = 0; r < mem_rows.size(); ++r) out += fmt::format("    rhs  {}  {}\n", mem_rows[r], mem_rhs[r]);
  out += "BOUNDS\n";
  for (const Column& c : cols)
    out += c.fixed_zero ? fmt::format(" FX bnd  {}  0\n", c.name) : fmt::format(" BV bnd  {}\n", c.name);
  for (const Column& c : edge_cols) out += fmt::format(" UP bnd  {}  1\n", c.name);
  out += "ENDATA\n";
  return out;
}

}  // namespace

std::string write_mps(ShardingOptimizer& opt) {
  const Problem p = materialize_edges(opt.problem());
  MpsModel model(p);
  model.add_nodes();
  for (EdgeIdx k = 0; k < p.num_edges(); ++k) model.add_edge(k);
  model.add_memory_rows();
  return model.text();
}

Problem iopddl_problem(ShardingOptimizer& opt) {
  Problem p = materialize_edges(opt.problem());
  p.name = fmt::format("{} on {} (costs in ps)", opt.graph().name, opt.mesh().describe());
  auto scale = [](Cost c) { return std::isfinite(c) ? std::round(c * kIopddlCostScale) : c; };
  for (ProblemNode& n : p.nodes)
    for (Cost& c : n.costs) c = scale(c);
  for (ProblemEdge& e : p.edges)
    for (Cost& c : e.costs) c = scale(c);
  return p;
}

void write_problem_iopddl(ShardingOptimizer& opt, const std::string& path) {
  write_iopddl_json(iopddl_problem(opt), path);
}

}  // namespace autoshard

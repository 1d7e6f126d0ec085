#include "planner/whatif.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "planner/problem_builder.h"

namespace autoshard {

namespace {

/// Output specs as DTensor strings: "S(0)R" for one output, "(S(0)R, RR)" for several (the
/// placements JSON's form, repeated here because the planner sits below io).
std::string outputs_string(const Strategy& s) {
  if (s.outputs.size() == 1) return s.outputs[0].to_string();
  std::string r = "(";
  for (size_t k = 0; k < s.outputs.size(); ++k) r += (k ? ", " : "") + s.outputs[k].to_string();
  return r + ")";
}

bool same_specs(const Strategy& a, const Strategy& b) {
  if (a.outputs.size() != b.outputs.size() || a.inputs.size() != b.inputs.size()) return false;
  for (size_t k = 0; k < a.outputs.size(); ++k)
    if (a.outputs[k].placements != b.outputs[k].placements) return false;
  for (size_t k = 0; k < a.inputs.size(); ++k)
    if (a.inputs[k].placements != b.inputs[k].placements) return false;
  return true;
}

std::string op_label(const Node& n) {
  return n.kind == NodeKind::kOp ? n.op : std::string(node_kind_name(n.kind));
}

/// Times in us below 10 ms, else in ms (the step times of large models are ~10^5 us).
std::string us(double v) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : "-inf";
  if (std::abs(v) >= 1e4) return fmt::format("{:.3f} ms", v / 1e3);
  return fmt::format("{:.3f} us", v);
}

std::string signed_us(double v) {
  if (!std::isfinite(v)) return v > 0 ? "+inf" : "-inf";
  if (std::abs(v) >= 1e4) return fmt::format("{:+.3f} ms", v / 1e3);
  return fmt::format("{:+.3f} us", v);
}

std::string mib(int64_t b) { return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20)); }

}  // namespace

// ---- ShardingOptimizer's what-if members --------------------------------------------------

std::vector<std::string> ShardingOptimizer::add_node_constraint(
    const std::string& node, const std::vector<Placement>& output,
    std::optional<std::vector<std::vector<Placement>>> inputs) {
  return {pin(node, output, std::move(inputs))};
}

void ShardingOptimizer::remove_constraints(const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (std::none_of(constraints_.begin(), constraints_.end(),
                     [&](const Constraint& c) { return c.name == n; }))
      throw std::runtime_error(fmt::format("no constraint named '{}'", n));
  for (const std::string& n : names) remove_constraint(n);
}

Plan ShardingOptimizer::resolve() {
  if (solution_ && solution_->has_solution) {
    // Strategy indices shift when constraints filter strategies: find the previous choices by
    // their specs in the rebuilt problem; a node whose choice is gone starts at its first one.
    std::vector<std::optional<Strategy>> wanted(static_cast<size_t>(graph_.size()));
    for (NodeIdx i = 0; i < graph_.size(); ++i)
      if (const auto& np = solution_->nodes[static_cast<size_t>(i)]) wanted[static_cast<size_t>(i)] = np->chosen;
    std::vector<StrategyIdx> choice = match_strategies(wanted);
    for (StrategyIdx& c : choice) c = std::max<StrategyIdx>(c, 0);
    set_warm_start(std::move(choice));
  }
  return get_solution();
}

// ---- plans and layers ----------------------------------------------------------------------

std::vector<StrategyIdx> plan_choice(ShardingOptimizer& opt, const Plan& plan) {
  const Graph& g = opt.graph();
  const BuiltProblem& bp = opt.problem();
  if (plan.nodes.size() != static_cast<size_t>(g.size()))
    throw std::runtime_error("the plan is for another graph (node count differs)");
  std::vector<std::optional<Strategy>> wanted(static_cast<size_t>(g.size()));
  for (NodeIdx i = 0; i < g.size(); ++i)
    if (const auto& np = plan.nodes[static_cast<size_t>(i)]) wanted[static_cast<size_t>(i)] = np->chosen;
  std::vector<StrategyIdx> choice = opt.match_strategies(wanted);
  // The plan's own indices are exact (duplicate specs could match an earlier twin).
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
    if (!np || v < 0) continue;
    const auto& strats = bp.strategies[static_cast<size_t>(v)];
    if (np->strategy >= 0 && static_cast<size_t>(np->strategy) < strats.size() &&
        same_specs(strats[static_cast<size_t>(np->strategy)], np->chosen))
      choice[static_cast<size_t>(v)] = np->strategy;
  }
  const std::vector<StrategyIdx> stored = opt.solution_choice();
  if (stored.size() == choice.size()) {
    // Auxiliary nodes (recomputation decisions) are not in the plan: take the stored ones
    // when the plan is the stored solution.
    bool same = true;
    for (NodeIdx i = 0; same && i < g.size(); ++i) {
      const PNodeIdx v = bp.pnode[static_cast<size_t>(i)];
      if (v >= 0) same = stored[static_cast<size_t>(v)] == choice[static_cast<size_t>(v)];
    }
    if (same) return stored;
  }
  for (size_t v = 0; v < choice.size(); ++v)
    if (choice[v] < 0)
      throw std::runtime_error(fmt::format("the plan has no strategy for problem node {} ({})", v,
                                           g.node(bp.graph_node[v]).name));
  return choice;
}

std::string layer_of(const Node& n) {
  const std::string& m = n.module_path;
  if (m.empty()) return "(no module)";
  size_t start = 0;
  while (start <= m.size()) {
    size_t dot = m.find('.', start);
    std::string_view part(m.data() + start, (dot == std::string::npos ? m.size() : dot) - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return m.substr(0, start + part.size());
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return m.substr(0, m.find('.'));
}

// ---- diff ------------------------------------------------------------------------------------

SolutionDiff diff_solutions(ShardingOptimizer& opt, const Plan& a, const Plan& b) {
  const Graph& g = opt.graph();
  if (!a.has_solution || !b.has_solution) throw std::runtime_error("diff: both plans need a solution");
  if (a.nodes.size() != static_cast<size_t>(g.size()) || b.nodes.size() != a.nodes.size())
    throw std::runtime_error("diff: the plans are for different graphs");
  SolutionDiff d;
  d.objective_a_us = a.objective_us;
  d.objective_b_us = b.objective_us;
  d.delta_us = b.objective_us - a.objective_us;
  d.compute_delta_us = b.compute_us - a.compute_us;
  d.comm_delta_us = b.comm_us - a.comm_us;
  d.peak_a_bytes = a.peak_memory_bytes;
  d.peak_b_bytes = b.peak_memory_bytes;
  std::map<std::string, size_t> layer_index;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& na = a.nodes[static_cast<size_t>(i)];
    const auto& nb = b.nodes[static_cast<size_t>(i)];
    if (!na || !nb) continue;
    NodeChange c;
    c.before = na->chosen.name();
    c.after = nb->chosen.name();
    c.placement_changed = c.before != c.after;
    c.compute_delta_us = nb->compute_us - na->compute_us;
    c.comm_delta_us = nb->comm_us - na->comm_us;
    if (!c.placement_changed && c.compute_delta_us == 0 && c.comm_delta_us == 0) continue;
    const Node& n = g.node(i);
    c.node = n.name;
    c.op = op_label(n);
    c.module_path = n.module_path;
    if (c.placement_changed) ++d.placements_changed;
    const std::string layer = layer_of(n);
    auto [it, fresh] = layer_index.try_emplace(layer, d.layers.size());
    if (fresh) d.layers.push_back(LayerChanges{layer, {}, 0});
    LayerChanges& lc = d.layers[it->second];
    lc.delta_us += c.compute_delta_us + c.comm_delta_us;
    lc.nodes.push_back(std::move(c));
  }
  return d;
}

std::string format_diff(const SolutionDiff& d, size_t max_nodes) {
  std::string r;
  r += fmt::format("objective: {} -> {} ({}: compute {}, communication {})\n", us(d.objective_a_us),
                   us(d.objective_b_us), signed_us(d.delta_us), signed_us(d.compute_delta_us),
                   signed_us(d.comm_delta_us));
  r += fmt::format("peak memory: {} -> {}\n", mib(d.peak_a_bytes), mib(d.peak_b_bytes));
  r += fmt::format("{} node placements changed", d.placements_changed);
  if (d.layers.empty()) return r + "\n";
  r += fmt::format(" in {} layer/module group{}:\n", d.layers.size(), d.layers.size() == 1 ? "" : "s");
  size_t printed = 0, total = 0;
  for (const LayerChanges& lc : d.layers) total += lc.nodes.size();
  for (const LayerChanges& lc : d.layers) {
    r += fmt::format("  {}  ({} nodes, {})\n", lc.layer, lc.nodes.size(), signed_us(lc.delta_us));
    for (const NodeChange& c : lc.nodes) {
      if (max_nodes > 0 && printed >= max_nodes) break;
      ++printed;
      r += fmt::format("    {:<36} {:<20} {} -> {}  compute {}, comm {}\n", c.node, c.op,
                       c.placement_changed ? c.before : "(same) " + c.before, c.after,
                       signed_us(c.compute_delta_us), signed_us(c.comm_delta_us));
    }
  }
  if (printed < total) r += fmt::format("  ... {} more changed nodes\n", total - printed);
  return r;
}

// ---- one node's costs -----------------------------------------------------------------------

NodeCosts node_costs(ShardingOptimizer& opt, const std::string& node) {
  const Graph& g = opt.graph();
  auto idx = g.find(node);
  if (!idx) throw std::runtime_error(fmt::format("no node named '{}' in graph {}", node, g.name));
  if (!opt.solution()) opt.get_solution();
  const BuiltProblem& bp = opt.problem();
  const PNodeIdx v = bp.pnode[static_cast<size_t>(*idx)];
  if (v < 0) throw std::runtime_error(fmt::format("node '{}' is an output node: it has no strategies", node));
  std::vector<StrategyIdx> choice;
  if (opt.solution()->has_solution) choice = plan_choice(opt, *opt.solution());
  const Node& n = g.node(*idx);
  const ProblemNode& pn = bp.problem.nodes[static_cast<size_t>(v)];
  const auto& strats = bp.strategies[static_cast<size_t>(v)];
  NodeCosts c;
  c.node = n.name;
  c.op = op_label(n);
  c.module_path = n.module_path;
  c.chosen = choice.empty() ? -1 : choice[static_cast<size_t>(v)];
  for (size_t q = 0; q < strats.size(); ++q) {
    StrategyCost s;
    s.index = static_cast<StrategyIdx>(q);
    s.name = strats[q].name();
    s.output = outputs_string(strats[q]);
    s.compute_us = pn.costs[q];
    s.memory_bytes = pn.usages[q];
    s.chosen = static_cast<StrategyIdx>(q) == c.chosen;
    c.strategies.push_back(std::move(s));
  }
  for (size_t k = 0; k < bp.edges.size(); ++k) {
    const auto& o = bp.edge_origin[k];
    // Tensor uses (slot >= 0) and the gradient agreement (-1) of this node as the consumer.
    if (o.consumer != *idx || o.slot < -1) continue;
    const BuiltProblem::Edge& e = bp.edges[k];
    if (e.u != v && e.v != v) continue;
    const PNodeIdx w = e.u == v ? e.v : e.u;
    if (bp.pnode[static_cast<size_t>(bp.graph_node[static_cast<size_t>(w)])] != w) continue;  // aux
    const auto& wstr = bp.strategies[static_cast<size_t>(w)];
    InputMatrix m;
    m.slot = o.slot;
    m.producer = g.node(o.producer.node).name;
    for (const Strategy& s : wstr)
      m.producer_strategies.push_back(s.outputs.at(static_cast<size_t>(o.producer.output)).to_string());
    for (const Strategy& s : strats)
      m.consumer_strategies.push_back(o.slot >= 0 ? s.inputs.at(static_cast<size_t>(o.slot)).to_string()
                                                  : outputs_string(s));
    const size_t nw = wstr.size(), nv = strats.size();
    m.costs.resize(nw * nv);
    for (size_t p = 0; p < nw; ++p)
      for (size_t q = 0; q < nv; ++q)
        m.costs[p * nv + q] = e.v == v ? (*e.costs)[p * nv + q] : (*e.costs)[q * nw + p];
    if (!choice.empty()) {
      m.producer_chosen = choice[static_cast<size_t>(w)];
      m.consumer_chosen = c.chosen;
      for (size_t q = 0; q < nv; ++q)
        c.strategies[q].comm_us += m.costs[static_cast<size_t>(m.producer_chosen) * nv + q];
    }
    c.inputs.push_back(std::move(m));
  }
  return c;
}

std::string format_node_costs(const NodeCosts& c, size_t max_matrix) {
  std::string r = fmt::format("node {} ({}{})\n", c.node, c.op,
                              c.module_path.empty() ? "" : ", module " + c.module_path);
  r += fmt::format("  {:<3} {:>5}  {:<44} {:>13} {:>13} {:>13} {:>12}\n", "", "#", "strategy",
                   "compute", "comm", "total", "memory");
  for (const StrategyCost& s : c.strategies)
    r += fmt::format("  {:<3} {:>5}  {:<44} {:>13} {:>13} {:>13} {:>12}\n", s.chosen ? "*" : "", s.index,
                     s.name, us(s.compute_us), us(s.comm_us), us(s.compute_us + s.comm_us),
                     mib(s.memory_bytes));
  if (c.chosen >= 0) r += "  (* chosen; comm: redistributions on the inputs given the producers' choices)\n";
  for (const InputMatrix& m : c.inputs) {
    r += fmt::format("\n  input {} from {}: resharding cost (us), rows: {}'s strategies, columns: "
                     "this node's\n",
                     m.slot >= 0 ? std::to_string(m.slot) : std::string("grad"), m.producer, m.producer);
    const size_t rows = std::min(m.producer_strategies.size(), max_matrix);
    const size_t cols = std::min(m.consumer_strategies.size(), max_matrix);
    std::string head = fmt::format("    {:<16}", "");
    for (size_t q = 0; q < cols; ++q)
      head += fmt::format(" {:>11}", (static_cast<StrategyIdx>(q) == m.consumer_chosen ? "*" : "") +
                                         m.consumer_strategies[q]);
    r += head + "\n";
    for (size_t p = 0; p < rows; ++p) {
      std::string line = fmt::format("    {:<16}", (static_cast<StrategyIdx>(p) == m.producer_chosen ? "*" : "") +
                                                       m.producer_strategies[p]);
      for (size_t q = 0; q < cols; ++q) {
        const double x = m.costs[p * m.consumer_strategies.size() + q];
        line += std::isfinite(x) ? fmt::format(" {:>11.3f}", x) : fmt::format(" {:>11}", "inf");
      }
      r += line + "\n";
    }
    if (rows < m.producer_strategies.size() || cols < m.consumer_strategies.size())
      r += fmt::format("    (first {} x {} of {} x {} shown)\n", rows, cols, m.producer_strategies.size(),
                       m.consumer_strategies.size());
  }
  return r;
}

std::string print_costs_for_node(ShardingOptimizer& opt, const std::string& node) {
  return format_node_costs(node_costs(opt, node));
}

// ---- why not X? -------------------------------------------------------------------------------

Explanation explain_placement(ShardingOptimizer& opt, const std::string& node,
                              const std::vector<Placement>& placement) {
  const Graph& g = opt.graph();
  auto idx = g.find(node);
  if (!idx) throw std::runtime_error(fmt::format("no node named '{}' in graph {}", node, g.name));
  if (!opt.solution()) opt.get_solution();
  if (!opt.solution()->has_solution) throw std::runtime_error("explain: the optimizer has no solution");
  const Plan base = *opt.solution();
  const std::vector<StrategyIdx> base_choice = plan_choice(opt, base);
  const auto& bnp = base.nodes[static_cast<size_t>(*idx)];
  if (!bnp) throw std::runtime_error(fmt::format("node '{}' is an output node: it has no placement", node));
  Explanation e;
  e.node = node;
  e.placement = placements_to_string(placement);
  e.chosen = outputs_string(bnp->chosen);
  e.optimum_us = base.objective_us;
  e.already_chosen = bnp->chosen.outputs.size() == 1 && bnp->chosen.outputs[0].placements == placement;
  std::vector<std::string> names = opt.add_node_constraint(node, placement);
  try {
    Plan pinned = opt.resolve();
    e.pinned_status = std::string(solve_status_name(pinned.status));
    if (pinned.has_solution) {
      e.pinned_us = pinned.objective_us;
      e.delta_us = pinned.objective_us - base.objective_us;
      e.diff = diff_solutions(opt, base, pinned);
    } else {
      e.feasible = false;
      e.infeasible_reason = pinned.min_peak_memory_bytes >= 0
                                ? fmt::format("no plan with this pin fits in memory (smallest peak {})",
                                              mib(pinned.min_peak_memory_bytes))
                                : "no plan found (" + e.pinned_status + ")";
    }
  } catch (const std::runtime_error& ex) {
    e.feasible = false;
    e.infeasible_reason = ex.what();
  }
  opt.remove_constraints(names);
  opt.set_solution(base, base_choice);
  return e;
}

std::string format_explanation(const Explanation& e, size_t max_nodes) {
  std::string r = fmt::format("why not {} for {}? (the optimum uses {})\n", e.placement, e.node, e.chosen);
  if (!e.feasible) return r + "  no plan: " + e.infeasible_reason + "\n";
  if (e.already_chosen) r += "  the optimum already uses this placement\n";
  r += fmt::format("  optimum {}; best plan with {} = {}: {} ({}, status {})\n", us(e.optimum_us), e.node,
                   e.placement, us(e.pinned_us), signed_us(e.delta_us), e.pinned_status);
  return r + format_diff(e.diff, max_nodes);
}

}  // namespace autoshard

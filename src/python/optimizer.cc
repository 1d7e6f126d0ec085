/// autoshard._core.ShardingOptimizer: the planner, its constraints, and the files and reports
/// built on it (state files, what-if, exports, report), each bound from its C++ function.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "io/placements_json.h"
#include "io/plan_export.h"
#include "io/plan_json.h"
#include "io/state.h"
#include "ir/dtype.h"
#include "ir/file_util.h"
#include "ir/graph.h"
#include "planner/constraints.h"
#include "planner/fit_advice.h"
#include "planner/sharding_optimizer.h"
#include "planner/whatif.h"
#include "python/bindings.h"
#include "report/report.h"

namespace py = pybind11;

namespace autoshard::python {

namespace {

using SpecList = std::vector<std::optional<std::string>>;

std::vector<std::vector<Placement>> parse_list(const SpecList& specs) {
  std::vector<std::vector<Placement>> out;
  out.reserve(specs.size());
  for (const auto& s : specs) out.push_back(s ? parse_placements(*s) : std::vector<Placement>{});
  return out;
}

/// The plan to work on: the given one, else the last solution; errors say which is missing.
const Plan& plan_or_solution(const ShardingOptimizer& so, const Plan* plan) {
  if (plan) return *plan;
  if (!so.solution()) throw std::runtime_error("no solution: call get_solution() first");
  return *so.solution();
}

/// node name -> (output spec, [input specs]) as DTensor strings ("S(0)R", "(S(0)R, RR)").
py::dict placements_dict(const ShardingOptimizer& so, const Plan& plan) {
  py::dict out;
  const Graph& g = so.graph();
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const auto& np = plan.nodes[static_cast<size_t>(i)];
    if (!np) continue;
    std::vector<std::string> ins;
    for (const auto& s : np->chosen.inputs) ins.push_back(s.to_string());
    std::vector<std::string> outs;
    for (const auto& s : np->chosen.outputs) outs.push_back(s.to_string());
    py::dict d;
    d["outputs"] = outs;
    d["inputs"] = ins;
    out[py::str(g.node(i).name)] = d;
  }
  return out;
}

/// node_costs with only input slot `arg` kept (all when nullopt); errors name the slots.
NodeCosts costs_of_input(ShardingOptimizer& s, const std::string& node, std::optional<int32_t> arg) {
  NodeCosts c = node_costs(s, node);
  if (!arg) return c;
  std::vector<InputMatrix> kept;
  std::vector<std::string> slots;
  for (InputMatrix& m : c.inputs) {
    slots.push_back(m.slot >= 0 ? std::to_string(m.slot) : "-1 (grad)");
    if (m.slot == *arg) kept.push_back(std::move(m));
  }
  if (kept.empty() && !c.inputs.empty())
    throw std::invalid_argument(fmt::format("node '{}' has no input {} (inputs: {})", node, *arg,
                                            fmt::join(slots, ", ")));
  c.inputs = std::move(kept);
  return c;
}

/// One row per planned node from `start` on: can its (first) output take `target`, and at
/// what cost (compute + redistribution on its inputs) against the chosen strategy.
py::list explain_target(ShardingOptimizer& s, const std::string& target,
                        const std::optional<std::string>& start, size_t max_nodes) {
  const std::string want = placements_to_string(parse_placements(target));
  if (static_cast<int32_t>(parse_placements(want).size()) != s.mesh().ndim())
    throw std::invalid_argument(fmt::format("placement '{}' has {} items for a {}-D mesh", target,
                                            parse_placements(want).size(), s.mesh().ndim()));
  const Graph& g = s.graph();
  NodeIdx first = 0;
  if (start) {
    auto idx = g.find(*start);
    if (!idx) throw std::invalid_argument(fmt::format("no node named '{}' in graph {}", *start, g.name));
    first = *idx;
  }
  const Plan& plan = plan_or_solution(s, nullptr);
  py::list rows;
  for (NodeIdx i = first; i < g.size(); ++i) {
    if (max_nodes > 0 && rows.size() >= max_nodes) break;
    if (!plan.nodes[static_cast<size_t>(i)]) continue;  // output nodes: nothing to place
    const NodeCosts c = node_costs(s, g.node(i).name);
    const StrategyCost* chosen = nullptr;
    const StrategyCost* best = nullptr;
    for (const StrategyCost& sc : c.strategies) {
      if (sc.chosen) chosen = &sc;
      const bool match = sc.output == want || sc.output.rfind("(" + want + ",", 0) == 0;
      if (match && (!best || sc.compute_us + sc.comm_us < best->compute_us + best->comm_us)) best = &sc;
    }
    py::dict r;
    r["node"] = c.node;
    r["op"] = c.op;
    r["chosen"] = chosen ? chosen->output : std::string();
    r["chosen_us"] = chosen ? chosen->compute_us + chosen->comm_us : 0.0;
    r["available"] = best != nullptr;
    r["target_strategy"] = best ? best->name : std::string();
    r["target_us"] = best ? py::cast(best->compute_us + best->comm_us) : py::none();
    r["delta_us"] = best && chosen ? py::cast(best->compute_us + best->comm_us -
                                              chosen->compute_us - chosen->comm_us)
                                   : py::none();
    rows.append(r);
  }
  return rows;
}

py::list node_table(const ShardingOptimizer& s) {
  const Graph& g = s.graph();
  py::list out;
  for (NodeIdx i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    py::dict d;
    d["name"] = n.name;
    d["kind"] = std::string(node_kind_name(n.kind));
    d["op"] = n.op;
    d["phase"] = std::string(phase_name(n.phase));
    d["module_path"] = n.module_path;
    d["source"] = n.source;
    std::vector<std::string> ins;
    for (const TensorRef& r : n.inputs) {
      const std::string& src = g.node(r.node).name;
      ins.push_back(r.output == 0 ? src : fmt::format("{}:{}", src, r.output));
    }
    d["inputs"] = ins;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::string> dtypes;
    for (const TensorMeta& m : n.outputs) {
      shapes.push_back(m.shape);
      dtypes.emplace_back(dtype_name(m.dtype));
    }
    d["shapes"] = shapes;
    d["dtypes"] = dtypes;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_optimizer(py::module_& m) {
  py::class_<ShardingOptimizer> so(m, "ShardingOptimizer",
                                   "The planner for one graph on one mesh, with named constraints.");
  so.def(py::init([](const Graph& g, const Mesh& mesh, std::optional<PlannerOptions> o) {
           return ShardingOptimizer(g, mesh, o.value_or(PlannerOptions{}));
         }),
         py::arg("graph"), py::arg("mesh"), py::arg("options") = std::nullopt)
      .def_static(
          "from_dict",
          [](py::handle graph, const Mesh& mesh, std::optional<PlannerOptions> o,
             const std::string& origin) {
            // The graph goes straight into the optimizer: no Python Graph to copy it from.
            return ShardingOptimizer(graph_from_python(graph, origin), mesh,
                                     o.value_or(PlannerOptions{}));
          },
          py::arg("graph"), py::arg("mesh"), py::arg("options") = std::nullopt,
          py::arg("origin") = "<dict>",
          "ShardingOptimizer(Graph.from_dict(graph, origin), mesh, options) without the "
          "Graph's copy.")
      .def_property_readonly("graph", &ShardingOptimizer::graph, py::return_value_policy::reference_internal,
                             "The graph being planned.")
      .def_property_readonly("mesh", &ShardingOptimizer::mesh, py::return_value_policy::reference_internal,
                             "The mesh planned for.")
      .def_property_readonly("options", &ShardingOptimizer::options, "The PlannerOptions planned with.")
      .def(
          "add_input_constraints",
          [](ShardingOptimizer& s, const SpecList& p) { return s.add_input_constraints(parse_list(p)); },
          py::arg("placements"),
          "Placements of the graph's inputs in order ('S(0)R' strings; None leaves one free).")
      .def(
          "add_output_constraints",
          [](ShardingOptimizer& s, const SpecList& p) { return s.add_output_constraints(parse_list(p)); },
          py::arg("placements"), "Placements of the tensors the step returns, in order.")
      .def("add_parameter_memory_constraint", &ShardingOptimizer::add_parameter_memory_constraint,
           py::arg("low"), py::arg("high"),
           "Parameter memory per device within [low, high] x the unsharded parameter bytes.")
      .def(
          "add_node_constraint",
          [](ShardingOptimizer& s, const std::string& node, const std::string& output,
             std::optional<SpecList> inputs, std::optional<std::string> name) {
            std::optional<std::vector<std::vector<Placement>>> ins;
            if (inputs) ins = parse_list(*inputs);
            if (!name) return s.add_node_constraint(node, parse_placements(output), ins);
            Constraint c;
            c.kind = Constraint::Kind::kPin;
            c.name = *name;  // add_constraint rejects a name already in use
            c.node = node;
            c.output = parse_placements(output);
            c.inputs = std::move(ins);
            s.add_constraint(std::move(c));
            return std::vector<std::string>{*name};
          },
          py::arg("node"), py::arg("output"), py::arg("inputs") = std::nullopt,
          py::arg("name") = std::nullopt,
          "Pins a node's output placements (and optionally its inputs'); returns the names added "
          "(`name` names the constraint, else 'pin:NODE').")
      .def("remove_constraints", &ShardingOptimizer::remove_constraints, py::arg("names"),
           "Removes constraints by name (RuntimeError naming an unknown one; then none is removed).")
      .def_property_readonly("constraints", [](const ShardingOptimizer& s) {
        std::vector<std::string> out;
        for (const auto& c : s.constraints()) out.push_back(c.name);
        return out;
      }, "The names of the constraints in force.")
      .def("get_solution", &ShardingOptimizer::get_solution, py::call_guard<py::gil_scoped_release>(),
           "Builds (if needed) and solves; the plan is kept as `solution`.")
      .def("resolve", &ShardingOptimizer::resolve, py::call_guard<py::gil_scoped_release>(),
           "Solves again under the current constraints, warm-started from the last solution.")
      .def_property_readonly("solution", &ShardingOptimizer::solution, "The last plan solved (get_solution / resolve).")
      .def(
          "fit_suggestions",
          [](ShardingOptimizer& s, const Plan& plan) { return fit_suggestions(s, plan); },
          py::arg("plan"), py::call_guard<py::gil_scoped_release>(),
          "What would make an infeasible plan feasible: one remedy a line, the CLI's 'to fit, ...' "
          "lines (a memory budget, recomputation, a larger mesh, a parameter-memory bound); "
          "empty for a plan.")
      .def(
          "get_placements",
          [](const ShardingOptimizer& s, const Plan* plan) { return placements_dict(s, plan_or_solution(s, plan)); },
          py::arg("plan") = nullptr,
          "node name -> {'outputs': [spec per output], 'inputs': [spec per input]}.")
      .def(
          "summary_json",
          [](const ShardingOptimizer& s, const Plan* plan) {
            return plan_summary_json(plan_or_solution(s, plan), s.graph(), s.mesh()).dump(2);
          },
          py::arg("plan") = nullptr, "The `autoshard plan --json` summary (JSON text).")
      .def(
          "placements_json",
          [](const ShardingOptimizer& s, const Plan* plan) {
            ScheduleOptions schedule;
            schedule.planned_paths = s.options().comm_model == CommModel::kNccl;
            return write_placements_json(plan_or_solution(s, plan), s.graph(), s.mesh(), schedule);
          },
          py::arg("plan") = nullptr,
          "The placements JSON text of a plan (the solution by default), as save_placements writes.")
      .def(
          "plan_from_placements",
          [](ShardingOptimizer& s, const std::string& text, const std::string& origin) {
            py::gil_scoped_release release;
            std::optional<Plan> before = s.solution();
            std::vector<StrategyIdx> choice = s.solution_choice();
            Plan p = placements_plan(s, text, origin);
            if (before) s.set_solution(std::move(*before), std::move(choice));
            return p;
          },
          py::arg("text"), py::arg("origin") = "<placements>",
          "The plan of placements JSON text, evaluated without solving; the solution is kept "
          "(it becomes this plan only when there was none).")
      .def("save_placements", &save_placements, py::arg("path"),
           "Writes the solution's placements JSON (AutoParallel's save_placements schema).")
      .def("load_placements", &load_placements, py::arg("path"),
           "The plan of saved placements, evaluated without solving; it becomes `solution`.")
      .def("__repr__", [](const ShardingOptimizer& s) {
        return fmt::format("<autoshard.ShardingOptimizer '{}' on {}, {} constraints{}>", s.graph().name,
                           s.mesh().describe(), s.constraints().size(),
                           s.solution() ? ", solved" : "");
      });
  so.def("save", &save_state, py::arg("path"),
         "Writes the state file (graph, mesh, options, constraints, problem, solution).")
      .def_static("load", &load_state, py::arg("path"),
                  "An optimizer from a state file: no model, no torch, no strategy generation.")
      .def("save_replay", &save_replay, py::arg("path"),
           "Writes the replay file (inputs only: regenerated with the current code).")
      .def_static(
          "load_replay", [](const std::string& path) { return load_replay(path); }, py::arg("path"));
  so.def(
        "get_json",
        [](ShardingOptimizer& s, const Plan* plan) {
          Plan p = plan_or_solution(s, plan);
          return plan_json_text(s, p);
        },
        py::arg("plan") = nullptr, "plan.json: AutoParallel's get_json fields plus autoshard's.")
      .def("write_mps", &write_mps, "Alpa's ILP (with memory rows) as MPS text.")
      .def("save_iopddl", &write_problem_iopddl, py::arg("path"), "The problem as IOPDDL JSON.");
  so.def(
        "diff_solutions",
        [](ShardingOptimizer& s, const Plan& a, const Plan& b, size_t max_nodes) {
          return format_diff(diff_solutions(s, a, b), max_nodes);
        },
        py::arg("a"), py::arg("b"), py::arg("max_nodes") = 0,
        "What changed from plan a to plan b, by layer (text).")
      .def(
          "print_costs_for_node",
          [](ShardingOptimizer& s, const std::string& node, std::optional<int32_t> arg, size_t max_matrix) {
            std::string text = format_node_costs(costs_of_input(s, node, arg), max_matrix);
            py::print(text, py::arg("end") = "");
          },
          py::arg("node"), py::arg("arg") = std::nullopt, py::arg("max_matrix") = 16,
          "Prints the node's strategies, their costs and resharding matrices (`arg`: one input's).")
      .def(
          "costs_for_node",
          [](ShardingOptimizer& s, const std::string& node, std::optional<int32_t> arg, size_t max_matrix) {
            return format_node_costs(costs_of_input(s, node, arg), max_matrix);
          },
          py::arg("node"), py::arg("arg") = std::nullopt, py::arg("max_matrix") = 16,
          "The text print_costs_for_node prints; `arg` keeps one input's resharding matrix "
          "(-1: the gradient agreement), None all of them.")
      .def(
          "node_strategies",
          [](ShardingOptimizer& s, const std::string& node) {
            NodeCosts c = node_costs(s, node);
            py::list out;
            for (const StrategyCost& sc : c.strategies) {
              py::dict d;
              d["index"] = sc.index;
              d["name"] = sc.name;
              d["output"] = sc.output;
              d["compute_us"] = sc.compute_us;
              d["comm_us"] = sc.comm_us;
              d["memory_bytes"] = sc.memory_bytes;
              d["chosen"] = sc.chosen;
              out.append(d);
            }
            return out;
          },
          py::arg("node"),
          "The node's strategies with their costs under the solution (as print_costs_for_node).")
      .def(
          "explain_target",
          [](ShardingOptimizer& s, const std::string& target, std::optional<std::string> start_node,
             size_t max_nodes) { return explain_target(s, target, start_node, max_nodes); },
          py::arg("target"), py::arg("start_node") = std::nullopt, py::arg("max_nodes") = 0,
          "Per planned node in graph (topological) order from start_node: whether a strategy "
          "with output `target` exists and its cost against the chosen one (max_nodes 0: all).")
      .def("node_table", &node_table,
           "Every graph node in order: name, kind, op, phase, module_path, source, inputs "
           "('name' or 'name:k'), shapes, dtypes.")
      .def(
          "explain_placement",
          [](ShardingOptimizer& s, const std::string& node, const std::string& placement) {
            Explanation e;
            {
              py::gil_scoped_release release;
              e = explain_placement(s, node, parse_placements(placement));
            }
            return format_explanation(e);
          },
          py::arg("node"), py::arg("placement"),
          "Why not this placement for this node: solves with it pinned and reports the cost.");
  so.def(
      "render_report_html",
      [](ShardingOptimizer& s, const Plan* plan) {
        Plan p = plan_or_solution(s, plan);
        return render_report_html(s, p);
      },
      py::arg("plan") = nullptr, "The self-contained HTML report of a plan.");
  so.def(
      "save_report",
      [](ShardingOptimizer& s, const std::string& path) {
        Plan p = plan_or_solution(s, nullptr);
        write_file_atomic(path, render_report_html(s, p));
      },
      py::arg("path"));
}

}  // namespace autoshard::python

/// autoshard._core.ShardingOptimizer: the planner, its constraints, and the files and reports
/// built on it (state files, what-if, exports, report), each bound from its C++ function.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "io/placements_json.h"
#include "io/plan_export.h"
#include "io/plan_json.h"
#include "io/state.h"
#include "ir/file_util.h"
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

}  // namespace

void bind_optimizer(py::module_& m) {
  py::class_<ShardingOptimizer> so(m, "ShardingOptimizer",
                                   "The planner for one graph on one mesh, with named constraints.");
  so.def(py::init([](const Graph& g, const Mesh& mesh, std::optional<PlannerOptions> o) {
           return ShardingOptimizer(g, mesh, o.value_or(PlannerOptions{}));
         }),
         py::arg("graph"), py::arg("mesh"), py::arg("options") = std::nullopt)
      .def_property_readonly("graph", &ShardingOptimizer::graph, py::return_value_policy::reference_internal)
      .def_property_readonly("mesh", &ShardingOptimizer::mesh, py::return_value_policy::reference_internal)
      .def_property_readonly("options", &ShardingOptimizer::options)
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
             std::optional<SpecList> inputs) {
            std::optional<std::vector<std::vector<Placement>>> ins;
            if (inputs) ins = parse_list(*inputs);
            return s.add_node_constraint(node, parse_placements(output), ins);
          },
          py::arg("node"), py::arg("output"), py::arg("inputs") = std::nullopt,
          "Pins a node's output placements (and optionally its inputs'); returns the names added.")
      .def("remove_constraints", &ShardingOptimizer::remove_constraints, py::arg("names"),
           "Removes constraints by name (RuntimeError naming an unknown one; then none is removed).")
      .def_property_readonly("constraints", [](const ShardingOptimizer& s) {
        std::vector<std::string> out;
        for (const auto& c : s.constraints()) out.push_back(c.name);
        return out;
      })
      .def("get_solution", &ShardingOptimizer::get_solution, py::call_guard<py::gil_scoped_release>(),
           "Builds (if needed) and solves; the plan is kept as `solution`.")
      .def("resolve", &ShardingOptimizer::resolve, py::call_guard<py::gil_scoped_release>(),
           "Solves again under the current constraints, warm-started from the last solution.")
      .def_property_readonly("solution", &ShardingOptimizer::solution)
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
          [](ShardingOptimizer& s, const std::string& node) {
            std::string text = print_costs_for_node(s, node);
            py::gil_scoped_acquire gil;
            py::print(text, py::arg("end") = "");
          },
          py::arg("node"), "Prints the node's strategies, their costs and resharding matrices.")
      .def(
          "costs_for_node",
          [](ShardingOptimizer& s, const std::string& node) { return format_node_costs(node_costs(s, node)); },
          py::arg("node"), "The text print_costs_for_node prints.")
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

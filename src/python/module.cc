/// autoshard._core: the C++ planner as a Python extension module (pybind11).
///
/// The binding is thin on purpose: every figure comes from the same C++ code the `autoshard`
/// command line runs (graph reader, ShardingOptimizer, JSON writers), so a plan made from
/// Python equals the CLI's on the same graph file.  Placements cross the boundary as DTensor
/// strings ("S(0)R"); python/autoshard/placements.py turns them into DTensor objects when
/// torch is importable.  Long calls (solving) release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "cost/collective.h"
#include "io/placements_json.h"
#include "io/plan_json.h"
#include "ir/file_util.h"
#include "ir/graph_json.h"
#include "mesh/hardware.h"
#include "mesh/mesh.h"
#include "models/models.h"
#include "planner/recompute.h"
#include "planner/sharding_optimizer.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace autoshard::python {

namespace {

Mesh make_mesh(const std::vector<int64_t>& shape, const std::vector<std::string>& names,
               const std::string& hardware, const std::string& backend, int gpus_per_node, bool float8,
               bool compile) {
  KernelOptions kernels;
  kernels.float8_linear = float8;
  kernels.compiled = compile;
  const Hardware hw = resolve_hardware(hardware, gpus_per_node, kernels, "");
  return Mesh(shape, names, hw, parse_backend(backend, "backend"));
}

void bind_graph(py::module_& m) {
  py::class_<Graph>(m, "Graph", "A training-step graph (docs/graph-format.md).")
      .def_static("load", &load_graph_file, py::arg("path"),
                  "Reads a graph JSON file (errors name the file and the JSON pointer).")
      .def_static(
          "from_json", [](const std::string& text, const std::string& origin) {
            return read_graph_json(text, origin);
          },
          py::arg("text"), py::arg("origin") = "<string>")
      .def_static(
          "from_dict",
          [](py::handle graph, const std::string& origin) {
            return graph_from_python(graph, origin);
          },
          py::arg("graph"), py::arg("origin") = "<dict>",
          "The graph from a graph dict (autoshard.tracer.export.to_graph_dict): the same "
          "Graph and checks as from_json(json.dumps(graph)), read in place (no JSON text).")
      .def_static(
          "builtin",
          [](const std::string& name, int64_t batch, int64_t seq, int64_t layers,
             std::optional<std::string> dtype) {
            ModelOptions mo;
            mo.batch = batch;
            mo.seq = seq;
            mo.layers = layers;
            if (dtype) {
              auto dt = parse_dtype(*dtype);
              if (!dt) throw std::invalid_argument(fmt::format("dtype: unknown dtype '{}'", *dtype));
              mo.dtype = *dt;
            }
            return build_model(name, mo);
          },
          py::arg("name"), py::arg("batch") = -1, py::arg("seq") = -1, py::arg("layers") = -1,
          py::arg("dtype") = std::nullopt, "A built-in model (llama3-8b, gpt2, ...).")
      .def("to_json", &write_graph_json,
           "The graph as graph JSON text (deterministic: the same graph gives the same bytes).")
      .def_readwrite("name", &Graph::name, "The graph's name (the model's, or the file's `name`).")
      .def("__len__", [](const Graph& g) { return static_cast<size_t>(g.size()); })
      .def("node_names", [](const Graph& g) {
        std::vector<std::string> out;
        for (NodeIdx i = 0; i < g.size(); ++i) out.push_back(g.node(i).name);
        return out;
      })
      .def("node_kinds", [](const Graph& g) {
        std::vector<std::string> out;
        for (NodeIdx i = 0; i < g.size(); ++i) out.emplace_back(node_kind_name(g.node(i).kind));
        return out;
      })
      .def("__repr__", [](const Graph& g) {
        return fmt::format("<autoshard.Graph '{}' with {} nodes>", g.name, g.size());
      });
  m.def("model_names", &model_names, "The built-in model names.");
}

void bind_mesh(py::module_& m) {
  py::class_<Mesh>(m, "Mesh", "A device mesh with its hardware (links, bandwidths, memory).")
      .def(py::init(&make_mesh), py::arg("shape"), py::arg("dim_names") = std::vector<std::string>{},
           py::arg("hardware") = "h100", py::arg("backend") = "nccl", py::arg("gpus_per_node") = -1,
           py::arg("float8") = false, py::arg("compile") = false,
           "shape: devices per dim; hardware: a preset or a hardware JSON file; float8 and compile "
           "price the kernels as torchao's Float8Linear and torch.compile run them (the CLI's "
           "--float8 and --compile, docs/cost-model.md)")
      .def_property_readonly("shape", &Mesh::shape, "Devices per mesh dim, e.g. [2, 8].")
      .def_property_readonly("dim_names", &Mesh::names, "The mesh dims' names, e.g. ['dp', 'tp'].")
      .def_property_readonly(
          "hardware", [](const Mesh& mesh) { return mesh.hardware().name; },
          "The hardware's name (a preset such as h100, or a hardware file's `name`).")
      .def_property_readonly(
          "float8", [](const Mesh& mesh) { return mesh.hardware().kernels.float8_linear; },
          "Whether the linear layers' matmuls are priced as Float8 (the float8 argument).")
      .def_property_readonly(
          "compile", [](const Mesh& mesh) { return mesh.hardware().kernels.compiled; },
          "Whether memory-bound ops are priced as torch.compile fuses them (the compile argument).")
      .def_property_readonly("num_devices", &Mesh::num_devices, "The number of devices (the product of the shape).")
      .def_property_readonly("ndim", &Mesh::ndim, "The number of mesh dims.")
      .def("describe", &Mesh::describe)
      .def("__repr__", [](const Mesh& mesh) {
        return fmt::format("<autoshard.Mesh {} of {}>", mesh.describe(), mesh.hardware().name);
      });
  m.def("hardware_presets", &hardware_preset_names, "The hardware preset names (a100, h100, ...).");
  // The cost model of one collective, for pricing a lowered graph's own collectives with the
  // figures the simulator uses (autoshard.replay).
  m.def(
      "collective_time_us",
      [](const std::string& kind, double bytes, const Mesh& mesh, int dim, const std::string& model) {
        static constexpr Collective kAll[] = {Collective::kAllGather, Collective::kReduceScatter,
                                              Collective::kAllReduce, Collective::kAllToAll};
        auto cm = parse_comm_model(model);
        if (!cm) throw std::invalid_argument(fmt::format("comm_model: expected nccl or dtensor, got '{}'", model));
        if (dim < 0 || dim >= mesh.ndim())
          throw std::invalid_argument(fmt::format("dim {}: the mesh has {} dims", dim, mesh.ndim()));
        for (Collective c : kAll)
          if (collective_name(c) == kind) return collective_time_us(c, bytes, mesh, MeshDimIdx(dim), *cm);
        throw std::invalid_argument(fmt::format(
            "collective '{}': expected all_gather, reduce_scatter, all_reduce or all_to_all", kind));
      },
      py::arg("kind"), py::arg("bytes"), py::arg("mesh"), py::arg("dim"), py::arg("comm_model") = "nccl",
      "Microseconds of one collective over mesh dim `dim` (bytes per device: the gathered output "
      "of an all_gather, the input of a reduce_scatter, the buffer of an all_reduce).");
  m.def(
      "normalize_placements",
      [](const std::string& s) { return placements_to_string(parse_placements(s)); },
      py::arg("spec"), "'Shard(0), Replicate()' -> 'S(0)R' (errors name the position).");
}

void bind_options(py::module_& m) {
  py::class_<PlannerOptions>(m, "PlannerOptions", "Planner knobs (planner/options.h).")
      .def(py::init<>())
      .def_property(
          "comm_model",
          [](const PlannerOptions& o) { return o.comm_model == CommModel::kNccl ? "nccl" : "dtensor"; },
          [](PlannerOptions& o, const std::string& s) {
            auto cm = parse_comm_model(s);
            if (!cm) throw std::invalid_argument(fmt::format("comm_model: expected nccl or dtensor, got '{}'", s));
            o.comm_model = *cm;
          },
          "The collective cost model: nccl (measured bus bandwidths) or dtensor (DTensor's model).")
      .def_readwrite("memory_limit_bytes", &PlannerOptions::memory_limit_bytes,
                     "-1: the hardware's memory, 0: no limit")
      .def_property(
          "recompute",
          [](const PlannerOptions& o) { return std::string(recompute_policy_name(o.recompute)); },
          [](PlannerOptions& o, const std::string& s) { o.recompute = parse_recompute_policy_or_throw(s, "recompute"); },
          "Activation recomputation per layer region: if-needed (the default), none, selective, "
          "selective-op (torchtitan's op-level policy), full, or auto (the solver decides per region).")
      .def_property(
          "objective",
          [](const PlannerOptions& o) { return o.objective == Objective::kOverlap ? "overlap" : "additive"; },
          [](PlannerOptions& o, const std::string& s) {
            if (s == "overlap") o.objective = Objective::kOverlap;
            else if (s == "additive") o.objective = Objective::kAdditive;
            else throw std::invalid_argument(fmt::format("objective: expected overlap or additive, got '{}'", s));
          },
          "What the solver minimises: overlap (the step time with the communication compute hides, "
          "proven bound) or additive (compute + every redistribution).")
      .def_readwrite("time_limit_s", &PlannerOptions::time_limit_s, "Solver time limit in seconds (the CLI's --time-limit).")
      .def_readwrite("mip_gap", &PlannerOptions::mip_gap, "Relative gap at which a solve stops and counts as optimal.")
      .def_readwrite("threads", &PlannerOptions::threads, "Solver threads.")
      .def_readwrite("skip_fully_replicated", &PlannerOptions::skip_fully_replicated,
                     "Drop fully replicated strategies where a sharded one exists.")
      .def_readwrite("cluster", &PlannerOptions::cluster,
                     "Tie repeated layers to one set of decisions (the CLI's --no-cluster turns it off).")
      .def_readwrite("require_divisible", &PlannerOptions::require_divisible,
                     "Only shard tensor dims that split evenly over the mesh dim.")
      .def_readwrite("context_parallel", &PlannerOptions::context_parallel,
                     "Allow attention to split its sequence over a mesh dim (ring / all-gather attention).")
      .def_readwrite("shard_orders", &PlannerOptions::shard_orders,
                     "Also offer strided shards (the CLI's --shard-orders; docs/formats.md).")
      .def_readwrite("run_checks", &PlannerOptions::run_checks,
                     "Re-cost the solution on the untied problem and re-sweep its memory (an error on mismatch).")
      .def_readwrite("preload_solution", &PlannerOptions::preload_solution,
                     "Reuse ilp_solution_file without solving when its fingerprint matches.")
      .def_readwrite("ilp_solution_file", &PlannerOptions::ilp_solution_file,
                     "File of solutions keyed by the problem's fingerprint (written after a solve).");
}

void bind_plan(py::module_& m) {
  py::class_<Plan>(m, "Plan", "A solved plan: placements plus the figures that prove its quality.")
      .def_property_readonly(
          "status", [](const Plan& p) { return std::string(solve_status_name(p.status)); },
          "optimal (proven within mip_gap), feasible (a gap remains), infeasible, or another solver state.")
      .def_readonly("has_solution", &Plan::has_solution, "Whether the plan has placements.")
      .def_readonly("objective_us", &Plan::objective_us, "The estimated step time the solver minimised (us).")
      .def_readonly("additive_us", &Plan::additive_us, "Compute + every redistribution.")
      .def_readonly("overlapped_us", &Plan::overlapped_us,
                    "Communication the overlap-aware objective hides behind compute.")
      .def_readonly("overlap_aware", &Plan::overlap_aware, "Whether objective_us is the overlap-aware objective.")
      .def_readonly("lower_bound_us", &Plan::lower_bound_us, "The proven lower bound on objective_us (us).")
      .def_readonly("gap", &Plan::gap, "The relative gap between objective_us and lower_bound_us.")
      .def_readonly("compute_us", &Plan::compute_us, "Compute time of the step (us).")
      .def_readonly("comm_us", &Plan::comm_us, "Communication time of the step, hidden or not (us).")
      .def_readonly("peak_memory_bytes", &Plan::peak_memory_bytes, "Peak memory per device (bytes).")
      .def_readonly("memory_limit_bytes", &Plan::memory_limit_bytes, "The per-device budget planned for (bytes; 0: none).")
      .def_readonly("min_peak_memory_bytes", &Plan::min_peak_memory_bytes,
                    "When infeasible: the smallest peak of a layout found (bytes; -1: none found).")
      .def_readonly("min_peak_lower_bound_bytes", &Plan::min_peak_lower_bound_bytes,
                    "When infeasible: a proven lower bound on any layout's peak (bytes; -1: unknown).")
      .def_readonly("checked", &Plan::checked, "Whether the independent check ran and agreed.")
      .def_readonly("recompute_us", &Plan::recompute_us,
                    "Step time that activation recomputation adds (compute and its collectives).")
      .def_readonly("layer_recompute", &Plan::layer_recompute,
                    "Per repeated layer in forward order: (layer, 'none' | 'selective' | 'full').")
      .def_readonly("recomputed_nodes", &Plan::recomputed_nodes,
                    "Forward ops the backward re-executes (placements.json 'recompute').")
      .def_readonly("warnings", &Plan::warnings, "Warnings of the solve (e.g. ops without a sharding rule).")
      .def_readonly("phase_seconds", &Plan::phase_seconds, "Wall time per planning phase (seconds).")
      .def("__repr__", [](const Plan& p) {
        return fmt::format("<autoshard.Plan {} objective {:.1f} us, gap {:.4g}>",
                           solve_status_name(p.status), p.objective_us, p.gap);
      });
}

}  // namespace

}  // namespace autoshard::python

PYBIND11_MODULE(_core, m) {
  using namespace autoshard::python;
  m.doc() = "autoshard's C++ planner (graph, mesh, ShardingOptimizer, plans and their files).";
  m.attr("__version__") = AUTOSHARD_VERSION;
  bind_graph(m);
  bind_mesh(m);
  bind_options(m);
  bind_plan(m);
  bind_optimizer(m);
}

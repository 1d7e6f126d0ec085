/// `autoshard search`: which mesh for N GPUs.  Plans the model on every mesh shape (and mapping
/// of its dims onto the machines) and ranks them (planner/mesh_search.h).
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli/common.h"
#include "io/pipeline_json.h"
#include "io/placements_json.h"
#include "io/plan_json.h"
#include "ir/file_util.h"
#include "cli/pipeline_cli.h"
#include "cli/progress_line.h"
#include "planner/mesh_search.h"
#include "pipeline/pipeline_search.h"

namespace autoshard::cli {

namespace {

struct SearchArgs {
  GraphSource src;
  int64_t gpus = 8;
  int gpus_per_node = -1;
  std::string hardware = "h100";
  std::string backend = "nccl";
  KernelOptions kernels;
  std::string comm_model = "nccl";
  std::string memory_limit;
  int max_dims = 3;
  double time_limit = 10;  ///< per mesh: the ranking needs good plans, not proofs
  int threads = 0;
  bool no_prune = false;
  std::string out_dir;
  bool json = false;
  std::string pp;        ///< --pp: pipeline sizes to try ("2,4,8"); empty: none
  int microbatches = 0;  ///< with --pp: microbatches per step (0: the pp size)
  bool quiet = false;    ///< --quiet: no progress line on stderr, even on a terminal
};

std::string status_of(const MeshSearchRow& r) {
  switch (r.outcome) {
    case MeshSearchRow::Outcome::kPlanned: return std::string(solve_status_name(r.plan->status));
    case MeshSearchRow::Outcome::kOverBudget:
      return fmt::format("over budget ({})", format_bytes(r.plan->peak_memory_bytes));
    case MeshSearchRow::Outcome::kPruned: return "pruned";
    case MeshSearchRow::Outcome::kTimedOut: return "timed out";
    case MeshSearchRow::Outcome::kError: return "error: " + r.message;
  }
  return "?";
}

/// The mesh search's options from the command line, checked (the hardware parsed as the mesh
/// options do, on a 1-D mesh of the right size).
MeshSearchOptions search_options(const SearchArgs& a) {
  MeshSource ms;
  ms.shape = std::to_string(a.gpus);
  ms.dims = "dp";
  ms.hardware = a.hardware;
  ms.backend = a.backend;
  ms.gpus_per_node = a.gpus_per_node;
  ms.kernels = a.kernels;
  if (a.gpus < 1) throw std::invalid_argument(fmt::format("--gpus: expected >= 1, got {}", a.gpus));
  if (a.max_dims < 1 || a.max_dims > 4)
    throw std::invalid_argument(fmt::format("--max-dims: expected 1 to 4, got {}", a.max_dims));
  if (a.threads < 0) throw std::invalid_argument(fmt::format("--threads: expected >= 0, got {}", a.threads));
  if (!(a.time_limit > 0)) throw std::invalid_argument(fmt::format("--time-limit: expected > 0, got {}", a.time_limit));
  Mesh flat = make_mesh(ms);
  MeshSearchOptions o;
  o.gpus = a.gpus;
  o.max_dims = a.max_dims;
  o.hardware = flat.hardware();
  o.backend = flat.backend();
  auto cm = parse_comm_model(a.comm_model);
  if (!cm) throw std::invalid_argument(fmt::format("--comm-model: expected nccl or dtensor, got '{}'", a.comm_model));
  o.planner.comm_model = *cm;
  if (!a.memory_limit.empty()) o.planner.memory_limit_bytes = parse_bytes(a.memory_limit);
  o.planner.time_limit_s = a.time_limit;
  o.threads = a.threads;
  o.prune = !a.no_prune;
  return o;
}

/// The best step that fits among the flat meshes (infinite: none fits).
double flat_best_us(const MeshSearchResult& res) {
  return res.best >= 0 ? res.rows[static_cast<size_t>(res.best)].plan->objective_us : std::numeric_limits<double>::infinity();
}

/// --pp: the pipelined meshes, each planned with stages as `plan` plans them, the best of the
/// flat meshes as the first cutoff (none with --no-prune).
std::vector<PipelineSearchRow> pipelined_rows(const SearchArgs& a, const MeshSearchOptions& o,
                                              const MeshSearchResult& flat, ProgressLine* line) {
  if (a.pp.empty()) return {};
  std::vector<int32_t> sizes;
  for (int64_t x : Mesh::parse_shape(a.pp)) sizes.push_back(static_cast<int32_t>(x));
  PipelineArgs pa;
  pa.microbatches = a.microbatches;
  PipelineOptions po = pipeline_options(1, pa);  // microbatches set per pp size
  if (line)  // timed from the search's start: after the flat meshes' time
    po.on_progress = [line, before = flat.seconds, shown = std::string()](const PipelineProgress& p) mutable {
      PipelineProgress q = p;
      q.elapsed_s += before;
      // A mesh's first report is drawn whatever the interval: a small mesh plans within it.
      const std::string mesh = q.searching.substr(0, q.searching.find("): "));
      line->draw(q.elapsed_s, progress_text(q), mesh != shown);
      shown = mesh;
    };
  return search_pipeline_meshes([&](int32_t M) { return microbatch_graph(a.src, M); }, a.gpus, a.max_dims,
                                o.hardware, o.backend, o.planner, po, sizes, a.microbatches,
                                o.prune ? flat_best_us(flat) : std::numeric_limits<double>::infinity());
}

int64_t rank_peak(const PipelineSearchRow& r) {
  return *std::max_element(r.plan->rank_peak_bytes.begin(), r.plan->rank_peak_bytes.end());
}

nlohmann::ordered_json mesh_row_json(const MeshSearchRow& r) {
  nlohmann::ordered_json x;
  x["mesh"] = r.mesh.shape();
  x["mesh_dims"] = r.mesh.names();
  std::vector<bool> inter;
  for (MeshDimIdx d = 0; d < r.mesh.ndim(); ++d) inter.push_back(r.mesh.dim(d).inter_node);
  x["inter_node"] = inter;
  x["outcome"] = std::string(outcome_name(r.outcome));
  x["status"] = status_of(r);
  x["lower_bound_us"] = r.bound_us;
  if (r.outcome == MeshSearchRow::Outcome::kPlanned) {
    x["step_us"] = r.plan->objective_us;
    x["step_lower_bound_us"] = r.plan->lower_bound_us;
    x["peak_memory_bytes"] = r.plan->peak_memory_bytes;
    x["dim_use"] = r.dim_use;
  }
  if (!r.message.empty()) x["message"] = r.message;
  x["seconds"] = r.seconds;
  return x;
}

nlohmann::ordered_json pipeline_row_json(const PipelineSearchRow& r) {
  nlohmann::ordered_json x;
  x["mesh"] = r.mesh.shape();
  x["mesh_dims"] = r.mesh.names();
  x["outcome"] = r.plan ? "planned" : r.pruned_bound_us ? "pruned" : "error";
  if (r.plan) {
    x["schedule"] = std::string(schedule_name(r.plan->schedule));
    x["stages_per_rank"] = r.plan->v;
    x["step_us"] = r.plan->step_us;
    x["lower_bound_us"] = r.plan->lower_bound_us;
    x["peak_memory_bytes"] = rank_peak(r);
  } else if (r.pruned_bound_us) {
    x["lower_bound_us"] = *r.pruned_bound_us;
  } else {
    x["error"] = r.error;
  }
  x["seconds"] = r.seconds;
  return x;
}

/// The first pipelined row when it fits and beats the flat meshes' best; else null.
const PipelineSearchRow* pipelined_best(const std::vector<PipelineSearchRow>& pipe, const MeshSearchResult& res) {
  if (pipe.empty() || !pipe[0].fits()) return nullptr;
  return pipe[0].plan->step_us < flat_best_us(res) ? &pipe[0] : nullptr;
}

void print_json(const SearchArgs& a, const Graph& g, const MeshSearchOptions& o, const MeshSearchResult& res,
                const std::vector<PipelineSearchRow>& pipe) {
  nlohmann::ordered_json j;
  j["model"] = g.name;
  j["gpus"] = a.gpus;
  j["gpus_per_node"] = o.hardware.gpus_per_node;
  j["hardware"] = o.hardware.name;
  j["candidates"] = res.candidates;
  j["seconds"] = res.seconds;
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const MeshSearchRow& r : res.rows) arr.push_back(mesh_row_json(r));
  j["meshes"] = std::move(arr);
  if (!a.pp.empty()) {
    nlohmann::ordered_json parr = nlohmann::ordered_json::array();
    for (const PipelineSearchRow& r : pipe) parr.push_back(pipeline_row_json(r));
    j["pipelined_meshes"] = std::move(parr);
  }
  // The winner: a mesh and whether it is pipelined (null when no plan fits).
  nlohmann::ordered_json best;
  if (const PipelineSearchRow* p = pipelined_best(pipe, res)) {
    best = {{"mesh", p->mesh.shape()}, {"mesh_dims", p->mesh.names()}, {"pipelined", true}, {"step_us", p->plan->step_us}};
  } else if (res.best >= 0) {
    const MeshSearchRow& b = res.rows[static_cast<size_t>(res.best)];
    best = {{"mesh", b.mesh.shape()}, {"mesh_dims", b.mesh.names()}, {"pipelined", false}, {"step_us", b.plan->objective_us}};
  }
  j["best"] = std::move(best);
  std::cout << j.dump(2) << "\n";
}

/// The bound a row proves: its plan's (the solver's, at most its step), else the search's.
double row_bound(const MeshSearchRow& r) {
  return r.plan && r.outcome == MeshSearchRow::Outcome::kPlanned ? r.plan->lower_bound_us : r.bound_us;
}

void print_mesh_table(const MeshSearchResult& res) {
  fmt::print("{:>4}  {:<10} {:<36} {:<22} {:>11} {:>11} {:>11}  {:<14} {:>8}\n", "rank", "mesh", "dims",
             "use", "step time", "bound", "peak mem", "status", "time");
  for (size_t k = 0; k < res.rows.size(); ++k) {
    const MeshSearchRow& r = res.rows[k];
    const bool ok = r.outcome == MeshSearchRow::Outcome::kPlanned;
    const bool bounded = ok || r.outcome == MeshSearchRow::Outcome::kPruned || r.outcome == MeshSearchRow::Outcome::kTimedOut;
    fmt::print("{:>4}  {:<10} {:<36} {:<22} {:>11} {:>11} {:>11}  {:<14} {:>7.2f}s\n",
               ok ? std::to_string(k + 1) : std::string("-"), fmt::format("{}", fmt::join(r.mesh.shape(), "x")),
               describe_topology(r.mesh), ok ? fmt::format("{}", fmt::join(r.dim_use, ", ")) : std::string("-"),
               ok ? format_us(r.plan->objective_us) : "-", bounded ? format_us(row_bound(r)) : "-",
               ok ? format_bytes(r.plan->peak_memory_bytes) : "-", status_of(r), r.seconds);
  }
}

void print_pipeline_table(const std::vector<PipelineSearchRow>& pipe) {
  fmt::print("pipelined meshes (pp outermost, planned with stages):\n");
  fmt::print("{:>4}  {:<10} {:<36} {:<20} {:>11} {:>11} {:>11} {:>8}\n", "rank", "mesh", "dims", "schedule",
             "step time", "bound", "peak mem", "time");
  for (size_t k = 0; k < pipe.size(); ++k) {
    const PipelineSearchRow& r = pipe[k];
    if (r.pruned_bound_us) {
      fmt::print("{:>4}  {:<10} {:<36} {:<20} {:>11} {:>11} {:>11} {:>7.2f}s  pruned: cannot beat the best\n", "-",
                 fmt::format("{}", fmt::join(r.mesh.shape(), "x")), describe_topology(r.mesh), "-", "-",
                 format_us(*r.pruned_bound_us), "-", r.seconds);
      continue;
    }
    if (!r.plan) {
      fmt::print("{:>4}  {:<10} error: {}\n", "-", fmt::format("{}", fmt::join(r.mesh.shape(), "x")), one_line(r.error));
      continue;
    }
    fmt::print("{:>4}  {:<10} {:<36} {:<20} {:>11} {:>11} {:>11} {:>7.2f}s\n", k + 1,
               fmt::format("{}", fmt::join(r.mesh.shape(), "x")), describe_topology(r.mesh),
               fmt::format("{}{}", schedule_name(r.plan->schedule), r.plan->v > 1 ? fmt::format(" v={}", r.plan->v) : ""),
               format_us(r.plan->step_us), format_us(r.plan->lower_bound_us), format_bytes(rank_peak(r)), r.seconds);
  }
}

void print_text(const SearchArgs& a, const Graph& g, const MeshSearchOptions& o, const MeshSearchResult& res,
                const std::vector<PipelineSearchRow>& pipe) {
  int planned = 0, pruned = 0;
  for (const MeshSearchRow& r : res.rows) {
    planned += r.outcome == MeshSearchRow::Outcome::kPlanned;
    pruned += r.outcome == MeshSearchRow::Outcome::kPruned;
  }
  fmt::print("autoshard search: {} on {} x {} ({} per node): {} meshes, {} planned, {} pruned, {:.1f} s\n",
             g.name, a.gpus, o.hardware.name, o.hardware.gpus_per_node, res.candidates, planned,
             pruned, res.seconds);
  print_mesh_table(res);
  if (!a.pp.empty()) print_pipeline_table(pipe);
  const std::string per_node = a.gpus_per_node > 0 ? fmt::format(" --gpus-per-node {}", a.gpus_per_node) : "";
  if (const PipelineSearchRow* p = pipelined_best(pipe, res)) {
    fmt::print("best: mesh {} ({}), pipelined; plan it with: autoshard plan --mesh {} --mesh-dims {} --microbatches {}{}\n",
               fmt::join(p->mesh.shape(), "x"), describe_topology(p->mesh), fmt::join(p->mesh.shape(), "x"),
               fmt::join(p->mesh.names(), ","), p->plan->M, per_node);
  } else if (res.best >= 0) {
    const MeshSearchRow& b = res.rows[static_cast<size_t>(res.best)];
    fmt::print("best: mesh {} ({}); plan it with: autoshard plan --mesh {} --mesh-dims {}{}\n",
               fmt::join(b.mesh.shape(), "x"), describe_topology(b.mesh),
               fmt::join(b.mesh.shape(), "x"), fmt::join(b.mesh.names(), ","), per_node);
  }
}

int run_search(const SearchArgs& a) {
  if (!a.out_dir.empty()) check_output_dir(a.out_dir);
  Graph g = load_graph(a.src);
  MeshSearchOptions o = search_options(a);
  MeshSearchResult res;
  std::vector<PipelineSearchRow> pipe;
  {
    // On a terminal, one status line while the search runs (erased before the tables).
    std::optional<ProgressLine> line;
    if (isatty(STDERR_FILENO) && !a.quiet) line.emplace(stderr);
    if (line)
      o.on_progress = [&line](const MeshSearchProgress& p) {
        std::string t = fmt::format("[{:.0f} s] meshes {}/{}", p.elapsed_s, p.done, p.total);
        if (std::isfinite(p.best_us)) t += fmt::format(", best step {}", format_us(p.best_us));
        line->draw(p.elapsed_s, t, true);
      };
    res = search_meshes(g, o);
    pipe = pipelined_rows(a, o, res, line ? &*line : nullptr);
  }
  if (a.json)
    print_json(a, g, o, res, pipe);
  else
    print_text(a, g, o, res, pipe);
  const PipelineSearchRow* pipelined = pipelined_best(pipe, res);
  if (res.best < 0 && !pipelined) throw std::runtime_error("no mesh has a plan that fits the memory limit");
  if (!a.out_dir.empty() && pipelined) {
    const Graph mg = microbatch_graph(a.src, pipelined->plan->M);
    create_output_dir(a.out_dir);
    write_file_atomic(a.out_dir + "/placements.json",
                      write_pipeline_placements_json(*pipelined->plan, mg, pipelined->mesh));
    write_file_atomic(a.out_dir + "/plan.json",
                      pipeline_summary_json(*pipelined->plan, mg, pipelined->mesh).dump(1) + "\n");
  } else if (!a.out_dir.empty()) {
    const MeshSearchRow& b = res.rows[static_cast<size_t>(res.best)];
    create_output_dir(a.out_dir);
    write_file_atomic(a.out_dir + "/placements.json", write_placements_json(*b.plan, g, b.mesh));
    write_file_atomic(a.out_dir + "/plan.json", plan_summary_json(*b.plan, g, b.mesh).dump(2) + "\n");
  }
  return 0;
}

}  // namespace

void register_search(CLI::App& app) {
  auto a = std::make_shared<SearchArgs>();
  CLI::App* sub = app.add_subcommand(
      "search", "find the best mesh shape for N GPUs: plan every shape and rank them");
  add_graph_options(sub, a->src, "llama3-8b");
  sub->add_option("--gpus", a->gpus, "number of GPUs")->capture_default_str();
  sub->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node (default: the hardware's)");
  sub->add_option("--hardware", a->hardware, "hardware preset (a100, h100, h100-500w, h200, b200) or a hardware JSON file")
      ->capture_default_str();
  sub->add_option("--backend", a->backend, "communication backend: nccl or gloo")->capture_default_str();
  add_kernel_options(sub, a->kernels);
  sub->add_option("--comm-model", a->comm_model, "nccl (measured bandwidths) or dtensor")->capture_default_str();
  sub->add_option("--memory-limit", a->memory_limit, "per-device memory budget (default: the hardware's; 0: none)");
  sub->add_option("--max-dims", a->max_dims, "largest number of mesh dims (1 to 4)")->capture_default_str();
  sub->add_option("--time-limit", a->time_limit, "solver time limit per mesh, seconds")->capture_default_str();
  sub->add_option("--threads", a->threads, "meshes planned at once (0: one per core)")->capture_default_str();
  sub->add_flag("--no-prune", a->no_prune, "plan every mesh, even those whose lower bound cannot win");
  sub->add_option("-o,--out", a->out_dir, "write the best plan, flat or pipelined: DIR/placements.json and DIR/plan.json");
  sub->add_flag("--json", a->json, "print the ranking as JSON");
  sub->add_flag("-q,--quiet", a->quiet, "no progress line on stderr (drawn only on a terminal)");
  sub->add_option("--pp", a->pp,
                  "also rank meshes with a pipeline dim of these sizes, e.g. 2,4 (pp outermost, stages planned)");
  sub->add_option("--microbatches", a->microbatches, "with --pp: microbatches per step (default: the pp size)");
  sub->callback([a] { run_search(*a); });
}

}  // namespace autoshard::cli

#include "pipeline/pipeline_search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "pipeline/pipeline_layout.h"
#include "planner/mesh_search.h"

namespace autoshard {

namespace {

/// P x `stage` with pp outermost, every dim's links as the full mesh's layout gives them.
Mesh with_pp(int32_t P, const Mesh& stage, const Hardware& hw, CommBackend backend) {
  std::vector<int64_t> shape{P};
  std::vector<std::string> names{"pp"};
  for (int32_t d = 0; d < stage.ndim(); ++d) {
    if (stage.ndim() == 1 && stage.size(0) == 1) break;  // every stage is one device
    shape.push_back(stage.size(d));
    names.push_back(stage.dim(d).name);
  }
  return Mesh(shape, names, hw, backend);
}

/// Plans that fit, plans over the limit, pruned rows, errors.
int order_of(const PipelineSearchRow& r) {
  if (r.plan) return r.fits() ? 0 : 1;
  return r.pruned_bound_us ? 2 : 3;
}

}  // namespace

bool PipelineSearchRow::fits() const { return plan && pipeline_detail::ranks_fit(*plan); }

std::vector<PipelineSearchRow> search_pipeline_meshes(const std::function<Graph(int32_t)>& graph_for,
                                                      int64_t gpus, int max_dims, const Hardware& hw,
                                                      CommBackend backend, const PlannerOptions& opt,
                                                      const PipelineOptions& popt,
                                                      const std::vector<int32_t>& pp_sizes,
                                                      int32_t microbatches, double cutoff_us) {
  std::vector<PipelineSearchRow> rows;
  for (int32_t P : pp_sizes) {
    if (P < 2 || gpus % P != 0) continue;
    for (const Mesh& stage : enumerate_meshes(gpus / P, std::max(1, max_dims - 1), hw, backend)) {
      PipelineSearchRow r;
      r.mesh = with_pp(P, stage, hw, backend);
      rows.push_back(std::move(r));
    }
  }
  std::map<int32_t, Graph> graphs;  // by microbatch count: one per pp size at most
  const auto t0 = std::chrono::steady_clock::now();
  double best = cutoff_us;
  for (size_t k = 0; k < rows.size(); ++k) {
    PipelineSearchRow& r = rows[k];
    const int32_t M = microbatches > 0 ? microbatches : static_cast<int32_t>(r.mesh.size(0));
    auto g = graphs.find(M);
    if (g == graphs.end()) g = graphs.emplace(M, graph_for(M)).first;  // a bad batch split throws
    const auto t1 = std::chrono::steady_clock::now();
    try {
      PipelineOptions po = popt;
      po.microbatches = M;
      po.cutoff_us = best;
      if (popt.on_progress)  // the mesh's own reports, saying which mesh, timed from the search's start
        po.on_progress = [&popt, &t0, label = fmt::format("mesh {} ({}/{}): ", fmt::join(r.mesh.shape(), "x"), k + 1,
                                                           rows.size())](const PipelineProgress& p) {
          PipelineProgress q = p;
          q.searching = label + q.searching;
          q.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          popt.on_progress(q);
        };
      r.plan = plan_pipeline(g->second, r.mesh, opt, po);
      if (r.fits()) best = std::min(best, r.plan->step_us);
    } catch (const PipelineCutoff& c) {
      r.pruned_bound_us = c.lower_bound_us();
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  std::stable_sort(rows.begin(), rows.end(), [](const PipelineSearchRow& a, const PipelineSearchRow& b) {
    if (order_of(a) != order_of(b)) return order_of(a) < order_of(b);
    if (a.plan) return a.plan->step_us < b.plan->step_us;
    if (a.pruned_bound_us) return *a.pruned_bound_us < *b.pruned_bound_us;
    return false;
  });
  return rows;
}

}  // namespace autoshard

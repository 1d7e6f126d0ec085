#include "planner/mesh_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "ir/file_util.h"
#include "planner/clock.h"
#include "planner/parallel_for.h"
#include "planner/parallelism.h"
#include "planner/recipes.h"
#include "planner/sharding_optimizer.h"

namespace autoshard {

namespace {


/// Ordered factorizations of n into exactly k factors, each >= 2.
void factorize(int64_t n, int k, std::vector<int64_t>& cur, std::vector<std::vector<int64_t>>& out) {
  if (k == 0) {
    if (n == 1) out.push_back(cur);
    return;
  }
  for (int64_t f = 2; f <= n; ++f) {
    if (n % f != 0) continue;
    cur.push_back(f);
    factorize(n / f, k - 1, cur, out);
    cur.pop_back();
  }
}

/// 1-D: dp; else d0, d1, ... and the innermost dim tp (the Megatron seed's tensor-parallel
/// dim; the optimum is free to use any dim for anything).
std::vector<std::string> dim_names(size_t k) {
  if (k == 1) return {"dp"};
  std::vector<std::string> names;
  for (size_t i = 0; i + 1 < k; ++i) names.push_back(fmt::format("d{}", i));
  names.push_back("tp");
  return names;
}

/// Sum over nodes of the cheapest strategy plus, over edges, the cheapest pair: no assignment
/// can cost less.  Shared edge matrices are scanned once.
double cheap_lower_bound(const BuiltProblem& bp) {
  double lb = 0;
  for (const ProblemNode& n : bp.problem.nodes)
    if (!n.costs.empty()) lb += *std::min_element(n.costs.begin(), n.costs.end());
  std::unordered_map<const std::vector<Cost>*, double> seen;
  for (const BuiltProblem::Edge& e : bp.edges) {
    const auto* m = e.costs.get();
    auto it = seen.find(m);
    if (it == seen.end())
      it = seen.emplace(m, m->empty() ? 0.0 : *std::min_element(m->begin(), m->end())).first;
    if (std::isfinite(it->second)) lb += it->second;
  }
  return lb;
}

/// What the plan mostly does with each mesh dim, by parameter bytes.
std::vector<std::string> dim_use(const Graph& g, const Mesh& mesh, const Plan& plan) {
  std::vector<std::string> out;
  const ParallelismLabeler labels(g, mesh, plan);
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d) {
    std::map<std::string, int64_t> bytes;
    for (NodeIdx i = 0; i < g.size(); ++i) {
      if (g.node(i).kind != NodeKind::kParameter || !plan.nodes[static_cast<size_t>(i)]) continue;
      std::string l = labels.on_dim(i, d);
      if (l.starts_with("TP")) l = "TP";
      bytes[l] += g.node(i).out().bytes();
    }
    std::string best = "-";
    int64_t most = -1;
    for (const auto& [l, b] : bytes)
      if (b > most) most = b, best = l;
    out.push_back(best);
  }
  // Attention split on the sequence over a dim: context parallelism rides on that dim too.
  for (const ContextParallelUse& u : context_parallel_use(plan))
    if (!out[static_cast<size_t>(u.dim)].ends_with("+CP")) out[static_cast<size_t>(u.dim)] += "+CP";
  return out;
}

}  // namespace

std::vector<Mesh> enumerate_meshes(int64_t gpus, int max_dims, const Hardware& hw,
                                   CommBackend backend) {
  if (gpus < 1) throw std::invalid_argument(fmt::format("--gpus: expected >= 1, got {}", gpus));
  if (max_dims < 1)
    throw std::invalid_argument(fmt::format("--max-dims: expected >= 1, got {}", max_dims));
  std::vector<Mesh> meshes;
  if (gpus == 1) {
    meshes.emplace_back(std::vector<int64_t>{1}, dim_names(1), hw, backend);
    return meshes;
  }
  std::set<std::vector<int64_t>> seen;
  for (int k = 1; k <= max_dims; ++k) {
    std::vector<std::vector<int64_t>> shapes;
    std::vector<int64_t> cur;
    factorize(gpus, k, cur, shapes);
    for (std::vector<int64_t> s : shapes) {
      // Canonical member of the symmetry class: inter-node dims (a prefix) and intra-node
      // dims (a suffix) each in ascending size.
      Mesh m(s, dim_names(s.size()), hw, backend);
      size_t split = 0;
      while (split < s.size() && m.dim(static_cast<MeshDimIdx>(split)).inter_node) ++split;
      std::sort(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(split));
      std::sort(s.begin() + static_cast<std::ptrdiff_t>(split), s.end());
      if (seen.insert(s).second) meshes.emplace_back(s, dim_names(s.size()), hw, backend);
    }
  }
  return meshes;
}

std::string describe_topology(const Mesh& mesh) {
  std::vector<std::string> parts;
  for (MeshDimIdx d = 0; d < mesh.ndim(); ++d)
    parts.push_back(fmt::format("{}={}{}", mesh.dim(d).name, mesh.size(d),
                                mesh.size(d) == 1 ? "" : mesh.dim(d).inter_node ? " across" : " within"));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string_view outcome_name(MeshSearchRow::Outcome o) {
  switch (o) {
    case MeshSearchRow::Outcome::kPlanned: return "planned";
    case MeshSearchRow::Outcome::kOverBudget: return "over budget";
    case MeshSearchRow::Outcome::kPruned: return "pruned";
    case MeshSearchRow::Outcome::kTimedOut: return "timed out";
    case MeshSearchRow::Outcome::kError: return "error";
  }
  return "?";
}

namespace {

/// The best step that fits among the meshes planned so far, shared by the search's threads.
struct SharedBest {
  std::mutex mu;
  double step_us = kInfCost;
};

/// Step 2 of the search for one mesh: pruned on its cheap bound, else solved with the best so
/// far as the cutoff (pruned by the solver's bound, or planned, over budget, timed out).
void plan_candidate(const Graph& g, const Mesh& mesh, const PlannerOptions& po, bool prune, SharedBest& best,
                    MeshSearchRow& r) {
  double cutoff = kInfCost;
  {
    // One look at the best so far: prune on the static bound, else solve with it as the
    // cutoff.
    std::lock_guard<std::mutex> lock(best.mu);
    if (prune && r.bound_us >= best.step_us) {
      r.outcome = MeshSearchRow::Outcome::kPruned;
      r.message = fmt::format("lower bound {:.1f} us >= best {:.1f} us", r.bound_us, best.step_us);
      return;
    }
    if (prune) cutoff = best.step_us;
  }
  auto t1 = std::chrono::steady_clock::now();
  // The solver stops as soon as it proves that this mesh cannot beat the best so far.
  PlannerOptions mo = po;
  mo.cutoff_us = cutoff;
  RecipeResult opt = plan_recipe(Recipe::kAlpa, g, mesh, mo);
  // Pruned by the solver: its bound reaches the best so far (a proven optimum that fits
  // is listed as planned, which costs nothing more).
  if (opt.lower_bound_us >= cutoff &&
      !(opt.plan && opt.plan->status == SolveStatus::kOptimal && opt.fits)) {
    r.outcome = MeshSearchRow::Outcome::kPruned;
    r.bound_us = opt.lower_bound_us;
    r.message = fmt::format("the solver's lower bound {:.1f} us >= best {:.1f} us",
                            r.bound_us, cutoff);
    r.seconds += seconds_since(t1);
    return;
  }
  if (mesh.ndim() >= 2 && !(opt.plan && opt.plan->status == SolveStatus::kOptimal)) {
    // Stopped by the time limit: the Megatron recipe (pinned, so small and solved
    // exactly) is one assignment of the same problem, and the mesh's answer is never
    // worse than it.
    RecipeResult seed = plan_recipe_that_fits(Recipe::kMegatron, g, mesh, po);
    if (seed.plan && seed.fits &&
        !(opt.plan && opt.fits && opt.plan->objective_us <= seed.plan->objective_us))
      opt = std::move(seed);
  }
  if (opt.plan && opt.fits) {
    r.outcome = MeshSearchRow::Outcome::kPlanned;
    r.dim_use = dim_use(g, mesh, *opt.plan);
    std::lock_guard<std::mutex> lock(best.mu);
    best.step_us = std::min(best.step_us, opt.plan->objective_us);
  } else if (opt.plan) {
    r.outcome = MeshSearchRow::Outcome::kOverBudget;
    opt.plan->min_peak_memory_bytes = opt.plan->peak_memory_bytes;
  } else if (opt.error.find("timed-out") != std::string::npos) {
    r.outcome = MeshSearchRow::Outcome::kTimedOut;
    r.message = fmt::format("no plan within the time limit of {} s", po.time_limit_s);
  } else {
    r.outcome = MeshSearchRow::Outcome::kError;
    r.message = opt.error;
  }
  r.plan = std::move(opt.plan);
  r.seconds += seconds_since(t1);
}

}  // namespace

MeshSearchResult search_meshes(const Graph& g, const MeshSearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Mesh> meshes = enumerate_meshes(o.gpus, o.max_dims, o.hardware, o.backend);
  MeshSearchResult res;
  res.candidates = static_cast<int64_t>(meshes.size());
  std::vector<MeshSearchRow> rows(meshes.size());
  PlannerOptions po = o.planner;
  po.progress = nullptr;  // meshes are planned at once: progress lines would interleave
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(meshes.size())));

  auto run_pool = [&](const std::function<void(size_t)>& job, const std::vector<size_t>& order) {
    parallel_for(order.size(), threads, [&](size_t k) { job(order[k]); });
  };
  std::vector<size_t> all(meshes.size());
  for (size_t k = 0; k < all.size(); ++k) all[k] = k;

  // 1. Bounds from the node costs alone.
  run_pool(
      [&](size_t k) {
        auto t1 = std::chrono::steady_clock::now();
        MeshSearchRow& r = rows[k];
        r.mesh = meshes[k];
        try {
          ShardingOptimizer so(g, meshes[k], po);
          r.bound_us = cheap_lower_bound(so.problem());
        } catch (const std::exception& e) {
          r.outcome = MeshSearchRow::Outcome::kError;
          r.message = one_line(e.what());
          r.bound_us = kInfCost;
        }
        r.seconds = seconds_since(t1);
      },
      all);

  // 2. Plan in increasing bound order; a mesh whose bound cannot beat the best so far is
  // skipped.
  std::vector<size_t> order;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k].message.empty()) order.push_back(k);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rows[a].bound_us < rows[b].bound_us; });
  SharedBest best;
  MeshSearchProgress progress;
  progress.total = static_cast<int32_t>(meshes.size());
  progress.done = static_cast<int32_t>(meshes.size() - order.size());  // the errors of step 1
  run_pool(
      [&](size_t k) {
        plan_candidate(g, meshes[k], po, o.prune, best, rows[k]);
        const std::lock_guard<std::mutex> lock(best.mu);
        ++progress.done;
        progress.best_us = best.step_us;
        progress.elapsed_s = seconds_since(t0);
        if (o.on_progress) o.on_progress(progress);
      },
      order);

  // 3. Rank.
  auto rank = [](const MeshSearchRow& r) { return static_cast<int>(r.outcome); };
  std::stable_sort(rows.begin(), rows.end(), [&](const MeshSearchRow& a, const MeshSearchRow& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    switch (a.outcome) {
      case MeshSearchRow::Outcome::kPlanned: return a.plan->objective_us < b.plan->objective_us;
      case MeshSearchRow::Outcome::kOverBudget:
        return a.plan->min_peak_memory_bytes < b.plan->min_peak_memory_bytes;
      case MeshSearchRow::Outcome::kPruned:
      case MeshSearchRow::Outcome::kTimedOut: return a.bound_us < b.bound_us;
      case MeshSearchRow::Outcome::kError: return false;
    }
    return false;
  });
  res.rows = std::move(rows);
  if (!res.rows.empty() && res.rows[0].outcome == MeshSearchRow::Outcome::kPlanned) res.best = 0;
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace autoshard

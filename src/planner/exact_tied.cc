#include "planner/exact_tied.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "solver/anytime.h"

namespace autoshard {

std::vector<StrategyIdx> ExactTiedProblem::extend(const std::vector<StrategyIdx>& class_choice) const {
  if (class_choice.size() != static_cast<size_t>(num_classes)) return {};
  std::vector<StrategyIdx> x = class_choice;
  for (size_t s = 0; s < shadow_class.size(); ++s)
    x.push_back(shadow_choice[s][static_cast<size_t>(class_choice[static_cast<size_t>(shadow_class[s])])]);
  return x;
}

std::vector<StrategyIdx> ExactTiedProblem::classes(const std::vector<StrategyIdx>& choice) const {
  if (choice.size() < static_cast<size_t>(num_classes)) return {};
  return {choice.begin(), choice.begin() + num_classes};
}

ExactTiedProblem exact_memory_tied_problem(const Problem& full, const ClusteredProblem& cp) {
  ExactTiedProblem et;
  Problem& e = et.problem;
  e = cp.problem;
  e.usage_limit = full.usage_limit;
  et.num_classes = cp.problem.num_nodes();
  const size_t classes = cp.problem.nodes.size();
  std::vector<std::vector<PNodeIdx>> members(classes);
  for (size_t v = 0; v < cp.class_of.size(); ++v)
    members[static_cast<size_t>(cp.class_of[v])].push_back(static_cast<PNodeIdx>(v));
  for (size_t c = 0; c < classes; ++c) {
    const std::vector<PNodeIdx>& ms = members[c];
    const size_t k = e.nodes[c].usages.size();
    for (PNodeIdx v : ms)
      if (full.nodes[static_cast<size_t>(v)].usages.size() != k)
        throw std::invalid_argument("exact_memory_tied_problem: class " + std::to_string(c) +
                                    " has members with different strategy counts");
    if (ms.empty()) continue;
    const ProblemNode& first = full.nodes[static_cast<size_t>(ms[0])];
    e.nodes[c].usages = first.usages;
    e.nodes[c].start = first.start;
    e.nodes[c].end = first.end;
    for (size_t i = 1; i < ms.size(); ++i) {
      const ProblemNode& m = full.nodes[static_cast<size_t>(ms[i])];
      if (m.end <= m.start) continue;  // never live
      std::vector<int64_t> values = m.usages;
      std::sort(values.begin(), values.end());
      values.erase(std::unique(values.begin(), values.end()), values.end());
      std::vector<StrategyIdx> pick(k);
      for (size_t s = 0; s < k; ++s)
        pick[s] = static_cast<StrategyIdx>(std::lower_bound(values.begin(), values.end(), m.usages[s]) - values.begin());
      const PNodeIdx shadow = e.num_nodes();
      e.nodes.push_back({"", std::vector<Cost>(values.size(), 0), values, m.start, m.end});
      if (values.size() > 1) {
        ProblemEdge tie{static_cast<PNodeIdx>(c), shadow, std::vector<Cost>(k * values.size(), kInfCost)};
        for (size_t s = 0; s < k; ++s) tie.costs[s * values.size() + static_cast<size_t>(pick[s])] = 0;
        e.edges.push_back(std::move(tie));
      }
      et.shadow_class.push_back(static_cast<PNodeIdx>(c));
      et.shadow_choice.push_back(std::move(pick));
    }
  }
  return et;
}

namespace {
/// Share of the search's time given to the memory-aware bound (LP branch and bound on these
/// models): on llama3-8b 2x8 at 20 GiB the search finds a plan within 1% of the optimum in
/// about 1 s, and the branch and bound needs about 3 s to build and solve its root LP and
/// close the gap below 1 % (docs/benchmarks.md, "Round 6").
constexpr double kBoundShare = 0.75;
/// Up to this size the exact model goes to solve() (whose MIP proves optimality); beyond it
/// the memory rows, which list every live shadow at every time point, grow quadratically.
constexpr PNodeIdx kMipNodes = 3000;
constexpr int64_t kMipVariables = 200'000;
}  // namespace

SolveResult solve_exact_tied(const ExactTiedProblem& et, const SolverOptions& opt, bool allow_mip) {
  if (allow_mip && et.problem.num_nodes() <= kMipNodes && alpa_variable_count(et.problem) <= kMipVariables) {
    // Small enough for the exact solver (reductions, MIP with memory rows).
    SolveResult r = solve(et.problem, opt);
    r.choice = et.classes(r.choice);
    return r;
  }
  const auto t0 = std::chrono::steady_clock::now();
  AnytimeOptions ao;
  ao.time_limit_s = opt.time_limit_s;
  ao.threads = std::max(1, opt.threads);
  ao.cutoff = opt.cutoff;
  ao.memory_bound_share = kBoundShare;
  ao.gap = opt.mip_gap;
  if (opt.warm_start.size() == static_cast<size_t>(et.problem.num_nodes())) ao.warm_start = opt.warm_start;
  if (opt.progress) ao.progress = [&](const std::string& m) { opt.progress(m); };
  const AnytimeResult ar = solve_anytime(et.problem, ao);
  SolveResult r;
  r.method = "anytime search (exact tied memory)";
  r.reduced_nodes = et.problem.num_nodes();
  r.reduced_edges = et.problem.num_edges();
  r.lower_bound = ar.lower_bound;
  if (ar.feasible) {
    r.choice = et.classes(ar.choice);
    r.objective = ar.cost;
    r.peak_usage = peak_usage(et.problem, ar.choice);
    r.lower_bound = std::min(r.lower_bound, r.objective);
    r.gap = (r.objective - r.lower_bound) / std::max(std::abs(r.objective), 1e-9);
    r.status = r.gap <= std::max(opt.mip_gap, kProofTolerance) ? SolveStatus::kOptimal : SolveStatus::kFeasible;
  } else if (!(ar.lower_bound < kInfCost)) {
    r.status = SolveStatus::kInfeasible;  // some class has no finite-cost strategy left
  }
  r.phase_seconds.emplace_back("anytime", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return r;
}

}  // namespace autoshard

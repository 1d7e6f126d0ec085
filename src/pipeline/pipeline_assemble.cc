#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/pipeline_choice.h"
#include "pipeline/pipeline_layout.h"
#include "pipeline/pipeline_timeline.h"

/// Assembling the chosen split: each stage with its plan under its rank's memory, the ranks'
/// peaks, the per-node stages and full-mesh placements, and the fastest candidate that fits.
namespace autoshard::pipeline_detail {

namespace {

/// Full-mesh strategy: R inserted on the pp dim of every spec.
Strategy with_pp(const Strategy& s, const Mesh& mesh, int32_t pp) {
  Strategy r = s;
  for (auto* list : {&r.outputs, &r.inputs})
    for (ShardingSpec& spec : *list) {
      if (mesh.ndim() == 1) spec.placements = {Placement::replicate()};
      else spec.placements.insert(spec.placements.begin() + pp, Placement::replicate());
    }
  // A context-parallel attention's dim indexes the stage mesh: shift it past the pp dim.
  if (r.cp.active() && r.cp.mesh_dim >= pp) ++r.cp.mesh_dim;
  return r;
}

/// The stages of the chosen split, each with its plan under its rank's memory.
void assemble(Search& S, const Layout& l, PipelinePlan& pl, const std::vector<int32_t>& layers) {
  const int32_t n = static_cast<int32_t>(layers.size());
  for (int32_t s = 0, lo = 0; s < n; lo += layers[psz(s)], ++s) {
    PipelineStage st;
    st.index = s;
    st.pp_rank = stage_rank(pl.schedule, pl.P, s);
    st.lo = lo;
    st.hi = lo + layers[psz(s)];
    st.first = s == 0;
    st.last = s == n - 1;
    st.solve = S.solver.fitted(kind_of(s, n), layers[psz(s)], l.planned(s, layers[psz(s)]));
    st.inflight = l.inflight[psz(s)];
    st.deferred = deferred_microbatches(pl.schedule, pl.P, pl.v, pl.M, st.pp_rank);
    pl.stages.push_back(st);
  }
  rank_peaks(pl);
  // A memory-free layout's candidate (plan_pipeline) is kept as it is or not at all.
  const bool limited = l.limit > 0 && pl.memory_limit_bytes > 0;
  // A rank with more layers than the balanced share is over the limit: each of its stages'
  // budget becomes its need scaled so that the rank's add up to the limit (the least change
  // to the plans).  The re-plans of all ranks at once, on threads.
  std::vector<StageRequest> again;
  std::vector<PipelineStage*> replanned;
  for (PipelineStage& st : pl.stages) {
    const int64_t peak = pl.rank_peak_bytes[psz(st.pp_rank)];
    if (l.v == 1 || !limited || peak <= pl.memory_limit_bytes) continue;
    const double scale = static_cast<double>(pl.memory_limit_bytes) / static_cast<double>(peak);
    const StageMemory was = l.planned(st.index, st.hi - st.lo);
    const double need = StageBuilder::need_bytes(*st.solve, was.inflight, true);
    again.push_back(StageRequest{kind_of(st.index, n), st.hi - st.lo,
                                 StageMemory{was.inflight, static_cast<int64_t>(need * scale), true, false}});
    replanned.push_back(&st);
  }
  if (!again.empty()) {
    S.solver.prefetch_fitted(again);
    for (size_t i = 0; i < again.size(); ++i) {
      const auto& [kind, k, mem] = again[i];
      auto plan = S.solver.fitted(kind, k, mem);
      if (std::isfinite(plan->microbatch_us)) replanned[i]->solve = plan;
    }
    rank_peaks(pl);
  }
  // The refit also serves a memory-free layout's candidate: recomputation may bring its ranks
  // under the limit where no share of it had a plan.
  if (pl.memory_limit_bytes > 0 && S.popt.refit_ranks) refit_ranks(S, pl);
  for (int32_t r = 0; r < pl.P; ++r)
    if (pl.memory_limit_bytes > 0 && pl.rank_peak_bytes[psz(r)] > pl.memory_limit_bytes)
      pl.warnings.push_back(fmt::format("pp rank {} needs {} bytes per device with its in-flight activations, "
                                        "over the {} byte limit", r, pl.rank_peak_bytes[psz(r)], pl.memory_limit_bytes));
}

}  // namespace

void map_nodes(const Search& S, PipelinePlan& pl) {
  pl.node_stage.assign(psz(S.g.size()), -1);
  pl.node_strategy.assign(psz(S.g.size()), std::nullopt);
  bool disagree = false;
  for (PipelineStage& st : pl.stages) {
    const StageGraph real = extract_stage(S.g, S.m, st.lo, st.hi);
    const StageSolve& sv = *st.solve;
    if (!same_structure(real.graph, sv.sg.graph))
      throw std::logic_error(fmt::format("pipeline: stage [{}, {}) differs from its solved stage", st.lo, st.hi));
    st.nodes.assign(psz(real.graph.size()), -1);
    for (NodeIdx j = 0; j < real.graph.size(); ++j) {
      const NodeIdx full = real.origin[psz(j)];
      if (full >= 0 && !real.received[psz(j)]) st.nodes[psz(j)] = full;
      const auto& np = sv.plan.nodes[psz(j)];
      if (full < 0 || real.received[psz(j)] || !np) continue;
      const bool shared = S.m.pos[psz(full)] == LayerMap::kShared;
      pl.node_stage[psz(full)] = shared ? -1 : st.index;
      Strategy s = with_pp(np->chosen, S.mesh, S.pp);
      auto& slot = pl.node_strategy[psz(full)];
      if (!slot) slot = std::move(s);
      else if (slot->name() != s.name()) disagree = true;
    }
  }
  if (disagree)
    pl.warnings.push_back("stages plan a shared node (a buffer every stage copies) differently; "
                          "placements.json lists the first stage's");
}

namespace {

/// What the schedule's fill, drain and waits add to the busiest rank's own work.
void set_bubble(PipelinePlan& pl) {
  std::vector<double> costs;
  for (const PipelineStage& st : pl.stages) costs.push_back(st.solve->microbatch_us);
  pl.bubble_us = pl.step_us - pipelined_step_us(pl.schedule, costs, pl.P, pl.v, pl.M, 0.0);
}

/// `head` with candidate c's stages assembled (assemble may re-plan a rank for memory), its
/// step the schedule's timeline and its bubble what that adds to the busiest rank's own work.
PipelinePlan assembled(Search& S, const PipelinePlan& head, const ScheduleCandidate& c) {
  PipelinePlan pl = head;
  pl.schedule = c.schedule;
  pl.v = c.v;
  // The split's sizes that were evaluated as patterns are solved now (a solve may find better).
  std::vector<StageRequest> keys;
  const int32_t n = static_cast<int32_t>(c.e.layers.size());
  for (int32_t s = 0; s < n; ++s) keys.push_back(StageRequest{kind_of(s, n), c.e.layers[psz(s)], c.l.planned(s, c.e.layers[psz(s)])});
  S.solver.refine(keys);
  assemble(S, c.l, pl, c.e.layers);
  pl.step_us = stage_timeline(pl).makespan_us;
  // A fixed split (a recipe's) keeps its layers.
  if (S.popt.refit_ranks && S.popt.fixed_layers.empty() && pl.memory_limit_bytes > 0 && ranks_fit(pl))
    balance_ranks(S, pl, S.popt.balance_moves);
  set_bubble(pl);
  return pl;
}

}  // namespace

PipelinePlan fastest_that_fits(Search& S, const PipelinePlan& head, const std::vector<ScheduleCandidate>& cands) {
  std::vector<double> pre;
  for (const ScheduleCandidate& c : cands) pre.push_back(c.e.step_us);
  std::map<size_t, PipelinePlan> made;
  const size_t keep = fastest_fitting(pre, [&](size_t i) {
    const PipelinePlan& pl = made.emplace(i, assembled(S, head, cands[i])).first->second;
    if (const auto& say = S.solver.builder().options().progress) {
      std::string over;
      for (int32_t r = 0; r < pl.P; ++r)
        if (pl.memory_limit_bytes > 0 && pl.rank_peak_bytes[psz(r)] > pl.memory_limit_bytes)
          over += fmt::format(" {}:{:.2f}", r, static_cast<double>(pl.rank_peak_bytes[psz(r)]) / (1 << 30));
      say(fmt::format("  assembled {} v={}: {:.3f} ms{}", schedule_name(pl.schedule), pl.v, pl.step_us / 1e3,
                      over.empty() ? std::string(", every rank fits") : ", ranks over the limit (GiB):" + over));
    }
    const bool fit = ranks_fit(pl);
    // A memory-free layout's plan counts only where its ranks fit (plan_pipeline).
    return AssembledFigures{cands[i].l.limit <= 0 && pl.memory_limit_bytes > 0 && !fit ? kPipeInf : pl.step_us, fit};
  });
  PipelinePlan pl = std::move(made.at(keep));
  // The trade on the kept plan only: it costs a few refits per stage and round.
  if (S.popt.refit_ranks && S.popt.trade_ranks && pl.memory_limit_bytes > 0) {
    trade_ranks(S, pl);
    set_bubble(pl);
  }
  return pl;
}

}  // namespace autoshard::pipeline_detail

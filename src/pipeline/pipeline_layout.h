#pragma once
/// The pipeline search's shared state (pipeline/pipeline.cc searches splits,
/// pipeline/pipeline_assemble.cc turns the chosen one into stages): one (schedule, v)'s layout
/// of stage kinds and memory, the split tables read from the stage catalog
/// (pipeline_layout.cc), and a split's figures.  Internal to the pipeline library.
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/pipeline_dp.h"
#include "pipeline/pipeline_solve.h"

namespace autoshard::pipeline_detail {

inline constexpr double kPipeInf = std::numeric_limits<double>::infinity();
inline size_t psz(int64_t i) { return static_cast<size_t>(i); }

/// One (schedule, v) of the search: its stages' kinds and memory (per stage position).
struct Layout {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int32_t v = 1, n = 1, P = 1, L = 1;
  int64_t limit = 0;            ///< per device; 0: none
  /// Per position: microbatches of its own activations its rank keeps at the rank's peak
  /// (stage_inflight_microbatches).
  std::vector<double> inflight;
  /// Per position, what its stage is planned for: the most in flight over the positions of
  /// its kind, so that one plan per (kind, layers) serves every rank (a plan that fits more in
  /// flight fits fewer).
  std::vector<double> planned_inflight;
  /// The budgets are a relaxation of the rank's memory (one stage per rank): bounds of solves
  /// under them hold.  With v stages per rank they are shares of it, which are not.
  bool budget_is_relaxation() const { return v == 1; }
  /// A stage of k layers: the limit with one stage per rank, else its layers' share of the
  /// limit at the balanced L / P layers per rank (stages of one rank then add up to the limit
  /// when the split is balanced; assemble() re-plans a rank over the limit).
  int64_t budget(int32_t k) const;
  /// With one stage per rank the budget holds the step's summed gradients too; with v, the
  /// rank's assembly counts them (its shares are no relaxation either way).
  StageMemory actual(int32_t s, int32_t k) const { return {inflight[psz(s)], budget(k), v == 1}; }
  StageMemory planned(int32_t s, int32_t k) const { return {planned_inflight[psz(s)], budget(k), v == 1, v == 1}; }
};

/// Everything one plan_pipeline call shares: the graph, the meshes and the solved stages.
struct Search {
  const Graph& g;
  const Mesh& mesh;
  const PipelineOptions& popt;
  const LayerMap& m;
  StageSolver& solver;
  int32_t pp = 0, P = 1, L = 0;

  /// Per kind, the least a layer can add to a stage (StageSolve::layer_floor_us of its samples).
  double floor_of(StageKind kind) const;
  /// Memory-free lower bounds of a kind per k from its samples: chords between them
  /// (concavity), and above the largest its bound plus layer_floor_us per further layer.
  std::vector<double> chord_bounds(StageKind kind, int32_t K) const;
  /// Per stage position and k, the least time of the stage's forward (StageSolve::
  /// forward_floor_us, affine in k: every layer adds its forward ops' floor), from the kind's
  /// smallest sample; 0 where the kind has none.
  StageCostTable forward_table(const Layout& l) const;
  /// Lower bounds per stage position and k: the memory-free chords, and where the budgets are
  /// a relaxation the fitted solves' bounds (monotone: a stage with more layers, more in flight
  /// or less memory costs no less).
  StageCostTable lower_table(const Layout& l) const;
  /// Solved costs per stage position and k that fit its planned memory (+inf elsewhere): a
  /// fitted solve of as many in flight or more and no more memory, or the memory-free plan
  /// when it fits.
  StageCostTable upper_table(const Layout& l) const;
};

/// Step time of a split and its lower bound, for one (schedule, v).
struct Evaluated {
  std::vector<int32_t> layers;
  double step_us = kPipeInf, lower_bound_us = 0;
};

/// A (schedule, v) and its best split, before assembly.
struct ScheduleCandidate {
  Evaluated e;
  Layout l;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int32_t v = 1;
};

/// The layout of (schedule, v) for P ranks, L layers, M microbatches under `limit` per device.
Layout layout_of(PipelineSchedule sched, int32_t P, int32_t L, int32_t v, int32_t M, int64_t limit);

/// The rank-level Lagrangian relaxation of memory (pipeline/pipeline_rank_bound.cc): one price
/// for a search's layouts and the sampled stage sizes and in-flight counts its priced floors
/// were solved at.  lambda 0: none (no layout with v > 1 under a binding limit).
struct RankPricing {
  double lambda = 0;  ///< us per byte at t*
  /// In-flight counts sampled (ascending): every stage's where the layouts have at most four
  /// distinct ones; else the least and the most of all layouts, and the least of those with
  /// v > 1 (so that one stage per rank, down to 1 in flight, does not widen the interleaved
  /// layouts' chords).
  std::vector<double> fs;
  double d_hi = 0;            ///< microbatches handed to W sampled besides none
  std::vector<int32_t> sizes;
};
/// Solves the priced floors of every stage kind for `layouts` (those with a limit).
RankPricing rank_pricing(Search& S, const std::vector<Layout>& layouts);
/// Per pp rank q and layers n (index n), a lower bound of rank q's work R_q when its stages
/// together fit the device limit (with v == 1, its one stage's); empty without a price.
RankFloors rank_memory_floors(Search& S, const Layout& l, const RankPricing& rp);

/// What a pp rank needs per device.  A rank runs one stage's op at a time, so a stage holds
/// its one-microbatch peak only while it runs; while another runs it holds its usage at t*
/// (its state and one microbatch's kept activations, StageSolve::boundary_bytes), its other
/// microbatches in flight, its summed gradients and hand-overs to W.  So the rank needs what
/// its stages hold (`held`: StageBuilder::rank_need_bytes less StageSolve::transient_bytes,
/// each) plus the most passing work of one (`passing`), not the sum of their peaks: on
/// llama3-405b 8x16x8 four 4-layer stages of a rank hold 5.4 GB of passing work, one of them
/// at a time (pipeline/pipeline_refit.cc).  With one stage per rank it is that stage's need.
struct RankNeed {
  double held = 0, passing = 0;
  double passing_sum = 0;  ///< every stage's passing work
  void add(const StageSolve& s, double inflight, double deferred);
  /// A stage that needs `need` bytes of its rank, `transient` of them passing work.
  void add(double need, double transient);
  double total() const { return held + passing; }
  /// How much more than total() the stages' needs add up to.
  double unheld() const { return passing_sum - passing; }
};
/// One way to plan a stage in the rank trade: its sharding refit to `budget` (-1: its plan
/// now), with the figures the choice needs.  Only figures are kept: a refit plan holds its
/// stage's optimizer, and a rank's ladders of long stages would hold gigabytes (llama3-405b at
/// seq 131072: 16-layer 1F1B stages).
struct TradeOption {
  int64_t budget = -1;
  double us = 0;         ///< its microbatch time
  double need = 0;       ///< what it needs of its rank (StageBuilder::rank_need_bytes)
  double transient = 0;  ///< of which passing work (StageSolve::transient_bytes)
};
/// Per stage of a rank (options[i][0] its plan now), the option of least total work whose
/// RankNeed fits `limit`, where that is less work than now; empty otherwise.  Every
/// combination is tried, in a fixed order; above 65536 the longest ladders lose their last
/// options first.
std::vector<TradeOption> least_work_that_fits(std::vector<std::vector<TradeOption>> options, double limit);
/// RankNeed of `pl`'s stages on rank `r`, stage `skip` left out.
RankNeed rank_need(const PipelinePlan& pl, int32_t r, int32_t skip = -1);
/// Per pp rank, the peak per device of `pl`'s stages (PipelinePlan::rank_peak_bytes): RankNeed.
void rank_peaks(PipelinePlan& pl);
/// Every rank fits the plan's limit (or there is none).
bool ranks_fit(const PipelinePlan& pl);
/// The rank refit (pipeline/pipeline_refit.cc) of `ranks` (empty: all), then rank_peaks.
void refit_ranks(Search& S, PipelinePlan& pl, const std::vector<int32_t>& ranks = {});
/// The rank balance (pipeline/pipeline_refit.cc): while the timeline shrinks, one layer moved
/// from a stage of the busiest rank to a neighbouring stage of another rank, both planned for
/// their ranks; at most `max_moves` moves tried.  Sets pl.step_us when it moves one.
void balance_ranks(Search& S, PipelinePlan& pl, int32_t max_moves);
/// The rank trade (pipeline/pipeline_refit.cc): each rank's stages re-choose their
/// recomputation together, the least work whose rank need fits the limit; kept where the
/// timeline shortens (then pl.step_us is set).
void trade_ranks(Search& S, PipelinePlan& pl);

/// Of `cands` (in the order their pre-assembly steps rank them, pipeline/pipeline_choice.h),
/// the fastest whose assembled ranks fit the memory, assembled onto `head`.
PipelinePlan fastest_that_fits(Search& S, const PipelinePlan& head, const std::vector<ScheduleCandidate>& cands);
/// Per full-graph node: stage and full-mesh placements, from the stages' plans by position.
void map_nodes(const Search& S, PipelinePlan& pl);

}  // namespace autoshard::pipeline_detail

#pragma once
/// Pipeline parallelism as a planner decision: for a mesh with a dim named `pp` of size P, the
/// layers are cut into P * v contiguous stages (v stages per rank for interleaved schedules),
/// each stage gets its own intra-operator plan on the mesh without the pp dim, and the
/// schedule (pipeline/pipeline_schedule.h) turns the stages' times into the pipelined step.
///
/// Joint optimisation (Alpa's inter-op DP over intra-op optima, Zheng et al., OSDI'22 §5):
/// a stage's time c(k, first, last) for one microbatch is the intra-op optimum of its subgraph
/// (pipeline/pipeline_stage.h) planned with the once-per-step work weighted 1 / M
/// (PlannerOptions::optimizer_cost_scale), with the point-to-point sends of its boundary
/// tensors over the pp link in the objective (PlannerOptions::output_costs: latency + local
/// bytes / bandwidth of the pp dim, the forward activation and the backward gradient, each
/// microbatch), so the intra-op plan weighs how it shards what it sends.  The DP
/// (pipeline/pipeline_dp.h) picks the split.
///
/// How many intra-op solves.  With identical layers the stage cost depends on (k, holds-first,
/// holds-last) only: at most 3 (L - S + 1) distinct stage problems instead of Alpa's L^2 / 2
/// layer ranges.  Fewer are solved: with the layers tied (one decision per layer class, as the
/// planner ties them) and no memory limit, a stage's cost under fixed decisions is affine in k,
/// so the optimum min_d (a_d + k b_d) is concave in k and non-decreasing (b_d >= 0).  Between
/// two solved k the chord of their proven lower bounds is a lower bound, above the largest its
/// bound plus the cheapest cost of the added layers' nodes.  The search solves k = 1, 2, the
/// balanced k = ceil(L / S) and ceil(L / P) + 2 per stage kind, runs the DP on
/// those lower bounds (a lower bound of the pipelined step: the DP is monotone in stage costs)
/// and on the solved costs (a plan), solves the stages the lower-bound split uses, and repeats
/// until the gap is below PipelineOptions::target_gap or nothing new is left to solve; sizes
/// between two solved sizes of one plan pattern are evaluated instead (pipeline/stage_pattern.h,
/// StageSolver::free): typically 4 to 6 solves per stage kind, shared by the schedules,
/// independent of L and P (a stage problem grows with its k ~ L / S, but tied layers keep its
/// solve near one layer's), and independent ones run on threads.
///
/// Memory (pipeline/pipeline_solve.h, pipeline/stage_fit.cc, planner/inflight_memory.h).  A stage s keeps
/// f_s of its microbatches in flight at its rank's peak (stage_inflight_microbatches: with one
/// stage per rank the schedule's count f_r, with v per rank their share of v f_r on torch's op
/// order); its memory is its one-microbatch peak plus (f_s - 1) x what one microbatch keeps
/// for its backward after recomputation.  Each
/// stage gets the device limit (with v stages per rank, its layers' share of it at L / P layers
/// per rank; assemble re-plans the stages of a rank over the limit with their needs scaled to
/// it).  A stage whose memory-free
/// plan does not fit is planned with its kept activations counted f times, so the solver's
/// recomputation trades recompute time against the in-flight memory; that model is a
/// relaxation of the in-flight constraint, so its bounds hold, and its plan is checked
/// against the exact peak.  With one stage per rank the fitted solves' bounds enter the DP's
/// lower bounds (costs are non-decreasing in layers and in-flight count); with v > 1 the
/// budget split is not a relaxation: the memory-free bounds do, each rank's work raised to
/// its rank-level Lagrangian floor (pipeline/pipeline_rank_bound.cc).  One plan per
/// (kind, layers) is made for the most in flight among the positions of that kind.
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "pipeline/backward_split.h"
#include "planner/options.h"
#include "pipeline/pipeline_progress.h"
#include "pipeline/pipeline_schedule.h"
#include "pipeline/pipeline_stage.h"
#include "pipeline/pipeline_timeline.h"
#include "planner/plan.h"

namespace autoshard {

class ShardingOptimizer;

struct PipelinePlan;

/// How plan_pipeline searches.  The defaults plan well on every model we test; the switches
/// exist to trade planning time against plan quality, and for recipes that fix part of the
/// answer.
struct PipelineOptions {
  int32_t microbatches = 1;                  ///< M
  std::optional<PipelineSchedule> schedule;  ///< nullopt: the best of all_schedules()
  int32_t stages_per_rank = 0;               ///< v for interleaved schedules; 0: try 2..4
  /// Stop solving more stage sizes once the step is within this share of its bound: past it,
  /// each further solve costs a stage problem for a step that can only improve by the gap.
  double target_gap = 0.005;
  /// A fixed split instead of the search (per stage its number of layers, P x v entries; needs
  /// `schedule`): for recipes such as torchtitan's equal stages.  The bound is then this
  /// split's (its stages' bounds in the schedule's formula).
  std::vector<int32_t> fixed_layers;
  /// Threads solving independent stage problems at once (StageSolver::prefetch); 0: the
  /// cores available.  Without a time limit the plan does not depend on it.
  int32_t stage_threads = 0;
  /// Whether a stage whose memory-free plan does not fit its budget is also solved under the
  /// budget (the fitted search, pipeline/stage_fit.cc).  false: it takes the best plan at
  /// hand (fully recomputed, torchtitan's layout, or least recomputation), else the cheapest
  /// priced plan that fits (StageBuilder::price_plans), else none.  The memory-limited solve
  /// may find a cheaper plan, but on large stages it runs into --time-limit, which makes the
  /// plan depend on the machine's speed and load; false keeps planning machine-independent.
  bool solve_fitted = true;
  /// Price each memory-limited stage's memory (StageBuilder::price_memory, Kelley's cutting
  /// planes): with one stage per rank a proven bound above the memory-free one, and for every
  /// layout the priced plans that fit as candidates (a stage within the target gap of its
  /// priced bound skips the memory-limited solve).  Off by default: each stage pays several
  /// priced solves, which costs more planning time than the step it saves on the models we
  /// measured (docs/benchmarks.md).
  bool price_memory = false;
  /// A fitted size with no bracket of two fully recomputed plans is evaluated as the pattern of
  /// the nearest solved fitted plan of its kind with the least recomputation that fits
  /// (extend_fitted, pipeline/stage_source.h) rather than solved, and kept at assembly: with
  /// tied layers a fitted sharding carries over to other sizes of its kind, so solving each
  /// size again costs a memory-limited solve for little.  false: every such size is solved.
  bool extend_fitted = true;
  /// Bound layouts with v > 1 stages per rank under a memory limit by the rank-level
  /// Lagrangian relaxation of their memory (pipeline/pipeline_rank_bound.cc): the rank's stages
  /// together under the limit, one price for the search, priced floors of every stage kind.
  /// Why: with v > 1 the stage budgets are shares of a rank, no relaxation, so without it the
  /// bound of those layouts is memory-free and their gap overstated.  false: their bound is
  /// made of memory-free stage bounds.
  bool rank_memory_bound = true;
  /// At assembly, share each rank's limit among its stages and give each the fastest of its
  /// kind's solved shardings with the least recomputation that fits its part at its own
  /// rank's in-flight count (pipeline/pipeline_assemble.cc refit_ranks); a rank still over is
  /// then re-planned.  Why: one plan per (kind, layers) is made for the most in flight of its
  /// kind, which over-recomputes on the ranks that keep fewer.  false: the plans made for the
  /// kind's most in flight are kept, and a rank over the limit is re-planned directly.
  bool refit_ranks = true;
  /// With refit_ranks and no fixed split, the rank balance's budget: single layers moved off
  /// the busiest rank while the timeline shrinks, at most this many moves tried
  /// (pipeline/pipeline_refit.cc).  Each move is evaluations only; the bound keeps the cost
  /// of a balance that does not converge small.
  int32_t balance_moves = 16;
  /// With refit_ranks, on the kept plan: each rank's stages re-choose their recomputation
  /// together under the rank's limit (pipeline/pipeline_refit.cc trade_ranks), kept where the
  /// timeline shortens.  Why: the refit's shares recompute the same on a stage with 13
  /// microbatches in flight as on one with 8, where the first frees more memory for the time.
  bool trade_ranks = true;
  /// With refit_ranks, before assembly: a middle stage of half a rank's L / P layers priced
  /// under its share of the device limit at the layouts' most in flight
  /// (StageSolver::price_rank_pattern), its sharding a source of every rank's refit, kept per
  /// rank where it shortens the timeline.  Why: the stage plans are made per (kind, layers)
  /// under a share of a rank, and their shardings fit a whole rank badly; one Kelley pricing
  /// gives a sharding made for a rank's memory.
  bool rank_pattern = true;
  /// Called on every stage's optimizer before it solves (a recipe's pins).
  std::function<void(ShardingOptimizer&)> stage_hook;
  /// The stages' parameters are gathered once per step and kept over the microbatches
  /// (PlannerOptions::params_gathered_once): FSDP2 inside torchtitan's pipeline stages.  The
  /// stages' memory holds the gathered copies (StageSolve::gathered_param_bytes).
  bool params_gathered_once = false;
  /// Gathered once or per use is the planner's decision (params_gathered_once ignored):
  /// plan_pipeline plans gathered once, and per use only where memory shaped that plan (per
  /// use is never faster otherwise, pipeline.cc), on a thread of its own from the moment the
  /// once plan's search first prices memory; it keeps the one whose ranks fit, the faster
  /// where both do (per use on a tie).  The per-use search runs on memory-free rank floors
  /// and prices its ranks' memory only where its plan is kept (price_ranks_after): those
  /// priced solves cost as much again as the once search's (llama3-405b 8x8x8: 40 priced
  /// floors for ~28 s of the 96 s of CPU), and where once wins they would only tighten the
  /// bound the two share as the lesser of theirs (there 22.375 s instead of 23.218 s, the
  /// same plan in 45 s wall rather than 57).
  bool choose_params_gathered_once = false;
  /// Progress reports (pipeline/pipeline_progress.h), from any thread, one at a time.
  PipelineProgressFn on_progress;
  /// A step the plan must beat (the best of the meshes a search planned before this one): a
  /// (schedule, v) whose proven bound reaches it is searched no further, and when none can
  /// beat it plan_pipeline throws PipelineCutoff with the least of their bounds rather than
  /// planning on.  Why: a mesh search only needs the winner, and a losing mesh's bound is
  /// usually known after its first stage solves, long before its plan.
  double cutoff_us = std::numeric_limits<double>::infinity();
  /// Called once, from any of the search's threads, when the search first prices memory (a
  /// rank's priced floors, or a stage plan fitted to a budget): from then on memory shapes the
  /// plan (plan_pipeline's other parameter-gathering variant starts then).
  std::function<void()> on_memory_priced;
  /// With rank_memory_bound off: called with the assembled plan, before its bound; where it
  /// returns true, the ranks' priced floors are computed then (pipeline_rank_bound.cc, on the
  /// search's final stage tables) and raise each layout's bound.  Why: plan_pipeline's per-use
  /// search prices its ranks only where its plan is the one kept (pipeline_gather.cc); the
  /// search itself, on memory-free floors, is the same either way.  May block (it waits for
  /// the other variant's plan).
  std::function<bool(const PipelinePlan&)> price_ranks_after;
};

/// torchtitan's split: L / S layers per stage, the remainder spread over the middle stages
/// (the first and last also hold the embedding and the head).
std::vector<int32_t> equal_split(int32_t L, int32_t S);

/// One solved stage problem: its graph, intra-op plan and figures.
struct StageSolve {
  StageGraph sg;
  /// The optimizer that planned it (kept for the report: its costs, strategies, simulation).
  std::shared_ptr<ShardingOptimizer> optimizer;
  Plan plan;                 ///< over sg.graph and the stage mesh
  double microbatch_us = 0;  ///< c: the plan's objective (sends included)
  double lower_bound_us = 0; ///< the plan's proven lower bound
  double p2p_us = 0;         ///< the part of c spent sending (forward activation, backward gradient)
  double once_us = 0;        ///< optimizer compute + redistributions into it, once per step
  /// Per device, what one microbatch keeps from its forward to its backward after the plan's
  /// recomputation (planner/inflight_memory.h).
  int64_t activation_bytes = 0;
  /// Peak per device of one microbatch alone (parameter state included); with f microbatches
  /// in flight the stage needs microbatch_peak_bytes + (f - 1) x activation_bytes.
  int64_t microbatch_peak_bytes = 0;
  /// One microbatch's usage at t* (InflightMemory::boundary_bytes): the stage holds at most
  /// that, its other microbatches' activations and the summed gradients while another stage
  /// of its rank runs; the rest of its peak (transient_bytes) only while it runs itself.
  int64_t boundary_bytes = 0;
  /// What the one-microbatch peak holds above the usage at t*: the running op's passing work.
  int64_t transient_bytes() const { return microbatch_peak_bytes > boundary_bytes ? microbatch_peak_bytes - boundary_bytes : 0; }
  /// Per device, the Partial gradients the runtime sums over the step before reducing them
  /// once (planner/inflight_memory.h deferred_gradient_bytes): the rank's peak adds them.
  int64_t deferred_grad_bytes = 0;
  /// Per device, the parameters a stage that gathers them once per step keeps gathered over
  /// its microbatches (planner/inflight_memory.h gathered_parameter_bytes; 0 when gathered per
  /// use): state, held all step, in microbatch_peak_bytes and boundary_bytes.
  int64_t gathered_param_bytes = 0;
  double inflight = 1;        ///< the in-flight count its problem was built with (1: memory-free)
  int64_t memory_budget = 0;  ///< the per-device budget it was planned for (0: none)
  /// Cheapest cost of one layer's nodes: a stage of this kind with more layers costs at least
  /// this much more per layer (the slope of the lower bound above the largest solved size).
  double layer_floor_us = 0;
  /// The least time of the stage's forward under any decisions (its forward ops' cheapest
  /// compute), and what one more layer adds to it: how long a later stage waits, at least,
  /// for a microbatch to come through this one (pipeline.cc busiest_rank_bound).
  double forward_floor_us = 0, layer_forward_floor_us = 0;
  /// Its nodes' time by part (forward, input-gradient B, weight-gradient W) and the bytes B
  /// keeps for W (pipeline/backward_split.h): the zero-bubble schedules' figures.
  PartTimes parts;
  double seconds = 0;  ///< wall time of the solve
  /// Evaluated as the pattern of two solved sizes (pipeline/stage_pattern.h), not solved.
  bool interpolated = false;
  /// A fitted size evaluated as another size's pattern with its own recomputation
  /// (extend_fitted, pipeline/stage_source.h): no source for further patterns, and not solved at assembly.
  bool extended = false;
};

struct PipelineStage {
  int32_t index = 0, pp_rank = 0;
  int32_t lo = 0, hi = 0;  ///< layers [lo, hi)
  bool first = false, last = false;
  double inflight = 1;                ///< microbatches of this stage's activations its rank keeps (at its peak)
  double deferred = 0;                ///< of those, whose W has not run (zero-bubble schedules)
  std::shared_ptr<const StageSolve> solve;
  /// Per node of the solve's stage graph (solve->sg, the same structure as this stage's own),
  /// the full graph's node; -1 for received tensors and the output.  The stage's schedule
  /// (planner/prefetch_schedule.h) is computed on the solve's graph and named through it.
  std::vector<NodeIdx> nodes;
};

struct PipelinePlan {
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int32_t P = 1, v = 1, M = 1;
  int32_t pp_dim = 0;
  Mesh stage_mesh;
  std::vector<std::string> layers;  ///< layer keys
  std::vector<PipelineStage> stages;
  /// step_us: the schedule's timeline on the stages (stage_timeline); bubble_us: what it adds
  /// to the busiest rank's own work; lower_bound_us: a proven bound of every split's timeline
  /// (the busiest rank's work over the stages' bounds, minimised over splits).
  double step_us = 0, bubble_us = 0, lower_bound_us = 0, gap = 0;
  /// Per pp rank: peak memory per device with its in-flight activations.
  std::vector<int64_t> rank_peak_bytes;
  int64_t memory_limit_bytes = 0;  ///< 0: none
  /// The stages' parameters are gathered once per step and kept over the microbatches
  /// (PipelineOptions::params_gathered_once), not gathered at each use.
  bool params_gathered_once = false;
  int32_t intra_op_solves = 0;
  /// Of those, the solves that stopped at the time limit (--time-limit, a safety net: the
  /// stage solves stop on their work limits, PlannerOptions::work_limited).  0: the plan
  /// depends on the inputs alone; else it may depend on the machine's speed and load.
  int32_t clock_stopped_solves = 0;
  double seconds = 0;
  std::vector<std::string> warnings;
  /// Per full-graph node: its stage, -1 for nodes every stage copies.
  std::vector<int32_t> node_stage;
  /// Per full-graph node: placements over the full mesh (R on the pp dim); nullopt: output.
  std::vector<std::optional<Strategy>> node_strategy;
  /// Every (schedule, v) tried: its step and lower bound.
  struct Candidate {
    PipelineSchedule schedule;
    int32_t v = 1;
    double step_us = 0, lower_bound_us = 0;
  };
  std::vector<Candidate> candidates;
};

/// Per stage, its forward, input-gradient and weight-gradient time for one microbatch: the
/// stage's microbatch time (which includes its transfers and its share of the once-per-step
/// work) split in the ratio of its plan's node times by part (pipeline/backward_split.h); a
/// schedule that does not split the backward runs the last two as one B.  The transfers are
/// inside the microbatch time, so StageTimes::p2p_us stays 0.
StageTimes stage_times(const std::vector<const StageSolve*>& stages);
StageTimes stage_times(const PipelinePlan& pl);
/// The plan's schedule run on its stages (schedule_timeline): its makespan is PipelinePlan::step_us.
PipelineTimeline stage_timeline(const PipelinePlan& pl);

/// What plan_pipeline throws when no plan on the mesh can beat PipelineOptions::cutoff_us:
/// every (schedule, v) has a proven bound at or above it.
class PipelineCutoff : public std::runtime_error {
 public:
  explicit PipelineCutoff(double lower_bound_us);
  /// A proven bound of every plan on the mesh (>= the cutoff).
  double lower_bound_us() const { return lower_bound_us_; }

 private:
  double lower_bound_us_;
};

/// Plans `g` (one microbatch) on `mesh`, which must have a dim named "pp".  Throws
/// std::invalid_argument for P > layers, graphs without identical repeated layers, and a
/// pinned schedule the (P, v, M) cannot run; PipelineCutoff when nothing can beat
/// popt.cutoff_us; std::runtime_error when no stage plan exists.
PipelinePlan plan_pipeline(const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                           const PipelineOptions& popt);

}  // namespace autoshard

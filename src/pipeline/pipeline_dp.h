#pragma once
/// The stage split as a dynamic program over contiguous layer ranges (Alpa, Zheng et al.,
/// OSDI'22, section 5.2), on stage-cost tables indexed by the stage's number of layers and
/// whether it holds the model's first and last parts.  Identical layers make a stage's cost a
/// function of (layers, holds-first, holds-last) only, so the tables have 4 L entries where
/// Alpa's DP needs one per layer range (L^2 / 2).
///
/// best_split_latency minimises Alpa's pipeline latency sum_s c_s + (M - 1) max_s c_s: for each
/// candidate t_max (every table value, ascending) the DP F[s][l] = min_k F[s-1][l-k] + c(s, k)
/// over stages of cost <= t_max; it stops once (M - 1) t_max alone reaches the best found.
/// O(|candidates| * S * L * K) additions.  The value is monotone in every stage cost, so the
/// DP over lower bounds of the costs is a lower bound of the DP over the costs.
#include <cstdint>
#include <vector>

namespace autoshard {

/// Stage costs by layers k (index k; entry 0 unused); +inf: unknown or infeasible.
struct StageCostTable {
  std::vector<double> first;  ///< the stage holds the first layer and what precedes it
  std::vector<double> mid;
  std::vector<double> last;   ///< holds the last layer and what follows it
  std::vector<double> both;   ///< a single stage holding everything
  /// Per stage position (pipeline order), when not empty: its own table, in place of the kind
  /// tables above (a stage's cost then also depends on its rank, e.g. its memory budget with
  /// the rank's in-flight microbatches).
  std::vector<std::vector<double>> stages;
  double cost(int32_t s, int32_t S, int32_t k) const;
};

struct StageSplit {
  std::vector<int32_t> layers;  ///< per stage, its number of layers; empty: none feasible
  double value = 0;             ///< the minimised objective
};

/// Minimises sum_s c_s + (M - 1) max_s c_s over splits of L layers into S non-empty stages.
StageSplit best_split_latency(const StageCostTable& c, int32_t L, int32_t S, int32_t M);
/// Minimises the interleaved step T = (M - 1/v) max_r R_r + sum_r R_r / v over splits of L
/// layers into S = P v stages, stage i on rank i mod P and R_r the sum of rank r's stage
/// costs (pipeline/pipeline_schedule.h).  T depends on the ranks' sums only, so the order of a
/// rank's stages does not matter: g_r(n), the cheapest v stages of rank r's kinds (rank 0
/// holds the first stage, rank P - 1 the last) with n layers in all, is a small DP, and the
/// split is Alpa's threshold DP over ranks: for each candidate t of max_r R_r, the least
/// sum_r g_r(n_r) with every g_r(n_r) <= t and sum n_r = L.  Exact; for v = 1 it is
/// best_split_latency's optimum.  Needs P >= 2.
/// `factor` k scales the fill-and-drain, T = (M - k/v) max_r R_r + k sum_r R_r / v (the
/// zero-bubble schedules, pipeline_schedule.h; monotone in the costs for k <= M v); `v_shape`
/// places the stages in a V (ZBVZeroBubble: v = 2, rank r holds stages r and 2P - 1 - r, so
/// rank 0 holds both the first and the last stage).
/// `rank_floor`, when given: per rank q and layers n, a lower bound of R_q (e.g. under the
/// rank's memory, pipeline/pipeline_rank_bound.cc) that R_q is raised to where the stage costs
/// sum below it (on lower-bound tables: the DP stays a lower bound).
using RankFloors = std::vector<std::vector<double>>;
StageSplit best_split_ranks(const StageCostTable& c, int32_t L, int32_t P, int32_t v, int32_t M,
                            double factor = 1.0, bool v_shape = false, const RankFloors* rank_floor = nullptr);
/// A lower bound of min over splits of max_s (M c_s + sum_{s' < s} c_s'), within a relative 1e-9
/// below it (+inf when no split exists): what one stage per rank takes at least whenever each
/// rank runs its microbatches one op at a time and its last op is the backward that the stages
/// before it wait for (1F1B, GPipe: the stage's own M c_s, the forwards of the stages before it
/// ahead of its first op and their backwards after its last; pipeline/pipeline.cc).  A
/// threshold search: for a cap t, the least prefix sum of s stages over l layers with every
/// stage inside the cap is a DP (a smaller prefix never hurts a later stage).
double split_head_tail_bound(const StageCostTable& c, int32_t L, int32_t S, int32_t M);
/// The same with v stages per rank (rank q holds stages q + j P, or in a V q and 2P - 1 - q):
/// a lower bound of min over splits of max_q (M R_q + sum_{s < q} c_s), R_q the sum of rank q's
/// stage costs.  Rank q's first op waits for the forwards of stages 0..q-1 (every one of its
/// stages is fed through stage q), and with whole backwards its last op is the backward of one
/// of its stages, which the backwards of stages q-1..0 wait for.  Exact for equal stages of
/// Interleaved1F1B, whose fill-and-drain is (P - 1) c.  The relaxation: each rank's stages
/// other than its first (stage q) may take any sizes that sum with it to its layers, in any
/// order (as best_split_ranks).  For a cap t, a DP over ranks keeps, per layers used, the least
/// sum of the first stages so far; each rank offers, per layers n, the pairs (R, its first
/// stage's cost) no other beats in both.
double split_ranks_head_tail_bound(const StageCostTable& c, int32_t L, int32_t P, int32_t v, int32_t M,
                                   bool v_shape = false, const RankFloors* rank_floor = nullptr);
/// The same with the stages before rank q counted by `head` instead of c (lower bounds of their
/// forwards alone): a rank's first op still waits for them, but with a split backward
/// (zero-bubble schedules) its last op may be a W that nothing waits for, so no drain.
double split_ranks_head_bound(const StageCostTable& c, const StageCostTable& head, int32_t L, int32_t P, int32_t v,
                              int32_t M, bool v_shape = false, const RankFloors* rank_floor = nullptr);
/// Per n (0..L), the least sum of a rank's stages, stage j costed by `tables[j]` (index: its
/// layers), n layers in all and each stage >= 1 (+inf where none).
std::vector<double> rank_least_sums(const std::vector<const std::vector<double>*>& tables, int32_t L);
/// Minimises sum_s c_s over the same splits.
StageSplit best_split_sum(const StageCostTable& c, int32_t L, int32_t S);

/// The costs of a split's stages, in order.
std::vector<double> split_costs(const StageCostTable& c, const std::vector<int32_t>& layers);

}  // namespace autoshard

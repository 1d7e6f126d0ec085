#pragma once
/// Exports of a solved plan and of its problem.
///
/// plan_to_json: the fields of AutoParallel's get_json (../shared/reference/formats.md) --
/// mesh, per node name, op, phase, placement, compute_cost, transition_cost, inputs (name, src
/// and dst placement, comm_cost, transition_cost), placeholder kind, dtype, shape, module path,
/// cluster_id, cluster_root, and summary {total, comm, compute, transition} in us -- plus
/// autoshard's: per node its strategy, communication on its inputs and memory per device;
/// the summary's objective, lower bound, gap, status, compute/communication split and peak
/// memory.  autoshard's cost model has no separate "transition" term: those fields are 0.
/// Timings are left out so the bytes depend only on the plan (deterministic).
///
/// write_mps: Alpa's intra-op ILP of the full (untied) problem, so that any MIP solver can
/// check an optimum: binary s_v_q per node v and strategy q with sum_q s_v_q = 1; continuous
/// e_k_p_q in [0, 1] per edge k = (u, v) and allowed pair (p, q) with the linking rows
/// sum_q e_k_p_q = s_u_p and sum_p e_k_p_q = s_v_q (forbidden pairs get no column, forbidden
/// strategies are fixed to 0, all-zero edges are left out); one memory row per maximal live
/// set of the schedule, sum over live v, q of usage_v_q s_v_q <= limit, in MiB (bytes / 2^20,
/// exact in binary); objective = node costs + edge costs in us.  Its optimum is the optimum of
/// the untied problem: with PlannerOptions::cluster (tied repeated layers) the planner's plan
/// may cost more.
///
/// write_problem_iopddl: the same full problem in the IOPDDL contest format (readable by
/// `autoshard iopddl`), costs scaled to integer picoseconds (us x 10^6).
#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/sharding_optimizer.h"
#include "problem/problem.h"

namespace autoshard {

/// Throws std::runtime_error "plan export: no solution (...)" when the plan has none.
nlohmann::ordered_json plan_to_json(ShardingOptimizer& opt, const Plan& plan);
/// plan_to_json as text (one space indent, trailing newline): same plan, same bytes.
std::string plan_json_text(ShardingOptimizer& opt, const Plan& plan);

/// MPS text of opt's full problem (see above).
std::string write_mps(ShardingOptimizer& opt);
/// Name of the column of node v's strategy q in write_mps's output ("s<v>_<q>").
std::string mps_node_column(PNodeIdx v, StrategyIdx q);

/// Multiplier from us to the integer costs of write_problem_iopddl.
inline constexpr double kIopddlCostScale = 1e6;
/// opt's full problem with costs in integer-valued picoseconds.
Problem iopddl_problem(ShardingOptimizer& opt);
/// Writes iopddl_problem(opt) as IOPDDL JSON (temporary + rename).
void write_problem_iopddl(ShardingOptimizer& opt, const std::string& path);

}  // namespace autoshard

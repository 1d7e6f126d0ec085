#pragma once
/// Activation recomputation as a decision of the strategy-selection problem, kept in the
/// IOPDDL shape (one interval per node, usages per strategy) so every solver and the
/// independent check see it exactly.
///
/// Regions: the forward ops of a repeated layer ("layers.3" in the module path) split by
/// activation class -- attention (attention / attn modules and the norm before them) and mlp
/// (feed_forward / ffn / mlp modules and their norm).  Residual adds at the layer's own level
/// belong to no region and are kept, except under the policy `full` for every region, which
/// is torch's checkpoint of the whole block: it recomputes them too and keeps the layer input
/// alone (recompute.cc, "Whole-layer recomputation").  Each region instance gets a decision node whose
/// strategies are the allowed modes: keep, selective (re-execute every op except matmuls and
/// attention kernels, whose outputs stay saved -- the save list of torchtitan's op-level
/// selective activation checkpointing, torchtitan/models/llama3/infra/parallelize.py
/// `_save_list`), selective-op (only when pinned: torchtitan's whole op-level policy, which
/// also re-executes every other matmul; selective_saves below), full (re-execute every op of
/// the region).
///
/// Per forward op v of a region, with its tensor live [s, e) (forward uses end at f, the
/// region's backward first reads one of its tensors at b, where the recomputation runs):
///  - a gap node, strategies (mode m, v's strategy q), live [f, b): usage bytes(q) while the
///    tensor is kept -- read by the backward and not re-executed under m, or not read by the
///    backward but read by an op that m re-executes; cost compute(v, q) when m re-executes v;
///    tied to v (same q) and to the decision (same m); one edge per activation input u of v
///    costs u -> v's redistribution when m re-executes v (the recomputation pays its
///    collectives again).  Redistributions of parameters are not charged again: the weight the
///    backward gathers serves the recomputation too (FSDP unshards a layer once for its
///    backward);
///  - a tail node, strategies (m, q), live [b, e) for a tensor the backward reads (it is back,
///    kept or recomputed), or [b, b + 1) with usage only where m needs it for the
///    recomputation;
///  - v's own node then lives [s, f) when v can be freed (read by the backward, by no forward op
///    outside its region).
/// Under keep, [s, f) + [f, b) + [b, e) = [s, e): the problem is unchanged.  Recomputed
/// intermediates that the backward does not read live only during the recomputation and are
/// not counted.  A region whose outside inputs (parameters aside) die before b keeps.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "planner/options.h"
#include "planner/problem_builder.h"

namespace autoshard {

/// "none", "selective", "selective-op", "full", "auto", "if-needed".
std::string_view recompute_policy_name(RecomputePolicy p);
std::optional<RecomputePolicy> parse_recompute_policy(std::string_view s);
/// The same, or std::invalid_argument "OPTION: expected none, selective, selective-op, full,
/// auto or if-needed, got 'S'"
/// (the CLI's --recompute and the Python binding's PlannerOptions.recompute).
RecomputePolicy parse_recompute_policy_or_throw(std::string_view s, std::string_view option);

/// Adds regions, decision, gap and tail nodes and their edges to `bp` (nothing for kNone and
/// kIfNeeded).
/// Called by build_problem once nodes and tensor-use edges exist.
void add_recomputation(const Graph& g, const PlannerOptions& opt, BuiltProblem& bp);

/// Per layer (in forward order): "none" (every region keeps), "full" (every region
/// recomputes fully) or "selective" (anything in between).
std::vector<std::pair<std::string, std::string>> layer_recompute(
    const BuiltProblem& bp, const std::vector<StrategyIdx>& choice);

/// Names of the graph nodes the assignment re-executes in the backward (graph order): each
/// forward op of a region whose chosen mode executes it (full: all; selective: all but the
/// matmul and attention ops).
std::vector<std::string> recomputed_nodes(const Graph& g, const BuiltProblem& bp,
                                          const std::vector<StrategyIdx>& choice);

/// Flags of selective_saves: which selective policy keeps a node's output.
inline constexpr char kSavedBySaveList = 1;  ///< kSelective: matmuls and attention kernels
inline constexpr char kSavedByOpPolicy = 2;  ///< kSelectiveOp
/// Per graph node, which selective policies keep its output.  kSelective keeps torchtitan's
/// save list (matmuls, attention kernels).  kSelectiveOp is torchtitan's whole op-level policy
/// (`_custom_policy` in torchtitan/models/llama3/infra/parallelize.py, AutoParallel's
/// `apply_ac(..., "op")`): the same, except every second linear-layer matmul of a layer in
/// forward order (LLaMA: wk, wo and w3 of q, k, v, o, w1, w3, w2), which the backward
/// re-executes; torchtitan counts `aten.mm` calls, here any linear matmul form (mm, addmm,
/// matmul, linear), while batched matmuls (attention's math form) stay saved.
std::vector<char> selective_saves(const Graph& g);

/// Whether mode `m` re-executes the region's forward op `v` of `bp` (full: all; the selective
/// modes: the ops bp.selective_saved does not keep for them; keep: none).  For readers of an
/// assignment (the step simulation).
bool recompute_executes(RecomputePolicy m, const BuiltProblem& bp, NodeIdx v);

/// The part of an assignment's cost that recomputation adds: gap node compute and the
/// recomputation's redistributions (edges with origin slot kRecomputeSlot).
struct RecomputeCost {
  double compute_us = 0;
  double comm_us = 0;
};
RecomputeCost recompute_cost(const BuiltProblem& bp, const std::vector<StrategyIdx>& choice);

/// Edge origin slot of a recomputation's redistribution (producer = the input re-read).
inline constexpr int32_t kRecomputeSlot = -3;

/// The memory-free relaxation of `p` (a tied or untied copy of bp.problem, `class_of` mapping
/// bp's nodes to p's): every recomputation node of a region that may keep gets one strategy
/// (keep) and zero edges.  Exact without memory: recomputation only adds cost, so some
/// optimum keeps everything, and the reductions no longer see the recomputation nodes.
void keep_all_activations(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of, Problem& p);
/// A choice of that relaxation as a choice of the problem it came from (`full`): keep, with
/// the owners' strategies.
void lift_kept_choice(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                      const Problem& full, std::vector<StrategyIdx>& choice);
/// The reverse, for warm starts: collapsed nodes take strategy 0.
void lower_kept_choice(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of,
                       std::vector<StrategyIdx>& choice);
/// `p` (as for keep_all_activations) with every decision of a region that may keep forbidden
/// from anything but keep (+inf cost): the recompute-none problem, memory included, in the
/// shape of the recompute-auto one, so that its plans are plans of `p` as they are (the gap and
/// tail nodes follow their decision through their ties).  Returns whether anything changed.
bool forbid_recomputation(const BuiltProblem& bp, const std::vector<PNodeIdx>& class_of, Problem& p);

/// Sets the decision and auxiliary entries of `choice` (graph nodes' strategies set) from the
/// names of the nodes a plan re-executes (placements.json "recompute"): each region takes the
/// first of its modes that re-executes exactly those of its ops.  Throws std::runtime_error
/// naming a region no mode fits.
void set_recomputed_nodes(const Graph& g, const BuiltProblem& bp, const std::vector<std::string>& names,
                          std::vector<StrategyIdx>& choice);

/// Fills decision, gap and tail entries of a full assignment that are -1 (e.g. from saved
/// placements) with "keep" and the owner's strategy.
void complete_recompute_choice(const BuiltProblem& bp, std::vector<StrategyIdx>& choice);

}  // namespace autoshard

#pragma once
/// Named parallelism recipes beside the optimum: DDP, FSDP (ZeRO-3), Megatron tensor
/// parallelism, 2-D FSDP + TP and HSDP, each as a full assignment of the SAME problem the
/// planner solves, so that "how much better than FSDP?" is answered by one cost model.
///
/// A recipe pins what defines it — the placement of every parameter (and of its optimizer
/// state and update, when the graph has them) and of the batch inputs — and leaves every other
/// node to the exact solver, which picks the best realization of the recipe (e.g. where to
/// all-gather an FSDP weight, or Megatron's sequence parallelism between the blocks, where the
/// graph allows it).  The result is therefore the recipe at its best under our cost model,
/// evaluated by the same memory sweep and independent check as the optimum; the optimum
/// (`alpa`) is never worse, since every recipe is one of its candidate assignments.
///
/// Mesh roles: DDP and FSDP split the batch over every mesh dim; Megatron uses the dim named
/// `tp` (or `tensor`, `mp`, `model`) for tensor parallelism and every other dim for data
/// parallelism; FSDP + TP shards the parameters FSDP-style over the non-tp dims; HSDP
/// replicates over the outer dims (across nodes) and shards over the last (within a node).
/// EP (expert parallelism + FSDP, for Mixture-of-Experts graphs: planner/experts.h) splits
/// the stacked expert weights on their expert dim over the dim named `ep` (or `expert`,
/// `experts`; else the last dim), shards everything else FSDP-style over every dim, splits
/// the batch over every dim and pins each batched expert matmul to its experts' devices, so
/// tokens travel to their experts and back by all-to-all (priced in cost/collective.h).
/// CP x FSDP (torchtitan's context parallelism: torchtitan/distributed/parallel_dims.py builds
/// the mesh (pp, dp_replicate, dp_shard, cp, tp) and FSDP shards parameters over the flattened
/// dp_shard x cp dims, "dp_shard_cp"; its config parallelism.context_parallel_degree and
/// context_parallel_rotate_method, default "allgather") splits the sequence of the inputs and
/// of every attention over the dim named `cp` (or `context`), the batch over the other dims
/// except tp, shards the parameters FSDP-style over those dims AND cp, and, with a tp dim,
/// adds Megatron TP on it.  Ring or all-gather is left to the solver (the recipe at its best).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/mesh.h"
#include "planner/constraints.h"
#include "planner/options.h"
#include "planner/plan.h"

namespace autoshard {

enum class Recipe : uint8_t { kAlpa, kDdp, kFsdp, kMegatron, kFsdpTp, kHsdp, kEp, kCpFsdp };

/// "alpa", "ddp", "fsdp", "megatron", "fsdp+tp", "hsdp", "ep", "cp+fsdp".
std::string_view recipe_name(Recipe r);
/// Also accepts "fsdp_tp", "fsdp-tp", "zero3" (fsdp), "tp" (megatron), "optimal" (alpa).
std::optional<Recipe> parse_recipe(std::string_view s);
/// The dense recipes, alpa first (without kEp).
const std::vector<Recipe>& all_recipes();
/// The recipes `--compare` runs on `g` and `mesh`: all_recipes(), plus kEp when the graph has
/// stacked expert weights (a Mixture of Experts), plus kCpFsdp when the mesh has a cp dim.
std::vector<Recipe> recipes_for(const Graph& g, const Mesh& mesh);

/// The mesh dim used for context parallelism: the one named cp/context; -1 when none.
MeshDimIdx context_parallel_dim(const Mesh& mesh);
/// StrategyOptions::nested_view_dims for `mesh`: its context-parallel dim, or none.  One place
/// for the planner and `strategies`, so that both list the same strategies.
std::vector<MeshDimIdx> nested_view_dims(const Mesh& mesh);
/// One line per recipe for --help texts.
std::string recipe_help();

/// The mesh dim used for tensor parallelism: the one named tp/tensor/mp/model; -1 when none.
MeshDimIdx tensor_parallel_dim(const Mesh& mesh);

/// How Megatron-LM shards a parameter on the tensor-parallel dim.
enum class TpRole : uint8_t {
  kReplicated,  ///< norms, biases of row-parallel layers, anything not read by a linear
  kColumn,      ///< linear weight split on its output features (wq, wk, wv, w1, w3, lm head)
  kRow,         ///< linear weight split on its input features (wo, w2)
  kVocab,       ///< embedding table split on the vocabulary
  kColumnBias,  ///< bias of a column-parallel linear: split like its outputs
};
std::string_view tp_role_name(TpRole r);

/// Megatron role and the tensor dim to shard (-1 for kReplicated) of one parameter.
struct TpLayout {
  TpRole role = TpRole::kReplicated;
  int32_t dim = -1;
};

/// Megatron's column/row pairing found from the forward graph, per graph node (parameters get
/// their role, other nodes kReplicated): a linear whose activation comes from a
/// column-parallel linear (through pointwise ops, views and attention) is row-parallel, any
/// other linear is column-parallel; embedding tables are vocabulary-parallel.
std::vector<TpLayout> tensor_parallel_layout(const Graph& g);

/// tensor_parallel_layout plus every forward linear that reads a parameter weight, with the
/// role it plays (the recipes pin these outputs so that weights are used the textbook way:
/// gathered for data parallelism, split for tensor parallelism).
struct TpAnalysis {
  std::vector<TpLayout> params;  ///< per graph node
  struct Linear {
    NodeIdx node = kNoNode;
    NodeIdx weight = kNoNode;
    TpRole role = TpRole::kColumn;  ///< kColumn or kRow
  };
  std::vector<Linear> linears;
};
TpAnalysis tensor_parallel_analysis(const Graph& g);

/// The constraints that define a recipe on a graph and mesh.
struct RecipePins {
  std::vector<Constraint> constraints;
  /// Pins on the forward linears' outputs (batch split on the data-parallel dims; column
  /// outputs split, row outputs partial on tp), so that the free nodes use the weights the way
  /// the recipe does rather than, say, all-gathering a Megatron weight.  Tried together with
  /// `constraints`; dropped (with a note) if the graph cannot satisfy them.
  std::vector<Constraint> use_constraints;
  /// Non-empty when the recipe does not apply (one line, e.g. "hsdp needs a mesh of at least
  /// 2 dims (replicate across nodes, shard within)").
  std::string not_applicable;
  /// Deviations from the textbook recipe forced by tensor sizes, e.g. "2 parameters too small
  /// to shard over 64 devices stay replicated".
  std::vector<std::string> notes;
};
/// Whether recipe `r` on `mesh` stores weights in a non-default shard order: FSDP2 over TP
/// (torchtitan) shards the local TP shard, so a weight that tp and FSDP both split on dim 0
/// is `_S(0,tp)S(0)`.  fsdp+tp, and cp+fsdp on a mesh with a tp dim.  Plain fsdp and hsdp need
/// no order: FSDP2 over several mesh dims shards over their row-major flattening, which is
/// DTensor's default order (`S(0)S(0)`), and hsdp shards over one dim only.
bool recipe_uses_shard_orders(Recipe r, const Mesh& mesh);

/// kAlpa gives no constraints.  `require_divisible` as in PlannerOptions.
/// `shard_orders`: the problem offers ordered strategies (PlannerOptions::shard_orders), so
/// the recipes of recipe_uses_shard_orders() pin FSDP2's tp-first layout; without, they keep
/// DTensor's default order (`S(0)S(0)`).  plan_recipe and compare_recipes turn the option on
/// for those recipes, as the CLI's `--algo` does.
RecipePins recipe_pins(Recipe r, const Graph& g, const Mesh& mesh, bool require_divisible = false,
                       bool shard_orders = false);

struct RecipeResult {
  Recipe recipe = Recipe::kAlpa;
  std::string not_applicable;  ///< set when the recipe does not apply (then no plan)
  std::string error;           ///< set when planning failed (then no plan)
  std::optional<Plan> plan;
  /// The plan fits in the memory limit.  A recipe whose best realization does not fit is
  /// solved again without the limit, so that its time and memory can still be shown.
  bool fits = false;
  int64_t memory_limit_bytes = 0;  ///< the limit it was judged against (0: none)
  double seconds = 0;              ///< wall time to plan it
  /// The solver's lower bound on the step time, also when no plan was found (e.g. stopped by
  /// PlannerOptions::cutoff_us).
  double lower_bound_us = 0;
  std::vector<std::string> notes;
  /// Simulated step time (planner/simulate.h) when the caller's inspect hook fills it; -1 if not.
  double simulated_us = -1;
};

class ShardingOptimizer;
/// Called with the recipe's optimizer and result (plan set) while the optimizer is alive, e.g.
/// to simulate the plan; may run on several threads at once (one call per result).
using RecipeInspect = std::function<void(ShardingOptimizer&, RecipeResult&)>;

/// Plans `g` on `mesh` under the recipe: its pins plus the user's `constraints`, every other
/// node optimal given them.  Never throws for planning failures: they land in `error`.
RecipeResult plan_recipe(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                         const std::vector<Constraint>& constraints = {},
                         const RecipeInspect& inspect = {});

/// plan_recipe without the second solve of a recipe over the limit: no plan then (`error`
/// says so).  For callers that want only a plan that fits, such as the mesh search's fallback
/// for a solve its time limit stopped; the second solve costs as much as the first.
RecipeResult plan_recipe_that_fits(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt);

/// plan_recipe with the solver started from `start` (a plan of the same graph on the same mesh,
/// e.g. a recipe's plan for the optimum; ignored when null or when it does not match).
RecipeResult plan_recipe_from(Recipe r, const Graph& g, const Mesh& mesh, const PlannerOptions& opt,
                              const std::vector<Constraint>& constraints,
                              const RecipeInspect& inspect, const Plan* start);

/// plan_recipe for every recipe in `recipes` (recipes_for(g, mesh) when empty), `threads` at a time
/// (0: the machine's cores); results in the order of `recipes`.  The optimum (alpa) is solved
/// last, warm-started from the best named recipe that fits, so that even a solve stopped by
/// the time limit is never worse than a recipe.
std::vector<RecipeResult> compare_recipes(const Graph& g, const Mesh& mesh,
                                          const PlannerOptions& opt,
                                          const std::vector<Constraint>& constraints = {},
                                          std::vector<Recipe> recipes = {}, int threads = 0,
                                          const RecipeInspect& inspect = {});

}  // namespace autoshard

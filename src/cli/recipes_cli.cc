#include "cli/recipes_cli.h"

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cli/common.h"
#include "ir/file_util.h"
#include "planner/simulate.h"

namespace autoshard::cli {

Recipe parse_algo_option(const std::string& s) {
  auto r = parse_recipe(s);
  if (!r) {
    std::vector<std::string> names;
    for (Recipe x : all_recipes()) names.emplace_back(recipe_name(x));
    names.emplace_back(recipe_name(Recipe::kEp));
    names.emplace_back(recipe_name(Recipe::kCpFsdp));
    throw std::invalid_argument(
        fmt::format("--algo: unknown recipe '{}' (expected {})", s, fmt::join(names, ", ")));
  }
  return *r;
}

std::vector<std::string> apply_recipe(ShardingOptimizer& so, Recipe r) {
  if (r == Recipe::kAlpa) return {};
  // fsdp+tp stores column-parallel weights tp-first (FSDP2 over TP) when the problem offers
  // shard orders, which run_plan turns on for it.
  RecipePins pins = recipe_pins(r, so.graph(), so.mesh(), so.options().require_divisible,
                                so.options().shard_orders);
  if (!pins.not_applicable.empty())
    throw std::invalid_argument(fmt::format("--algo {}: {}", recipe_name(r), pins.not_applicable));
  for (const Constraint& c : pins.constraints) so.add_constraint(c);
  for (const Constraint& c : pins.use_constraints) so.add_constraint(c);
  try {
    (void)so.problem();
  } catch (const std::runtime_error& e) {
    if (pins.use_constraints.empty()) throw;
    for (const Constraint& c : pins.use_constraints) so.remove_constraint(c.name);
    pins.notes.push_back(fmt::format(
        "the linears' outputs could not all be pinned ({}): weights are used as the solver chooses",
        one_line(e.what())));
    (void)so.problem();
  }
  return pins.notes;
}

namespace {

/// The optimum's saving against a recipe: (recipe - optimum) / recipe.
double saving(double optimum, double recipe) { return recipe > 0 ? (recipe - optimum) / recipe : 0; }

}  // namespace

int run_compare(ShardingOptimizer& so, bool json) {
  const Graph& g = so.graph();
  const Mesh& mesh = so.mesh();
  // Each recipe's plan is simulated while its optimizer is alive, next to the step time the
  // solver minimises.
  RecipeInspect simulate = [](ShardingOptimizer& opt, RecipeResult& r) {
    r.simulated_us = simulate_step(opt, *r.plan).step_us;
  };
  std::vector<RecipeResult> rows =
      compare_recipes(g, mesh, so.options(), so.constraints(), {}, 0, simulate);
  const RecipeResult* best = nullptr;
  for (const RecipeResult& r : rows)
    if (r.recipe == Recipe::kAlpa && r.plan) best = &r;

  if (json) {
    nlohmann::ordered_json j;
    j["model"] = g.name;
    j["mesh"] = mesh.shape();
    j["mesh_dims"] = mesh.names();
    j["hardware"] = mesh.hardware().name;
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const RecipeResult& r : rows) {
      nlohmann::ordered_json x;
      x["recipe"] = std::string(recipe_name(r.recipe));
      x["applicable"] = r.not_applicable.empty();
      if (!r.not_applicable.empty()) x["reason"] = r.not_applicable;
      if (!r.error.empty()) x["error"] = r.error;
      x["has_solution"] = r.plan.has_value();
      if (r.plan) {
        const Plan& p = *r.plan;
        x["status"] = std::string(solve_status_name(p.status));
        x["step_us"] = p.objective_us;
        x["objective"] = p.overlap_aware ? "overlap" : "additive";
        x["additive_us"] = p.additive_us;
        if (r.simulated_us >= 0) x["simulated_step_us"] = r.simulated_us;
        x["compute_us"] = p.compute_us;
        x["comm_us"] = p.comm_us;
        x["peak_memory_bytes"] = p.peak_memory_bytes;
        x["memory_limit_bytes"] = r.memory_limit_bytes;
        x["fits"] = r.fits;
        if (best && r.recipe != Recipe::kAlpa) {
          x["optimum_saving"] = saving(best->plan->objective_us, p.objective_us);
          x["optimum_saving_us"] = p.objective_us - best->plan->objective_us;
          if (r.simulated_us >= 0 && best->simulated_us >= 0)
            x["optimum_simulated_saving"] = saving(best->simulated_us, r.simulated_us);
        }
      }
      x["seconds"] = r.seconds;
      x["notes"] = r.notes;
      arr.push_back(std::move(x));
    }
    j["recipes"] = std::move(arr);
    std::cout << j.dump(2) << "\n";
  } else {
    fmt::print("autoshard plan --compare: {} on mesh {} of {} ({} devices)\n", g.name,
               mesh.describe(), mesh.hardware().name, mesh.num_devices());
    fmt::print("{:<9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>5}  {:<9} {}\n", "recipe", "step time",
               "simulated", "compute", "comm", "peak mem", "fits", "status", "optimum saves");
    for (const RecipeResult& r : rows) {
      const std::string name(recipe_name(r.recipe));
      if (!r.not_applicable.empty()) {
        fmt::print("{:<9} not applicable: {}\n", name, r.not_applicable);
        continue;
      }
      if (!r.plan) {
        fmt::print("{:<9} failed: {}\n", name, r.error);
        continue;
      }
      const Plan& p = *r.plan;
      std::string saves = "-";
      if (best && r.recipe != Recipe::kAlpa)
        saves = fmt::format("{:.1f}% ({})", 100 * saving(best->plan->objective_us, p.objective_us),
                            format_us(p.objective_us - best->plan->objective_us));
      fmt::print("{:<9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>5}  {:<9} {}\n", name,
                 format_us(p.objective_us), r.simulated_us >= 0 ? format_us(r.simulated_us) : "-",
                 format_us(p.compute_us), format_us(p.comm_us), format_bytes(p.peak_memory_bytes),
                 r.fits ? "yes" : "no", solve_status_name(p.status), saves);
      for (const std::string& n : r.notes) fmt::print("{:<9}   note: {}\n", "", n);
    }
    const int64_t limit = rows.empty() ? 0 : rows.front().memory_limit_bytes;
    const bool overlap = best && best->plan->overlap_aware;
    fmt::print("memory limit per device: {}; step time = {}, simulated = the step simulator\n",
               limit > 0 ? format_bytes(limit) : std::string("none"),
               overlap ? "the overlap-aware objective (compute + the communication it does not hide)"
                       : "the additive objective (compute + communication)");
    if (best && !best->fits)
      fmt::print("note: no plan fits the memory limit; rows show what each would need\n");
  }
  if (!best) {
    for (const RecipeResult& r : rows)
      if (r.recipe == Recipe::kAlpa)
        throw std::runtime_error(fmt::format("no optimum found: {}", r.error));
  }
  return 0;
}

}  // namespace autoshard::cli

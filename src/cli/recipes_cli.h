#pragma once
/// `plan --algo RECIPE` and `plan --compare` (planner/recipes.h on the command line).
#include <string>
#include <vector>

#include "planner/recipes.h"
#include "planner/sharding_optimizer.h"

namespace autoshard::cli {

/// Parses --algo; throws std::invalid_argument naming the option and the known recipes.
Recipe parse_algo_option(const std::string& s);

/// Adds the recipe's pins to `so` (alpa: none), checking that the problem can be built with
/// them; throws std::invalid_argument with the one-line reason when the recipe does not apply.
/// Returns notes to print (deviations from the textbook recipe).
std::vector<std::string> apply_recipe(ShardingOptimizer& so, Recipe r);

/// Plans every recipe on so's graph, mesh, options and constraints (in parallel) and prints
/// the comparison table, or its rows as JSON.  Returns the exit status.
int run_compare(ShardingOptimizer& so, bool json);

}  // namespace autoshard::cli

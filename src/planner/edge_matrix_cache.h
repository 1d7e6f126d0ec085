#pragma once
/// The edge matrices of build_problem (problem_builder.h): lists of sharding specs are interned,
/// so that identical edge matrices (repeated layers have the same shapes and strategies) are
/// computed once and shared.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cost/collective.h"
#include "mesh/mesh.h"
#include "placement/placement.h"
#include "problem/problem.h"

namespace autoshard {

struct SpecListHash {
  size_t operator()(const std::vector<ShardingSpec>& v) const;
};

class EdgeMatrixCache {
 public:
  EdgeMatrixCache(const Mesh& mesh, CommModel model, double discount = 1)
      : mesh_(mesh), model_(model), discount_(discount) {}

  /// The id of a list of specs (equal lists, equal ids).
  int32_t intern(std::vector<ShardingSpec> specs);

  /// Row-major |from| x |to| matrix of redistribution times; `strict` forbids any change.
  /// `discounted`: times scaled by the discount (PlannerOptions::overlap).
  std::shared_ptr<const std::vector<Cost>> matrix(int32_t from, int32_t to, bool strict, bool discounted = false);

 private:
  /// Index of each spec among the distinct ones, which `first` receives (first positions).
  static std::vector<size_t> distinct(const std::vector<ShardingSpec>& v, std::vector<size_t>& first);

  const Mesh& mesh_;
  CommModel model_;
  double discount_ = 1;
  std::unordered_map<std::vector<ShardingSpec>, int32_t, SpecListHash> ids_;
  std::vector<const std::vector<ShardingSpec>*> lists_;
  std::unordered_map<uint64_t, std::shared_ptr<const std::vector<Cost>>> cache_;
};

}  // namespace autoshard

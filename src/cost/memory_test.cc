#include "cost/memory.h"

#include <gtest/gtest.h>

#include "cost/test_util.h"

namespace autoshard {
namespace {

using testing::make_mesh;
using testing::spec;

TEST(Memory, SpecBytesPerDevice) {
  Mesh mesh = make_mesh({2, 4});
  EXPECT_EQ(spec_bytes_per_device(spec("RR", {4096, 4096}), mesh), 4096LL * 4096 * 2);
  EXPECT_EQ(spec_bytes_per_device(spec("S(0)R", {4096, 4096}), mesh), 2048LL * 4096 * 2);
  EXPECT_EQ(spec_bytes_per_device(spec("S(0)S(0)", {4096, 4096}), mesh), 512LL * 4096 * 2);
  EXPECT_EQ(spec_bytes_per_device(spec("S(0)S(1)", {4096, 4096}), mesh), 2048LL * 1024 * 2);
  EXPECT_EQ(spec_bytes_per_device(spec("PR", {4096, 4096}), mesh), 4096LL * 4096 * 2);
  // Uneven: the largest shard (ceil).
  EXPECT_EQ(spec_bytes_per_device(spec("RS(0)", {7, 4}, DType::kF32), mesh), 2 * 4 * 4);
}

// ZeRO: mixed-precision Adam keeps 16 bytes per parameter (2 + 2 + 12).
TEST(Memory, OptimizerStatePerElement) {
  OptimizerConfig mixed;
  EXPECT_EQ(param_state_bytes_per_element(mixed, DType::kBF16).total(), 16);
  EXPECT_EQ(param_state_bytes_per_element(mixed, DType::kBF16).optimizer, 12);
  EXPECT_EQ(param_state_bytes_per_element(mixed, DType::kF32).total(), 16);
  OptimizerConfig adam{OptimizerConfig::kAdam};
  EXPECT_EQ(param_state_bytes_per_element(adam, DType::kF32).total(), 16);
  EXPECT_EQ(param_state_bytes_per_element(adam, DType::kBF16).total(), 8);
  OptimizerConfig sgd{OptimizerConfig::kSgd};
  EXPECT_EQ(param_state_bytes_per_element(sgd, DType::kF32).total(), 8);
  sgd.sgd_momentum = true;
  EXPECT_EQ(param_state_bytes_per_element(sgd, DType::kF32).total(), 12);
  OptimizerConfig none{OptimizerConfig::kNone};
  EXPECT_EQ(param_state_bytes_per_element(none, DType::kBF16).total(), 2);
}

TEST(Memory, ParameterStateShardsWithTheParameter) {
  Mesh mesh = make_mesh({2, 4});
  OptimizerConfig mixed;
  // LLaMA-3 8B-sized projection, 4096 x 14336.
  EXPECT_EQ(parameter_state_bytes(spec("RR", {4096, 14336}), mesh, mixed),
            16LL * 4096 * 14336);
  EXPECT_EQ(parameter_state_bytes(spec("S(0)S(1)", {4096, 14336}), mesh, mixed),
            16LL * 4096 * 14336 / 8);
  EXPECT_EQ(parameter_state_bytes(spec("S(0)R", {4096, 14336}), mesh, mixed),
            16LL * 4096 * 14336 / 2);
}

TEST(Memory, ParseOptimizer) {
  EXPECT_EQ(parse_optimizer("adam-mixed")->kind, OptimizerConfig::kAdamMixed);
  EXPECT_EQ(parse_optimizer("adamw")->kind, OptimizerConfig::kAdam);
  EXPECT_TRUE(parse_optimizer("sgd-momentum")->sgd_momentum);
  EXPECT_FALSE(parse_optimizer("lion").has_value());
  for (auto k : {OptimizerConfig::kAdamMixed, OptimizerConfig::kAdam, OptimizerConfig::kSgd,
                 OptimizerConfig::kNone})
    EXPECT_EQ(parse_optimizer(optimizer_kind_name(k))->kind, k);
}

}  // namespace
}  // namespace autoshard

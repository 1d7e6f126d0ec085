#pragma once
/// Per-device memory of sharded tensors and of parameter training state.
///
/// Parameter state per element (ZeRO, Rajbhandari et al. 2020, §3.1; cost-model.md §5):
/// - kAdamMixed: mixed-precision Adam, 16 bytes = 2 (fp16/bf16 weight) + 2 (grad) + 12
///   (fp32 master weight, momentum, variance), whatever the parameter's dtype;
/// - kAdam: weight, grad, m and v all in the parameter's dtype (4 x dtype size);
/// - kSgd: weight and grad, plus a momentum buffer when `sgd_momentum` (PyTorch's SGD only
///   allocates it for momentum != 0);
/// - kNone: inference, the weight only.
/// All of it is laid out like the parameter (the gradient takes the parameter's placement, see
/// GradPair), so it shards exactly as the parameter spec does (FSDP / ZeRO-3 style).
#include <cstdint>
#include <optional>
#include <string_view>

#include "ir/dtype.h"
#include "mesh/mesh.h"
#include "placement/placement.h"

namespace autoshard {

struct OptimizerConfig {
  enum Kind : uint8_t { kAdamMixed, kAdam, kSgd, kNone };
  Kind kind = kAdamMixed;
  bool sgd_momentum = false;  ///< kSgd only: keep a momentum buffer
};

/// "adam-mixed", "adam", "sgd", "none".
std::string_view optimizer_kind_name(OptimizerConfig::Kind k);
/// Parses the names above (also "adamw" = adam, "adam_mixed", "sgd-momentum").
std::optional<OptimizerConfig> parse_optimizer(std::string_view s);

/// Bytes of state per parameter element, split by role.
struct ParamStateBytes {
  int64_t weight = 0;
  int64_t grad = 0;
  int64_t optimizer = 0;
  int64_t total() const { return weight + grad + optimizer; }
};
ParamStateBytes param_state_bytes_per_element(const OptimizerConfig& opt, DType param_dtype);

/// Bytes one device holds for a tensor with this spec (largest shard; Partial keeps the full
/// local size).  Same as ShardingSpec::local_bytes.
int64_t spec_bytes_per_device(const ShardingSpec& spec, const Mesh& mesh);

/// Bytes one device holds for a parameter (weight + grad + optimizer state) with this spec.
int64_t parameter_state_bytes(const ShardingSpec& param_spec, const Mesh& mesh,
                              const OptimizerConfig& opt);

}  // namespace autoshard

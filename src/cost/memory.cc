#include "cost/memory.h"

namespace autoshard {

std::string_view optimizer_kind_name(OptimizerConfig::Kind k) {
  switch (k) {
    case OptimizerConfig::kAdamMixed: return "adam-mixed";
    case OptimizerConfig::kAdam: return "adam";
    case OptimizerConfig::kSgd: return "sgd";
    case OptimizerConfig::kNone: return "none";
  }
  return "?";
}

std::optional<OptimizerConfig> parse_optimizer(std::string_view s) {
  OptimizerConfig c;
  if (s == "adam-mixed" || s == "adam_mixed" || s == "adamw-mixed") {
    c.kind = OptimizerConfig::kAdamMixed;
  } else if (s == "adam" || s == "adamw") {
    c.kind = OptimizerConfig::kAdam;
  } else if (s == "sgd") {
    c.kind = OptimizerConfig::kSgd;
  } else if (s == "sgd-momentum" || s == "sgd_momentum") {
    c.kind = OptimizerConfig::kSgd;
    c.sgd_momentum = true;
  } else if (s == "none") {
    c.kind = OptimizerConfig::kNone;
  } else {
    return std::nullopt;
  }
  return c;
}

ParamStateBytes param_state_bytes_per_element(const OptimizerConfig& opt, DType param_dtype) {
  const int64_t s = dtype_size(param_dtype);
  switch (opt.kind) {
    case OptimizerConfig::kAdamMixed:
      // ZeRO §3.1: 2 + 2 + K with K = 12 (fp32 copy, momentum, variance).
      return {2, 2, 12};
    case OptimizerConfig::kAdam: return {s, s, 2 * s};
    case OptimizerConfig::kSgd: return {s, s, opt.sgd_momentum ? s : 0};
    case OptimizerConfig::kNone: return {s, 0, 0};
  }
  return {};
}

int64_t spec_bytes_per_device(const ShardingSpec& spec, const Mesh& mesh) {
  return spec.local_bytes(mesh);
}

int64_t parameter_state_bytes(const ShardingSpec& param_spec, const Mesh& mesh,
                              const OptimizerConfig& opt) {
  int64_t elems = 1;
  for (int64_t d : param_spec.local_shape(mesh)) elems *= d;
  return elems * param_state_bytes_per_element(opt, param_spec.meta.dtype).total();
}

}  // namespace autoshard

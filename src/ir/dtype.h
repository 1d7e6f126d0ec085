#pragma once
/// Element types of tensors in a graph.  The set matches what traced training graphs use;
/// names follow PyTorch's short spellings ("bf16", "f32", ...).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace autoshard {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8, kI64, kI32, kBool };

/// Bytes per element.
int64_t dtype_size(DType t);
/// Canonical short name: "f32", "bf16", "f16", "f8", "i64", "i32", "bool".
std::string_view dtype_name(DType t);
/// Parses a short name or a PyTorch name ("torch.bfloat16", "float32", "int64", ...).
std::optional<DType> parse_dtype(std::string_view name);
/// True for floating-point types (used to pick the peak FLOPS of the hardware).
bool is_floating(DType t);

}  // namespace autoshard

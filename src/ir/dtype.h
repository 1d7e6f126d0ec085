#pragma once
/// Element types of tensors in a graph.  The set matches what traced training graphs use;
/// names follow PyTorch's short spellings ("bf16", "f32", ...).  The complex types (c64: two
/// f32, c128: two f64) carry rotary embeddings written with torch.polar / view_as_complex.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace autoshard {

/// New types go at the end: the state file (src/io/state.proto) stores the enum's value.
enum class DType : uint8_t { kF32, kBF16, kF16, kF8, kI64, kI32, kBool, kC64, kC128 };
/// The last enumerator, for range checks of stored values.
inline constexpr DType kLastDType = DType::kC128;

/// Bytes per element.
int64_t dtype_size(DType t);
/// Canonical short name: "f32", "bf16", "f16", "f8", "i64", "i32", "bool", "c64", "c128".
std::string_view dtype_name(DType t);
/// Parses a short name or a PyTorch name ("torch.bfloat16", "float32", "int64", ...).
std::optional<DType> parse_dtype(std::string_view name);
/// True for floating-point types, real or complex (used to pick the peak FLOPS of the
/// hardware and in type promotion).
bool is_floating(DType t);
/// True for c64 and c128.
bool is_complex(DType t);

}  // namespace autoshard

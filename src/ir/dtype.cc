#include "ir/dtype.h"

#include <array>
#include <utility>

namespace autoshard {

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF8: return 1;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kBool: return 1;
    case DType::kC64: return 8;
    case DType::kC128: return 16;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF8: return "f8";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
    case DType::kC64: return "c64";
    case DType::kC128: return "c128";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  static constexpr std::array<std::pair<std::string_view, DType>, 25> kNames = {{
      {"f32", DType::kF32},          {"float32", DType::kF32},   {"float", DType::kF32},
      {"bf16", DType::kBF16},        {"bfloat16", DType::kBF16}, {"f16", DType::kF16},
      {"float16", DType::kF16},      {"half", DType::kF16},      {"f8", DType::kF8},
      {"float8_e4m3fn", DType::kF8}, {"float8_e5m2", DType::kF8}, {"i64", DType::kI64},
      {"int64", DType::kI64},        {"long", DType::kI64},      {"i32", DType::kI32},
      {"int32", DType::kI32},        {"int", DType::kI32},       {"bool", DType::kBool},
      {"b8", DType::kBool},          {"c64", DType::kC64},       {"complex64", DType::kC64},
      {"cfloat", DType::kC64},       {"c128", DType::kC128},     {"complex128", DType::kC128},
      {"cdouble", DType::kC128},
  }};
  for (const auto& [n, t] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

bool is_floating(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF8 ||
         is_complex(t);
}

bool is_complex(DType t) { return t == DType::kC64 || t == DType::kC128; }

}  // namespace autoshard

#include "ir/dtype.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

constexpr DType kAll[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8,  DType::kI64,
                          DType::kI32, DType::kBool, DType::kC64, DType::kC128};

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kF16), 2);
  EXPECT_EQ(dtype_size(DType::kF8), 1);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_size(DType::kI32), 4);
  EXPECT_EQ(dtype_size(DType::kBool), 1);
  EXPECT_EQ(dtype_size(DType::kC64), 8);    // two f32
  EXPECT_EQ(dtype_size(DType::kC128), 16);  // two f64
}

TEST(DType, CanonicalNamesRoundTrip) {
  for (DType t : kAll) {
    auto parsed = parse_dtype(dtype_name(t));
    ASSERT_TRUE(parsed) << dtype_name(t);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kI64), "i64");
}

TEST(DType, PyTorchNames) {
  EXPECT_EQ(parse_dtype("torch.bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("torch.float32"), DType::kF32);
  EXPECT_EQ(parse_dtype("float"), DType::kF32);
  EXPECT_EQ(parse_dtype("torch.float16"), DType::kF16);
  EXPECT_EQ(parse_dtype("half"), DType::kF16);
  EXPECT_EQ(parse_dtype("torch.float8_e4m3fn"), DType::kF8);
  EXPECT_EQ(parse_dtype("float8_e5m2"), DType::kF8);
  EXPECT_EQ(parse_dtype("torch.int64"), DType::kI64);
  EXPECT_EQ(parse_dtype("long"), DType::kI64);
  EXPECT_EQ(parse_dtype("int32"), DType::kI32);
  EXPECT_EQ(parse_dtype("torch.bool"), DType::kBool);
  EXPECT_EQ(parse_dtype("torch.complex64"), DType::kC64);
  EXPECT_EQ(parse_dtype("cfloat"), DType::kC64);
  EXPECT_EQ(parse_dtype("complex128"), DType::kC128);
  EXPECT_EQ(parse_dtype("torch.cdouble"), DType::kC128);
}

TEST(DType, UnknownNames) {
  EXPECT_FALSE(parse_dtype(""));
  EXPECT_FALSE(parse_dtype("f128"));
  EXPECT_FALSE(parse_dtype("torch."));
  EXPECT_FALSE(parse_dtype("BF16"));  // names are case-sensitive, like PyTorch's
  EXPECT_FALSE(parse_dtype("complex32"));  // torch.chalf: no graph uses it
  EXPECT_FALSE(parse_dtype("C64"));
}

TEST(DType, Floating) {
  EXPECT_TRUE(is_floating(DType::kF32));
  EXPECT_TRUE(is_floating(DType::kBF16));
  EXPECT_TRUE(is_floating(DType::kF16));
  EXPECT_TRUE(is_floating(DType::kF8));
  EXPECT_FALSE(is_floating(DType::kI64));
  EXPECT_FALSE(is_floating(DType::kI32));
  EXPECT_FALSE(is_floating(DType::kBool));
  EXPECT_TRUE(is_floating(DType::kC64));
  EXPECT_TRUE(is_floating(DType::kC128));
}

TEST(DType, Complex) {
  for (DType t : kAll)
    EXPECT_EQ(is_complex(t), t == DType::kC64 || t == DType::kC128) << dtype_name(t);
  EXPECT_EQ(dtype_name(DType::kC64), "c64");
  EXPECT_EQ(dtype_name(DType::kC128), "c128");
  EXPECT_EQ(kLastDType, DType::kC128);
}

}  // namespace
}  // namespace autoshard

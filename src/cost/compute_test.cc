#include "cost/compute.h"

#include <gtest/gtest.h>

namespace autoshard {
namespace {

Node op(const char* name, Attrs attrs = {}) {
  Node n;
  n.name = "n";
  n.kind = NodeKind::kOp;
  n.op = name;
  n.attrs = std::move(attrs);
  return n;
}

TensorMeta t(std::vector<int64_t> shape, DType dt = DType::kBF16) {
  return TensorMeta{std::move(shape), dt};
}

TEST(Compute, AtenPacket) {
  EXPECT_EQ(aten_packet("aten.sum.dim_IntList"), "sum");
  EXPECT_EQ(aten_packet("aten::mm"), "mm");
  EXPECT_EQ(aten_packet("mm.default"), "mm");
  EXPECT_EQ(aten_packet("_scaled_dot_product_flash_attention"),
            "_scaled_dot_product_flash_attention");
  EXPECT_TRUE(is_view_op("aten.view.default"));
  EXPECT_TRUE(is_view_op("_unsafe_view"));
  EXPECT_TRUE(is_view_op("split.Tensor"));
  EXPECT_FALSE(is_view_op("mm"));
}

// cost-model.md §4: mm 4096^3 = 1.374e11 FLOPs.
TEST(ComputeFlops, Matmuls) {
  const TensorMeta a = t({4096, 4096});
  EXPECT_DOUBLE_EQ(op_flops(op("mm"), {a, a}, {a}), 137438953472.0);
  EXPECT_NEAR(op_flops(op("mm"), {a, a}, {a}), 1.374e11, 0.001e11);
  EXPECT_DOUBLE_EQ(op_flops(op("addmm"), {t({4096}), a, a}, {a}), 137438953472.0);
  // bmm: 2 b m k n.
  EXPECT_DOUBLE_EQ(op_flops(op("bmm"), {t({8, 512, 64}), t({8, 64, 256})}, {t({8, 512, 256})}),
                   2.0 * 8 * 512 * 64 * 256);
  EXPECT_DOUBLE_EQ(op_flops(op("baddbmm"), {t({8, 512, 256}), t({8, 512, 64}), t({8, 64, 256})},
                            {t({8, 512, 256})}),
                   2.0 * 8 * 512 * 64 * 256);
  // Local shapes: contracting dim sharded 4 ways -> a quarter of the FLOPs.
  EXPECT_DOUBLE_EQ(op_flops(op("mm"), {t({4096, 1024}), t({1024, 4096})}, {a}),
                   137438953472.0 / 4);
  // linear composite: x [b, s, in] -> [b, s, out].
  EXPECT_DOUBLE_EQ(op_flops(op("linear"), {t({2, 128, 512}), t({1024, 512})}, {t({2, 128, 1024})}),
                   2.0 * 2 * 128 * 512 * 1024);
}

// Mixture-of-Experts grouped matmuls: 2 * out elements * k per routed row; the 2-D x 2-D
// weight gradient shares its contraction among the groups.
TEST(ComputeFlops, GroupedMm) {
  // 2-D x 3-D: 1024 routed rows of 512 times one of 8 experts [512, 256].
  EXPECT_DOUBLE_EQ(op_flops(op("_grouped_mm"), {t({1024, 512}), t({8, 512, 256}), t({8}, DType::kI32)},
                            {t({1024, 256})}),
                   2.0 * 1024 * 512 * 256);
  // 2-D x 2-D -> [8, 512, 256]: the 1024 rows split among the 8 groups' contractions.
  EXPECT_DOUBLE_EQ(op_flops(op("_grouped_mm"), {t({512, 1024}), t({1024, 256}), t({8}, DType::kI32)},
                            {t({8, 512, 256})}),
                   2.0 * 1024 * 512 * 256);
  // 3-D x 3-D (capacity-padded): every slot of every expert.
  EXPECT_DOUBLE_EQ(op_flops(op("_grouped_mm"), {t({8, 128, 512}), t({8, 512, 256})}, {t({8, 128, 256})}),
                   2.0 * 8 * 128 * 512 * 256);
}

TEST(ComputeFlops, Attention) {
  const TensorMeta q = t({2, 16, 1024, 64});
  const double fwd = 4.0 * 2 * 16 * 1024 * 1024 * 64;  // 8.59e9
  for (const char* name : {"_scaled_dot_product_flash_attention",
                           "_scaled_dot_product_efficient_attention",
                           "scaled_dot_product_attention"})
    EXPECT_DOUBLE_EQ(op_flops(op(name), {q, q, q}, {q}), fwd) << name;
  // Backward (grad_out, q, k, v, out, logsumexp): 10 b h s_q s_k d.
  const TensorMeta lse = t({2, 16, 1024}, DType::kF32);
  EXPECT_DOUBLE_EQ(op_flops(op("_scaled_dot_product_flash_attention_backward"),
                            {q, q, q, q, q, lse}, {q, q, q}),
                   10.0 * 2 * 16 * 1024 * 1024 * 64);
  EXPECT_DOUBLE_EQ(op_flops(op("_scaled_dot_product_efficient_attention_backward"),
                            {q, q, q, q, q, lse}, {q, q, q}),
                   2.5 * fwd);
  // Cross attention: s_q != s_k.
  EXPECT_DOUBLE_EQ(op_flops(op("scaled_dot_product_attention"),
                            {t({1, 8, 128, 64}), t({1, 8, 512, 64}), t({1, 8, 512, 64})},
                            {t({1, 8, 128, 64})}),
                   4.0 * 8 * 128 * 512 * 64);
  // Flash kernel layout [b, s, h, d].
  EXPECT_DOUBLE_EQ(op_flops(op("_flash_attention_forward"),
                            {t({2, 1024, 16, 64}), t({2, 1024, 16, 64}), t({2, 1024, 16, 64})},
                            {t({2, 1024, 16, 64})}),
                   fwd);
}

TEST(ComputeFlops, Convolution) {
  const TensorMeta x = t({8, 64, 56, 56});
  const TensorMeta w = t({128, 64, 3, 3});
  const TensorMeta y = t({8, 128, 56, 56});
  const double fwd = 2.0 * 8 * 128 * 56 * 56 * 64 * 9;
  EXPECT_DOUBLE_EQ(op_flops(op("convolution"), {x, w}, {y}), fwd);
  EXPECT_DOUBLE_EQ(op_flops(op("conv2d"), {x, w}, {y}), fwd);
  // groups = 2: the weight holds Cin/groups input channels.
  EXPECT_DOUBLE_EQ(op_flops(op("convolution", {{"groups", int64_t{2}}}), {x, t({128, 32, 3, 3})},
                            {y}),
                   fwd / 2);
  // Backward: input and weight gradients by default, each one forward.
  EXPECT_DOUBLE_EQ(op_flops(op("convolution_backward"), {y, x, w}, {x, w, t({128})}), 2 * fwd);
  EXPECT_DOUBLE_EQ(op_flops(op("convolution_backward",
                               {{"output_mask", std::vector<int64_t>{0, 1, 1}}}),
                            {y, x, w}, {x, w, t({128})}),
                   fwd);
  // Without the attr: a masked-off gradient is exported with shape [0].
  EXPECT_DOUBLE_EQ(op_flops(op("convolution_backward"), {y, x, w}, {t({0}), w, t({0})}), fwd);
}

TEST(ComputeFlops, OtherConventions) {
  const TensorMeta a = t({1024, 1024});
  EXPECT_DOUBLE_EQ(op_flops(op("add.Tensor"), {a, a}, {a}), 1024.0 * 1024);
  // Complex: two reals per element; a complex multiply is 4 multiplies and 2 adds.
  const TensorMeta z = t({1024, 1024}, DType::kC64);
  EXPECT_DOUBLE_EQ(op_flops(op("mul.Tensor"), {z, z}, {z}), 6.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(op_flops(op("_conj"), {z}, {z}), 2.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(op_flops(op("polar"), {a, a}, {z}), 2.0 * 1024 * 1024);
  EXPECT_EQ(op_flops(op("view_as_complex"), {t({1024, 1024, 2}, DType::kF32)}, {z}), 0.0);
  EXPECT_DOUBLE_EQ(op_flops(op("native_layer_norm"), {a, t({1024}), t({1024})},
                            {a, t({1024, 1}), t({1024, 1})}),
                   5.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(op_flops(op("_softmax"), {a}, {a}), 5.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(op_flops(op("sum.dim_IntList"), {a}, {t({1024})}), 1024.0 * 1024);
  EXPECT_EQ(op_flops(op("view"), {a}, {t({1024 * 1024})}), 0.0);
  EXPECT_EQ(op_flops(op("embedding"), {t({32000, 4096}), t({8, 128}, DType::kI64)},
                     {t({8, 128, 4096})}),
            0.0);
  Node param;
  param.kind = NodeKind::kParameter;
  param.outputs = {a};
  EXPECT_EQ(op_flops(param, {}, {a}), 0.0);
}

TEST(ComputeTime, RooflineBranches) {
  const Hardware hw = *hardware_preset("a100");  // 312 TFLOPS bf16, 2039 GB/s, eta 0.7
  const TensorMeta a = t({4096, 4096});
  // Compute-bound: 1.374e11 / (0.7 * 312e12) s.
  EXPECT_NEAR(compute_time_us(op("mm"), {a, a}, {a}, hw), 629.299, 0.01);
  // FP32 runs at the FP32 peak (19.5 TFLOPS).
  const TensorMeta f = t({4096, 4096}, DType::kF32);
  EXPECT_NEAR(compute_time_us(op("mm"), {f, f}, {f}, hw),
              137438953472.0 / (0.7 * 19.5e12) * 1e6, 1e-6);
  // Memory-bound: add of three 32 MiB bf16 tensors / (0.7 * 2039 GB/s).
  EXPECT_NEAR(compute_time_us(op("add.Tensor"), {a, a}, {a}, hw), 70.527, 0.01);
  // Launch floor.
  EXPECT_DOUBLE_EQ(compute_time_us(op("add.Tensor"), {t({4}), t({4})}, {t({4})}, hw), 7.0);
  // The power-capped H100 (mesh/hardware.h "h100-500w"): a compute-bound matmul slows by the
  // peak ratio 989/912, a memory-bound add by the HBM ratio 3350/2400.
  const Hardware full = *hardware_preset("h100");
  const Hardware capped = *hardware_preset("h100-500w");
  EXPECT_NEAR(compute_time_us(op("mm"), {a, a}, {a}, capped) /
                  compute_time_us(op("mm"), {a, a}, {a}, full),
              989.0 / 912.0, 1e-12);
  EXPECT_NEAR(compute_time_us(op("add.Tensor"), {a, a}, {a}, capped) /
                  compute_time_us(op("add.Tensor"), {a, a}, {a}, full),
              3350.0 / 2400.0, 1e-12);
  // Gathers read the indexed rows, not the table.
  const TensorMeta table = t({128256, 4096});
  const TensorMeta idx = t({8, 4096}, DType::kI64);
  const TensorMeta rows = t({8, 4096, 4096});
  EXPECT_DOUBLE_EQ(op_memory_bytes(op("embedding"), {table, idx}, {rows}),
                   static_cast<double>(idx.bytes() + 2 * rows.bytes()));
}

// KernelOptions: --float8 prices a linear layer's matmul at the dense FP8 peak (NVIDIA H100
// datasheet: 3,958 TFLOPS with sparsity, 1,979 dense) after the cast of its operands, and
// leaves attention, bmm and the output projection at BF16; --compile divides memory-bound ops
// (the cast among them) by compile_memory_speedup only.
TEST(ComputeTime, Float8AndCompile) {
  const Hardware eager = *hardware_preset("h100");
  Hardware fast = eager;
  fast.kernels.float8_linear = true;
  fast.kernels.compiled = true;
  ASSERT_GT(fast.compile_memory_speedup, 1.0);
  const TensorMeta a = t({4096, 4096});
  Node wq = op("mm");
  wq.module_path = "layers.0.attention.wq";
  // The GEMM: 1.374e11 FLOPs / (0.7 * 1979e12) s (compute-bound: it reads 2 x 16.8 MB of FP8
  // and writes 33.6 MB); the cast: 2 x 4096^2 elements read at 2 bytes and written at 1, at
  // 0.7 x 3350 GB/s.
  const double gemm_us = 137438953472.0 / (0.7 * 1979e12) * 1e6;
  const double cast_us = 2.0 * 4096 * 4096 * 3 / (0.7 * 3350e9) * 1e6;
  Hardware fp8_only = eager;
  fp8_only.kernels.float8_linear = true;
  EXPECT_NEAR(compute_time_us(wq, {a, a}, {a}, fp8_only), gemm_us + cast_us, 1e-9);
  EXPECT_NEAR(compute_time_us(wq, {a, a}, {a}, fast), gemm_us + cast_us / fast.compile_memory_speedup, 1e-9);
  EXPECT_NEAR(compute_time_us(wq, {a, a}, {a}, eager), 137438953472.0 / (0.7 * 989e12) * 1e6, 1e-9);
  // Operands already in FP8 (a traced _scaled_mm) need no cast; addmm's bias is not cast.
  const TensorMeta a8 = t({4096, 4096}, DType::kF8);
  EXPECT_NEAR(compute_time_us(wq, {a8, a8}, {a}, fp8_only), gemm_us, 1e-9);
  Node fc = op("addmm");
  fc.module_path = "layers.0.mlp.fc";
  EXPECT_NEAR(compute_time_us(fc, {t({4096}), a, a}, {a}, fp8_only), gemm_us + cast_us, 1e-9);
  Node head = op("mm");
  head.module_path = "output";
  EXPECT_DOUBLE_EQ(compute_time_us(head, {a, a}, {a}, fast), compute_time_us(head, {a, a}, {a}, eager));
  const TensorMeta q = t({1, 32, 8192, 128});
  for (Node n : {op("_scaled_dot_product_flash_attention"), op("bmm"), op("matmul")}) {
    n.module_path = "layers.0.attention";
    const std::vector<TensorMeta> in = n.op == "bmm" ? std::vector{t({32, 512, 128}), t({32, 128, 512})}
                                                     : std::vector{q, q, q};
    const std::vector<TensorMeta> out = {n.op == "bmm" ? t({32, 512, 512}) : q};
    EXPECT_DOUBLE_EQ(compute_time_us(n, in, out, fast), compute_time_us(n, in, out, eager)) << n.op;
  }
  EXPECT_TRUE(is_float8_linear_matmul(op("linear"), {t({2, 128, 512}), t({1024, 512})}));
  EXPECT_TRUE(is_float8_linear_matmul(op("matmul"), {t({2, 128, 512}), t({512, 1024})}));
  EXPECT_FALSE(is_float8_linear_matmul(op("matmul"), {q, q}));
  // An FP8 dtype runs at the FP8 peak (a traced _scaled_mm), on a chip that has one.
  EXPECT_DOUBLE_EQ(eager.peak_flops(DType::kF8), 1979e12);
  EXPECT_DOUBLE_EQ(hardware_preset("a100")->peak_flops(DType::kF8), 312e12);
  // Compile: a memory-bound add is divided by the speed-up, down to the launch floor.
  EXPECT_NEAR(compute_time_us(op("add.Tensor"), {a, a}, {a}, fast),
              compute_time_us(op("add.Tensor"), {a, a}, {a}, eager) / fast.compile_memory_speedup, 1e-9);
  EXPECT_DOUBLE_EQ(compute_time_us(op("add.Tensor"), {t({4}), t({4})}, {t({4})}, fast), 7.0);
  EXPECT_TRUE(is_fusible_memory_bound(op("_fused_rms_norm")));
  EXPECT_FALSE(is_fusible_memory_bound(op("embedding")));
}

TEST(ComputeTime, ZeroCostOps) {
  const Hardware hw = *hardware_preset("h100");
  const TensorMeta a = t({4096, 4096});
  for (const char* name : {"view", "_unsafe_view", "_reshape_alias", "reshape", "t",
                           "transpose.int", "permute", "expand", "squeeze.dim", "unsqueeze",
                           "slice.Tensor", "select.int", "alias", "detach", "split.Tensor",
                           "unbind.int", "as_strided", "empty.memory_format"})
    EXPECT_EQ(compute_time_us(op(name), {a}, {a}, hw), 0.0) << name;
  Node input;
  input.kind = NodeKind::kInput;
  EXPECT_EQ(compute_time_us(input, {}, {a}, hw), 0.0);
  Node output;
  output.kind = NodeKind::kOutput;
  EXPECT_EQ(compute_time_us(output, {a}, {}, hw), 0.0);
  // A real copy is not free.
  EXPECT_GT(compute_time_us(op("clone"), {a}, {a}, hw), 0.0);
}

}  // namespace
}  // namespace autoshard

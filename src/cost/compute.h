#pragma once
/// Compute cost of one op node on one device: FLOP counts per ATen op and a roofline time.
///
/// FLOPs follow PyTorch torch/utils/flop_counter.py (../shared/reference/cost-model.md §4):
/// - mm 2mkn; addmm and _scaled_mm as mm (bias ignored); bmm 2bmkn; baddbmm as bmm; the
///   composites matmul / linear as 2 * (output elements) * k;
/// - convolution / _convolution / conv{1,2,3}d: 2 N Cout (Cin/groups) prod(kernel)
///   prod(output spatial) (transposed: input spatial); convolution_backward: that figure once
///   per requested gradient among input and weight (output_mask attr, else the outputs not
///   exported as shape [0]).  flop_counter counts the weight gradient of a grouped conv with
///   all Cin; we use Cin/groups for both;
/// - _scaled_dot_product_{flash,efficient,cudnn}_attention and scaled_dot_product_attention,
///   q/k/v as [b, h, s, d]: forward 2bh s_q s_k d_qk + 2bh s_q s_k d_v (= 4 b h s_q s_k d);
///   their _backward: 2bh s_q s_k (3 d_qk + 2 d_v) (= 10 b h s_q s_k d);
///   _flash_attention_forward / _efficient_attention_forward ([b, s, h, d] layout) likewise;
/// Beyond flop_counter (which counts only the above), our conventions: pointwise ops 1 FLOP per
/// output element; norms, softmax and their backwards 5 per element; reductions 1 per input
/// element; views/aliases, creation of uninitialised tensors, gathers (embedding, index...)
/// and copies 0.
///
/// Time: roofline max(flops / (eta peak(dtype)), bytes / (eta hbm), launch floor) with
/// eta = Hardware::efficiency, bytes = sum of input and output bytes (for gathers, the table
/// read is replaced by the gathered rows).  Zero-cost ops (views/aliases, placeholders, "empty")
/// take 0 time, without the launch floor.
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "mesh/hardware.h"

namespace autoshard {

/// The ATen overload packet of an op name: strips "aten." / "aten::" and an overload suffix
/// (".default", ".Tensor", ".dim_IntList", ...): "aten.sum.dim_IntList" -> "sum".
std::string_view aten_packet(std::string_view op);

/// True for ops that only create views/aliases (no kernel): view, _unsafe_view, reshape, t,
/// transpose, permute, expand, squeeze, unsqueeze, slice, select, split, unbind, as_strided...
bool is_view_op(std::string_view op);

/// FLOPs of `node` given the (local) metas of its tensor inputs, in schema order, and outputs.
/// 0 for non-op nodes.
double op_flops(const Node& node, const std::vector<TensorMeta>& inputs,
                const std::vector<TensorMeta>& outputs);

/// Bytes read and written by `node` (the roofline's memory term); 0 for zero-cost ops.
double op_memory_bytes(const Node& node, const std::vector<TensorMeta>& inputs,
                       const std::vector<TensorMeta>& outputs);

/// True for the matmuls that hw.kernels.float8_linear moves to the FP8 tensor cores: mm and
/// addmm (a linear layer's forward and both gradients once decomposed), linear, and matmul
/// against a 2-D operand; not under the output projection (module path "output" or
/// "lm_head"), not bmm/attention.  A graph that carries no module paths converts them all.
bool is_float8_linear_matmul(const Node& node, const std::vector<TensorMeta>& inputs);

/// True for the memory-bound ops that torch.compile fuses (hw.kernels.compiled): pointwise,
/// norms/softmax, reductions and copies.  Not matmuls, attention, convolutions or gathers.
bool is_fusible_memory_bound(const Node& node);

/// Roofline time in microseconds of `node` on one device, given local metas.  With
/// hw.kernels.float8_linear, an is_float8_linear_matmul op is two kernels, as torchao's
/// tensorwise dynamic scaling runs it: the cast of its two operands to FP8 (memory-bound: each
/// element read at its size, written in one byte; the amax taken as fused into it), then the
/// GEMM at hw.peak_fp8_tflops on FP8 operands.  With hw.kernels.compiled, the roofline time of
/// is_fusible_memory_bound ops and of those casts is divided by hw.compile_memory_speedup (the
/// launch floor still applies).
double compute_time_us(const Node& node, const std::vector<TensorMeta>& local_inputs,
                       const std::vector<TensorMeta>& local_outputs, const Hardware& hw);

}  // namespace autoshard

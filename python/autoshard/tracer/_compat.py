"""Version shims: one place for everything that differs between PyTorch 1.13 and 2.x.

Everything here is feature-tested (hasattr / try-import), never version-compared, so newer
releases keep working as long as the public APIs stay.
"""
from __future__ import annotations

import contextlib

import sys

import torch

# --- functional_call: torch.func (2.x) or torch.nn.utils.stateless (1.12-1.13, deprecated later)
try:  # pragma: no cover - depends on the installed torch
    from torch.func import functional_call as _functional_call  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    from torch.nn.utils.stateless import functional_call as _functional_call  # type: ignore

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: F401  (same API on 1.13 and 2.x)


def functional_call(module, tensors, args, kwargs=None):
    """Calls `module` with its parameters/buffers replaced by `tensors` (name -> tensor)."""
    return _functional_call(module, tensors, tuple(args), kwargs or {})


def decomposition_table(decompose: str | None) -> dict | None:
    """make_fx decomposition table for `decompose` (None or "core_aten")."""
    if decompose is None:
        return None
    if decompose != "core_aten":
        raise ValueError(f"decompose must be None or 'core_aten', got {decompose!r}")
    try:
        from torch._decomp import core_aten_decompositions
    except ImportError as e:  # pragma: no cover - torch < 2.1
        raise RuntimeError("decompose='core_aten' needs PyTorch >= 2.1") from e
    return core_aten_decompositions()


@contextlib.contextmanager
def compiling():
    """Inside, `torch.compiler.is_compiling()` is True, as torch.export's non-strict tracing
    sets it: libraries then take their graph-friendly paths instead of data-dependent checks
    that read tensor values (Hugging Face's masks test `mask.all()` unless compiling), which a
    meta tensor cannot answer ("Tensor.item() cannot be called on meta tensors").  The flag
    is torch.compiler's private `_is_compiling_flag` (PyTorch >= 2.3); without it, a no-op."""
    comp = getattr(torch, "compiler", None)
    if comp is None or not hasattr(comp, "_is_compiling_flag"):
        yield
        return
    old = comp._is_compiling_flag
    comp._is_compiling_flag = True
    # Hugging Face's MoE experts (transformers.integrations.moe) route non-bf16 weights to a
    # custom op instead of `torch._grouped_mm` when compiling, because inductor lacks that
    # kernel.  The trace is not compiled: the experts take the path eager takes, so the graph
    # records the ATen op the planner has a rule for and the runtime runs.
    hf_moe = sys.modules.get("transformers.integrations.moe")
    chooser = getattr(hf_moe, "_can_use_grouped_mm", None)
    if chooser is not None:

        def eager_choice(*args, **kwargs):
            comp._is_compiling_flag = old
            try:
                return chooser(*args, **kwargs)
            finally:
                comp._is_compiling_flag = True

        hf_moe._can_use_grouped_mm = eager_choice
    try:
        yield
    finally:
        comp._is_compiling_flag = old
        if chooser is not None:
            hf_moe._can_use_grouped_mm = chooser


def has_device_context() -> bool:
    """True when `with torch.device("meta"):` works (PyTorch >= 2.0)."""
    dev = torch.device("cpu")
    return hasattr(dev, "__enter__") and hasattr(dev, "__exit__")


def sdpa_available() -> bool:
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


# --- meta kernels missing on old releases --------------------------------------------------
# PyTorch 1.13 has no Meta kernel for some backward ops, so tracing a conv net on the meta
# device fails with "NotImplementedError ... 'Meta' backend".  The kernels below only compute
# output shapes (empty tensors); they are registered only when the op has no Meta kernel yet.
_meta_lib = None  # keeps the torch.library.Library alive (registrations die with it)


def _has_meta_kernel(op_name: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op_name, "Meta"))
    except Exception:  # pragma: no cover - private API gone: assume the release has them
        return True


def _meta_convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
                               dilation, transposed, output_padding, groups, output_mask):
    grad_input = torch.empty_like(input) if output_mask[0] else None
    grad_weight = torch.empty_like(weight) if output_mask[1] else None
    grad_bias = None
    if output_mask[2]:
        # bias_sizes is [Cout] (Optional on newer schemas): fall back to grad_output's channels.
        n = list(bias_sizes) if bias_sizes is not None else [grad_output.shape[1]]
        grad_bias = grad_output.new_empty(n)
    return grad_input, grad_weight, grad_bias


def _meta_adaptive_avg_pool_backward(grad_output, self):
    return torch.empty_like(self)


_MISSING_META = {
    "convolution_backward": _meta_convolution_backward,
    "_adaptive_avg_pool2d_backward": _meta_adaptive_avg_pool_backward,
    "_adaptive_avg_pool3d_backward": _meta_adaptive_avg_pool_backward,
}


def _meta_grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """Output of `aten._grouped_mm` (the grouped expert matmul of Mixture-of-Experts layers)
    for any floating dtype.  Shapes, by operand ranks (G groups, `offs` the G group ends along
    the jagged dim): 2D (M, K) x 3D (G, K, N) -> (M, N), rows grouped; 3D (G, M, K) x 2D
    (K, N) -> (M, N), columns grouped; 2D (M, K) x 2D (K, N) -> (G, M, N), the contraction
    grouped (a weight gradient); 3D x 3D -> (G, M, N), a batched matmul."""
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a2:
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    return mat_a.new_empty(size, dtype=out_dtype or mat_a.dtype)


def _grouped_mm_needs_meta() -> bool:
    """True when the installed Meta kernel of `_grouped_mm` rejects float32 operands.

    PyTorch's Meta kernel repeats the CUDA kernel's checks ("Expected inputs of BF16 type"),
    while the CPU kernel (and Hugging Face's MoE experts, which call it for float32 models on
    CPU) accepts float32: a float32 model could not be traced on meta."""
    op = getattr(torch.ops.aten, "_grouped_mm", None)
    if op is None:
        return False
    a = torch.empty(4, 8, device="meta")
    b = torch.empty(2, 8, 8, device="meta")
    offs = torch.empty(2, dtype=torch.int32, device="meta")
    try:
        op(a, b, offs)
        return False
    except RuntimeError:
        return True


def ensure_meta_kernels() -> list[str]:
    """Registers shape-only Meta kernels for ops that lack one (or whose Meta kernel refuses
    what the CPU kernel runs); returns the ops registered."""
    global _meta_lib, _grouped_mm_checked
    todo = [n for n in _MISSING_META if not _has_meta_kernel("aten::" + n)]
    kernels = dict(_MISSING_META)
    if not _grouped_mm_checked:  # probed once per process
        _grouped_mm_checked = True
        if _grouped_mm_needs_meta():
            todo.append("_grouped_mm")
            kernels["_grouped_mm"] = _meta_grouped_mm
    if not todo:
        return []
    if _meta_lib is None:
        _meta_lib = torch.library.Library("aten", "IMPL", "Meta")
    done = []
    for name in todo:
        try:
            _meta_lib.impl(name, kernels[name])
            done.append(name)
        except RuntimeError:  # already registered by someone else: fine
            pass
    return done


_grouped_mm_checked = False


# --- dtypes --------------------------------------------------------------------------------
_DTYPE_NAMES = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "bool",
    torch.complex64: "c64",  # rotary tables built with torch.polar (Meta's LLaMA, torchtitan)
    torch.complex128: "c128",
}
for _n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _n):
        _DTYPE_NAMES[getattr(torch, _n)] = "f8"

_DTYPE_BY_NAME = {
    "f32": torch.float32, "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "f16": torch.float16, "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
}


def dtype_name(dt) -> str | None:
    """autoshard's short name for a torch dtype, or None when the graph format has no such type."""
    return _DTYPE_NAMES.get(dt)


def parse_dtype(name):
    """torch dtype for "bf16" / "float32" / torch.bfloat16 ...; None passes through."""
    if name is None or isinstance(name, torch.dtype):
        return name
    key = str(name).lower().replace("torch.", "")
    if key not in _DTYPE_BY_NAME:
        raise ValueError(f"unknown dtype {name!r} (use f32, bf16 or f16)")
    return _DTYPE_BY_NAME[key]

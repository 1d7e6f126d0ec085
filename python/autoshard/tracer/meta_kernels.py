"""Shape-only Meta kernels for ATen ops that PyTorch ships without one, registered only while
the tracer (or the lowering, which traces again on fake tensors) runs.

PyTorch 2.13 has a Meta kernel for `aten::_ctc_loss` (int-list lengths) but none for its
`.Tensor` overload, which `F.ctc_loss` calls whenever the lengths are tensors (the usual
case), nor for `_ctc_loss_backward` (either overload): tracing a speech model trained with
CTC on meta failed with "no fake impl or Meta kernel registered".

`scoped_meta_kernels()` registers the kernels below through a `torch.library.Library` of
kind IMPL on the Meta dispatch key (and, for ops tagged with a data-dependent output shape,
as fake implementations, which FakeTensorMode consults first) and destroys those libraries on
exit, which removes the registrations again: outside a trace the dispatcher is as PyTorch left it.  Nested entries
share one registration (a depth count).  Ops that already have a Meta kernel (a newer PyTorch,
or another library's registration) are left alone.

Output shapes (the op's own, from the CPU kernel's allocation in ATen's LossCTC.cpp):
neg_log_likelihood [N] (the aten op never reduces: `ctc_loss` applies the reduction with ops
after it) and log_alpha [N, T, 2 * max_target_length + 1], with log_probs [T, N, C].  The
maximum target length is a value of `target_lengths`, which a meta tensor does not have; the
tracer's policy for data-dependent sizes (docs/tracer.md, "Data-dependent code") takes its
upper bound: the targets' padded width for [N, S] targets, their total length for
concatenated 1-D targets.  log_alpha is only read by the backward, so the bound over-counts
memory, never misplans a shape another op sees.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

__all__ = ["scoped_meta_kernels", "MISSING_META"]


def _ctc_loss_meta(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths,
                   target_lengths, blank: int = 0, zero_infinity: bool = False):
    """(neg_log_likelihood [N], log_alpha [N, T, 2 * L + 1]) for log_probs [T, N, C]; L is the
    upper bound of the longest target (see the module docstring)."""
    if log_probs.dim() != 3:
        raise RuntimeError(f"_ctc_loss: log_probs must be [T, N, C], got {list(log_probs.shape)}")
    steps, batch = log_probs.shape[0], log_probs.shape[1]
    if isinstance(target_lengths, (list, tuple)):  # the int-list overload: known exactly
        longest = max(target_lengths, default=0)
    else:
        longest = targets.shape[1] if targets.dim() == 2 else targets.numel()
    nll = log_probs.new_empty([batch])
    log_alpha = log_probs.new_empty([batch, steps, 2 * longest + 1])
    return nll, log_alpha


def _ctc_loss_backward_meta(grad: torch.Tensor, log_probs: torch.Tensor, *rest) -> torch.Tensor:
    """The gradient of log_probs: its shape, dtype and layout."""
    return torch.empty_like(log_probs)


#: op (with overload) -> shape-only kernel, for the ops PyTorch may lack a Meta kernel for.
MISSING_META: dict[str, Callable] = {
    "_ctc_loss": _ctc_loss_meta,  # has a Meta kernel, but FakeTensorMode refuses it (below)
    "_ctc_loss.Tensor": _ctc_loss_meta,
    "_ctc_loss_backward": _ctc_loss_backward_meta,
    "_ctc_loss_backward.Tensor": _ctc_loss_backward_meta,
}


def _has_meta(op: str) -> bool:
    """Whether aten::`op` (name.overload) has a Meta kernel now."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + op, "Meta"))
    except RuntimeError:  # the op does not exist in this release: nothing to supply
        return True


def _dynamic_output(op: str) -> bool:
    """Whether aten::`op` carries the dynamic_output_shape tag: FakeTensorMode (DTensor's
    sharding propagation, make_fx on fake tensors) then refuses it before any Meta kernel."""
    name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, name, None)
    fn = getattr(packet, overload or "default", None) if packet is not None else None
    return fn is not None and torch.Tag.dynamic_output_shape in fn.tags


class _Scope:
    depth = 0
    libs: list = []  # the torch.library.Library objects holding the registrations
    registered: list[str] = []


@contextlib.contextmanager
def scoped_meta_kernels() -> Iterator[list]:
    """Inside, the kernels of MISSING_META are registered on the Meta key for every op that has
    none; yields the list of ops registered (shared by nested entries).  On exit of the
    outermost entry the registrations are removed."""
    if _Scope.depth == 0:
        todo = [op for op in MISSING_META if not _has_meta(op)]
        if todo:
            lib = torch.library.Library("aten", "IMPL", "Meta")
            _Scope.libs.append(lib)
            for op in todo:
                lib.impl(op, MISSING_META[op])
        # The same kernels as fake implementations, which FakeTensorMode consults before its
        # refusal of data-dependent output shapes (the tag both _ctc_loss overloads carry).
        fakes = [op for op in MISSING_META if _dynamic_output(op)]
        if fakes:
            fake = torch.library.Library("aten", "FRAGMENT")
            _Scope.libs.append(fake)
            for op in fakes:
                fake._register_fake(op, MISSING_META[op])
        _Scope.registered = todo + [op for op in fakes if op not in todo]
    _Scope.depth += 1
    try:
        yield _Scope.registered
    finally:
        _Scope.depth -= 1
        if _Scope.depth == 0:
            while _Scope.libs:
                _Scope.libs.pop()._destroy()
            _Scope.registered = []

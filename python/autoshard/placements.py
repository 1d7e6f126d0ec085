"""DTensor placements <-> autoshard's placement strings ("S(0)R", "P(sum)S(1)").

Strings are what the C++ core speaks; DTensor `Shard`/`Replicate`/`Partial` objects are what
PyTorch users write.  Conversion to DTensor objects imports torch lazily, so this module works
without torch as long as only strings are used.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

_ITEM = re.compile(r"S\((-?\d+)\)|R|P\((\w+)\)|P")


def to_string(placements: Any) -> str:
    """One tensor's placements (a string, a sequence of DTensor placements, or one DTensor
    placement for a 1-D mesh) -> "S(0)R"."""
    if isinstance(placements, str):
        return placements
    if not isinstance(placements, (list, tuple)):
        placements = (placements,)
    out = []
    for p in placements:
        name = type(p).__name__
        if isinstance(p, str):
            out.append(p)
        elif name in ("Shard", "_StridedShard"):
            out.append(f"S({p.dim})")
        elif name == "Replicate":
            out.append("R")
        elif name in ("Partial", "_Partial", "_NormPartial"):
            op = getattr(p, "reduce_op", "sum")
            out.append(f"P({getattr(op, 'name', op)})".replace("P(SUM)", "P(sum)"))
        else:
            raise TypeError(f"not a DTensor placement: {p!r}")
    return "".join(out)


def to_strings(items: Sequence[Any]) -> list[str | None]:
    """A list of per-tensor placements (None = unconstrained) -> strings for the core."""
    return [None if p is None else to_string(p) for p in items]


def parse(spec: str) -> list[tuple[str, Any]]:
    """"S(0)RP(sum)" -> [("S", 0), ("R", None), ("P", "sum")] (pure Python, no torch)."""
    out, pos = [], 0
    while pos < len(spec):
        m = _ITEM.match(spec, pos)
        if not m:
            raise ValueError(f"placements {spec!r}: cannot parse at position {pos}")
        text = m.group(0)
        if text.startswith("S"):
            out.append(("S", int(m.group(1))))
        elif text == "R":
            out.append(("R", None))
        else:
            out.append(("P", m.group(2) or "sum"))
        pos = m.end()
    return out


def to_dtensor(spec: str) -> tuple:
    """"S(0)R" -> (Shard(0), Replicate()) (needs torch)."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    items = []
    for kind, arg in parse(spec):
        if kind == "S":
            items.append(Shard(arg))
        elif kind == "R":
            items.append(Replicate())
        else:
            items.append(Partial(arg))
    return tuple(items)


"""DTensor placements <-> autoshard's placement strings ("S(0)R", "P(sum)S(1)", "_S(0,8)S(0)").

Strings are what the C++ core speaks; DTensor `Shard`/`_StridedShard`/`Replicate`/`Partial`
objects are what PyTorch users write.  Conversion to DTensor objects imports torch lazily, so
this module works without torch as long as only strings are used.

Shard order (src/placement/placement.h): `_S(d,sf)` is torch 2.13's `_StridedShard(d,
split_factor=sf)`: mesh dims after it that cut tensor dim d before it have sf shards in all.
torch also writes the same layout as plain `Shard` placements plus a `shard_order` (tensor dim ->
mesh dims, outermost cut first); `to_shard_order` / `from_shard_order` convert between the two.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

#: One item, DTensor's short or long spelling (keywords optional), after optional ", ".
_ITEM = re.compile(
    r"\s*,?\s*(?:"
    r"(?:_S|_StridedShard)\(\s*(?:dim\s*=\s*)?(\d+)\s*,\s*(?:(?:sf|split_factor)\s*=\s*)?(\d+)\s*\)"
    r"|(?:S|Shard)\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)"
    r"|(?:Replicate\(\)|R)"
    r"|(?:P|Partial)\(\s*(?:reduce_op\s*=\s*)?['\"]?(\w*)['\"]?\s*\)"
    r"|P)\s*")


def to_string(placements: Any) -> str:
    """One tensor's placements (a string, a sequence of DTensor placements, or one DTensor
    placement for a 1-D mesh) -> "S(0)R"; a `_StridedShard` -> "_S(dim,sf)"."""
    if isinstance(placements, str):
        return placements
    if not isinstance(placements, (list, tuple)):
        placements = (placements,)
    out = []
    for p in placements:
        name = type(p).__name__
        if isinstance(p, str):
            out.append(p)
        elif name == "_StridedShard":
            # Split factor 1 (from a view) stays visible; the parsers read it as S(dim).
            out.append(f"_S({p.dim},{int(p.split_factor)})")
        elif name == "Shard":
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
    """"S(0)_S(1,2)RP(sum)" -> [("S", 0), ("SS", (1, 2)), ("R", None), ("P", "sum")] (pure
    Python, no torch).  Also DTensor's long spellings, ", " separators and one pair of []; a
    split factor of 1 is a plain ("S", d).  ValueError names the 0-based position."""
    text, pos, end = spec, 0, len(spec)
    stripped = spec.strip()
    if stripped.startswith("[") and stripped.endswith("]"):
        pos, end = spec.index("[") + 1, spec.rindex("]")
    out = []
    while pos < end:
        m = _ITEM.match(text, pos, end)
        if not m or m.end() == pos:
            raise ValueError(f"placements {spec!r}: cannot parse at position {pos}")
        dim_ss, sf, dim_s, op = m.group(1), m.group(2), m.group(3), m.group(4)
        if dim_ss is not None:
            if int(sf) < 1:
                raise ValueError(f"placements {spec!r}: split factor 0 at position {pos}")
            out.append(("SS", (int(dim_ss), int(sf))) if int(sf) > 1 else ("S", int(dim_ss)))
        elif dim_s is not None:
            out.append(("S", int(dim_s)))
        elif m.group(0).strip(" ,").startswith(("R", "Replicate")):
            out.append(("R", None))
        else:
            out.append(("P", op or "sum"))
        pos = m.end()
    if not out:
        raise ValueError(f"placements {spec!r}: no placements at position 0")
    return out


def to_dtensor(spec: str) -> tuple:
    """"_S(0,8)S(0)" -> (_StridedShard(0, split_factor=8), Shard(0)) (needs torch)."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    items = []
    for kind, arg in parse(spec):
        if kind == "S":
            items.append(Shard(arg))
        elif kind == "SS":
            items.append(_StridedShard(arg[0], split_factor=arg[1]))
        elif kind == "R":
            items.append(Replicate())
        else:
            items.append(Partial(arg))
    return tuple(items)


def decode_order(spec: str, mesh_shape: Sequence[int]) -> Optional[dict[int, list[int]]]:
    """Tensor dim -> mesh dims cutting it, outermost first, decoded from the split factors as
    torch 2.13's DTensorSpec._maybe_convert_StridedShard_to_shard_order does; None when some
    split factor fits no position."""
    items = parse(spec)
    if len(items) != len(mesh_shape):
        raise ValueError(f"placements {spec!r}: {len(items)} placements for a "
                         f"{len(mesh_shape)}-D mesh")
    order: dict[int, list[int]] = {}
    for m in reversed(range(len(items))):
        kind, arg = items[m]
        if kind not in ("S", "SS"):
            continue
        dim, sf = (arg, 1) if kind == "S" else arg
        cuts = order.setdefault(dim, [])
        acc = 1
        for i in range(len(cuts) + 1):
            if acc == sf:
                cuts.insert(i, m)
                break
            if i < len(cuts):
                acc *= mesh_shape[cuts[i]]
        else:
            return None
    return dict(sorted(order.items()))


def encode_order(spec: str, order: dict[int, Sequence[int]], mesh_shape: Sequence[int]) -> str:
    """Plain placements plus a shard order (tensor dim -> mesh dims, outermost first) -> the
    string with strided shards (torch's _convert_shard_order_to_StridedShard)."""
    items = parse(spec)
    out = [to_string_item(k, a) for k, a in items]
    listed = set()
    for dim, cuts in order.items():
        for i, m in enumerate(cuts):
            kind, arg = items[m]
            here = arg if kind == "S" else (arg[0] if kind == "SS" else None)
            if here != dim or m in listed:
                raise ValueError(f"shard order {order}: mesh dim {m} does not shard tensor dim "
                                 f"{dim} in {spec!r} (or is listed twice)")
            listed.add(m)
            sf = 1
            for earlier in cuts[:i]:
                if earlier > m:
                    sf *= mesh_shape[earlier]
            out[m] = f"_S({dim},{sf})" if sf > 1 else f"S({dim})"
    missing = [m for m, (k, _) in enumerate(items) if k in ("S", "SS") and m not in listed]
    if missing:
        raise ValueError(f"shard order {order} misses mesh dims {missing} of {spec!r}")
    return "".join(out)


def to_string_item(kind: str, arg: Any) -> str:
    """One parsed item back to its short string."""
    if kind == "S":
        return f"S({arg})"
    if kind == "SS":
        return f"_S({arg[0]},{arg[1]})"
    if kind == "R":
        return "R"
    return f"P({arg})"


def to_shard_order(spec: str, mesh_shape: Sequence[int]) -> tuple[tuple, tuple]:
    """"_S(0,8)S(0)" on (8, 8) -> ((Shard(0), Shard(0)), (ShardOrderEntry(0, (1, 0)),)): the
    torch 2.13 DTensorSpec(placements=..., shard_order=...) spelling of the same layout (needs
    torch)."""
    from torch.distributed.tensor._dtensor_spec import ShardOrderEntry

    order = decode_order(spec, mesh_shape)
    if order is None:
        raise ValueError(f"placements {spec!r}: the split factors fit no shard order on mesh "
                         f"{tuple(mesh_shape)}")
    plain = "".join(to_string_item("S", a[0]) if k == "SS" else to_string_item(k, a)
                    for k, a in parse(spec))
    entries = tuple(ShardOrderEntry(tensor_dim=d, mesh_dims=tuple(c)) for d, c in order.items())
    return to_dtensor(plain), entries


def from_shard_order(placements: Sequence[Any], shard_order: Optional[Sequence[Any]],
                     mesh_shape: Sequence[int]) -> str:
    """torch's (placements, shard_order) -> autoshard's string ("_S(0,8)S(0)"); placements may
    already hold _StridedShard (then shard_order must be None, as torch requires)."""
    spec = to_string(tuple(placements))
    if shard_order is None:
        return spec
    return encode_order(spec, {e.tensor_dim: list(e.mesh_dims) for e in shard_order}, mesh_shape)

"""PyTorch DTensor's own figures, computed in-process under a fake process group.

Used by test_dtensor_crosscheck.py to check autoshard's `--comm-model dtensor` against
torch 2.13's ``torch.distributed.tensor._collective_utils.redistribute_cost``.  Nothing here
runs at import time; ``fake_world`` initialises the fake process group on first use.

GPU topologies: DTensor's MeshTopoInfo asks ``_mesh_resources.num_devices_per_host`` for the
devices per host, which is ``torch.cpu.device_count()`` = 1 on a CPU mesh (every mesh dim
would be inter-host).  ``topo_for`` therefore runs torch's own ``MeshTopoInfo.build_from_mesh``
with that one query answered by the GPUs per node of the case, and ``redistribute_cost`` is
called with ``MeshTopoInfo.build_from_mesh`` returning that hand-built topology.
"""
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence
from unittest import mock

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor import _collective_utils as cu
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

from autoshard import placements as autoshard_placements

#: Torch dtypes of the dtype names the autoshard CLI accepts.
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64}

#: Largest world the fake process group is created with (the biggest random mesh must fit).
WORLD = 512


@dataclass(frozen=True)
class Case:
    """One redistribution: a mesh (with GPUs per node), a tensor and two placement strings."""

    mesh: tuple[int, ...]
    gpus_per_node: int
    shape: tuple[int, ...]
    dtype: str
    src: str
    dst: str

    def to_json(self) -> dict:
        return {"mesh": list(self.mesh), "gpus_per_node": self.gpus_per_node,
                "shape": list(self.shape), "dtype": self.dtype, "from": self.src, "to": self.dst}


def fake_world() -> None:
    """Initialises a fake process group of WORLD ranks (rank 0) once per process."""
    if dist.is_initialized():
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)


_MESHES: dict[tuple[int, ...], DeviceMesh] = {}


def device_mesh(shape: Sequence[int]) -> DeviceMesh:
    """A CPU DeviceMesh of the first prod(shape) fake ranks (cached per shape)."""
    key = tuple(shape)
    if key not in _MESHES:
        fake_world()
        n = 1
        for s in key:
            n *= s
        _MESHES[key] = DeviceMesh("cpu", torch.arange(n).reshape(key))
    return _MESHES[key]


def parse_placements(s: str) -> list:
    """'S(0)RP(sum)' -> [Shard(0), Replicate(), Partial('sum')] (autoshard's short strings)."""
    return list(autoshard_placements.to_dtensor(s))


def spec(mesh: DeviceMesh, placements: str, shape: Sequence[int], dtype: torch.dtype) -> DTensorSpec:
    """A DTensorSpec with contiguous strides.  Strided shards ("_S(0,8)S(0)") become torch's
    explicit spelling, Shard placements plus a shard_order: torch 2.13's redistribute_cost
    returns inf for the _StridedShard spelling (a temporary fix in _collective_utils.py while
    such specs carry no shard_order) and plans both spellings alike (_redistribute.py
    normalizes _StridedShard into a shard_order)."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    meta = TensorMeta(torch.Size(shape), tuple(reversed(strides)), dtype)
    if "_S(" not in placements:
        return DTensorSpec(mesh, tuple(parse_placements(placements)), tensor_meta=meta)
    plain, order = autoshard_placements.to_shard_order(placements, tuple(mesh.shape))
    return DTensorSpec(mesh, plain, tensor_meta=meta, shard_order=order)


def fresh_planner() -> None:
    """Forgets torch's cached transform lists and planners: a cached planner remembers the
    reduce ops of earlier redistributions on the same mesh and tensor meta (R -> P moves of its
    graph search), which would make a price depend on the cases before it."""
    from torch.distributed.tensor import _redistribute as rd

    rd._gen_transform_infos.cache_clear()
    rd.clear_redistribute_planner_cache()


def topo_for(mesh: DeviceMesh, gpus_per_node: int) -> cu.MeshTopoInfo:
    """torch's MeshTopoInfo for `mesh` as if each host had `gpus_per_node` GPUs."""
    from torch.distributed.device_mesh import _mesh_resources

    build = cu.MeshTopoInfo.build_from_mesh.__wrapped__  # skip the lru_cache
    with mock.patch.object(type(_mesh_resources), "num_devices_per_host",
                           lambda self, device_type: gpus_per_node):
        return build(mesh)


@contextmanager
def topology(topo: cu.MeshTopoInfo) -> Iterator[None]:
    """Makes redistribute_cost see `topo` for every mesh."""
    with mock.patch.object(cu.MeshTopoInfo, "build_from_mesh", lambda mesh: topo):
        yield


def torch_cost(case: Case) -> float:
    """DTensor's redistribute_cost (us) of `case`; inf when impossible."""
    mesh = device_mesh(case.mesh)
    dtype = DTYPES[case.dtype]
    fresh_planner()
    with topology(topo_for(mesh, case.gpus_per_node)):
        try:
            return float(cu.redistribute_cost(spec(mesh, case.src, case.shape, dtype),
                                              spec(mesh, case.dst, case.shape, dtype)))
        except AssertionError as e:
            # The graph planner finds no path (e.g. to P(sum)P(max): it never mixes reduce ops
            # other than sum and avg); autoshard says impossible.
            if "No path found" not in str(e):
                raise
            return math.inf


def _placement(rng: random.Random, rank: int) -> str:
    r = rng.random()
    if r < 0.3:
        return "R"
    if r < 0.8:
        return f"S({rng.randrange(rank)})"
    if r < 0.95:
        return "P(sum)"
    return rng.choice(["P(avg)", "P(max)"])


def random_cases(n: int, seed: int = 20261201) -> list[Case]:
    """`n` deterministic random cases: meshes of 1-3 dims (sizes 1, 2, 3, 4, 8), tensors of rank
    1-4, four dtypes, any source and target placements (including impossible transitions)."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        nd = rng.choice([1, 2, 2, 3, 3])
        mesh = tuple(rng.choice([1, 2, 2, 3, 4, 8]) for _ in range(nd))
        rank = rng.randint(1, 4)
        shape = tuple(rng.choice([1, 3, 8, 64, 1000, 4096]) for _ in range(rank))
        src = "".join(_placement(rng, rank) for _ in range(nd))
        dst = "".join(_placement(rng, rank) for _ in range(nd))
        cases.append(Case(mesh, rng.choice([1, 2, 4, 8]), shape, rng.choice(list(DTYPES)), src, dst))
    return cases


def _ordered_spec(rng: random.Random, mesh: tuple[int, ...], rank: int) -> str:
    """Placements that often cut one tensor dim on several mesh dims, in a random shard order
    (written with strided shards)."""
    items = []
    for _ in mesh:
        r = rng.random()
        items.append("R" if r < 0.15 else f"S({rng.randrange(min(rank, 2))})" if r < 0.85
                     else rng.choice(["P(sum)", "P(sum)", "P(avg)", "P(max)"]))
    plain = "".join(items)
    order = autoshard_placements.decode_order(plain, mesh)
    for cuts in order.values():
        rng.shuffle(cuts)
        if cuts == sorted(cuts) and rng.random() < 0.7:  # favour non-default orders
            cuts.reverse()
    return autoshard_placements.encode_order(plain, order, mesh)


def random_ordered_cases(n: int, seed: int = 20261205) -> list[Case]:
    """`n` deterministic random cases with shard orders: meshes of 1-3 dims (sizes 1, 2, 3, 4,
    8; a 1-D mesh has no order, so those cases are plain), uneven tensors of rank 1-3, source
    and target each in a random order (so ordered -> ordered, ordered -> default and default ->
    ordered all occur)."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        nd = rng.choice([1, 2, 2, 3, 3, 3])
        mesh = tuple(rng.choice([1, 2, 2, 3, 4, 8]) for _ in range(nd))
        rank = rng.randint(1, 3)
        shape = tuple(rng.choice([1, 5, 24, 97, 1000, 4099]) for _ in range(rank))
        src = _ordered_spec(rng, mesh, rank)
        dst = _ordered_spec(rng, mesh, rank)
        cases.append(Case(mesh, rng.choice([1, 2, 4, 8]), shape, rng.choice(list(DTYPES)), src, dst))
    return cases


def autoshard_costs(binary: str, cases: Sequence[Case], comm_model: str = "dtensor") -> list[Optional[float]]:
    """`autoshard cost --cases FILE --comm-model dtensor`: one process for every case; None
    where autoshard says impossible."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.json")
        with open(path, "w") as f:
            json.dump([c.to_json() for c in cases], f)
        out = subprocess.run([binary, "cost", "--cases", path, "--comm-model", comm_model],
                             check=True, capture_output=True, text=True, timeout=120).stdout
    return [r["time_us"] for r in json.loads(out)]


def autoshard_binary() -> Optional[str]:
    """The CLI under test: $AUTOSHARD_BIN (CTest sets it), else build/autoshard; None if absent."""
    path = os.environ.get("AUTOSHARD_BIN")
    if not path:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.path.join(root, "build", "autoshard")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None

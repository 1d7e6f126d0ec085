"""Collectives in flight: the invariants every lowered graph keeps, and gloo's limit.

    problems = check_in_flight(gm.graph)              # [] on every graph the runtime runs
    moved = limit_in_flight(gm.graph, limit=1)        # waits moved earlier; then gm.recompile()
    limit = in_flight_limit(mesh)                     # 1 on gloo (CPU), None elsewhere
    enforce_in_flight(gm, limit)                      # on gloo: gathers as sums, the limit, checks

A functional collective (`_c10d_functional.all_gather_into_tensor`, ...) returns at once; the
process group's own thread reads its input and writes its output until the matching
`wait_tensor` returns.  Between issue and wait nothing may mutate or free what the collective
reads or writes, and every collective must be waited in the graph that issued it (a tensor
that leaves a graph unwaited is read by code that does not know it is still being written).
`check_in_flight` states those rules on a graph; the runtime checks every graph it builds.

Why gathers as sums, and a limit, on gloo.  torch 2.13's ProcessGroupGloo runs the functional
all-gather (`_allgather_base`) as `allgather_into_tensor_coalesced` -> `allgather_coalesced`
(AsyncAllgatherCoalescedWork, which copies the flat result into the output chunks from the
worker thread).  With all-gathers in flight the heap gets corrupted: a rank dies of SIGSEGV
inside glibc's malloc (`tcache_get`) on a gloo worker thread (core files of the train example
and of bench/gloo_inflight_repro.py, which shows it with torch alone: 16 all-gathers in flight
crash 5-8 runs of 10; the same gathers as all-reduces of zero-padded buffers, 0 of 10; torch's
own test of that path was disabled as flaky, pytorch issue 65231).  So on gloo the runtime
never uses that path: `gathers_as_sums` rewrites every all-gather as an all-reduce of a buffer
holding this rank's shard at its rows and zeros elsewhere (the same values: x + 0 is exact; twice
the bytes, on a CPU test backend).  It also keeps at most `limit` collectives pending per process
(a wait moves up to just before the next collective's issue), which alone made the crash rare
but not impossible (docs/benchmarks.md "Crashes").  Overlap with computation stays (the one
pending collective runs while the rank computes); NCCL has neither.  Compiled graphs keep the
graph's order (`compile_in_order`): inductor would otherwise issue each collective just before
its reader and wait at once; on gloo its code also keeps the one-in-flight limit.
"""
from __future__ import annotations

import heapq
import re
from typing import Callable, Optional

import torch
import torch.fx

from .lower import GATHER_AS_SUM, collective_kind


def is_wait(node: torch.fx.Node) -> bool:
    """Whether `node` is a `_c10d_functional.wait_tensor` call."""
    return node.op == "call_function" and getattr(node.target, "__name__", "").startswith(
        "wait_tensor")


def _mutated_args(node: torch.fx.Node) -> list:
    """The FX nodes an op writes in place (its schema's mutable arguments)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.is_mutable:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        out.extend(v for v in values if isinstance(v, torch.fx.Node))
    return out


def _group(node: torch.fx.Node) -> str:
    """The process group name a collective runs on (its last string argument)."""
    names = [a for a in node.args if isinstance(a, str)]
    return names[-1] if names else ""


def check_in_flight(graph: torch.fx.Graph, limit: Optional[int] = None) -> list:
    """Problems with the graph's collectives, as one-line strings ([] when none):

    * a collective whose result is read by anything but its one wait, or never waited;
    * an op between a collective's issue and its wait that writes the collective's input;
    * more than `limit` collectives pending at once (when a limit is given).
    """
    problems: list = []
    pending: dict = {}  # collective node -> its input nodes
    for node in graph.nodes:
        for written in _mutated_args(node):
            for coll, inputs in pending.items():
                if written in inputs:
                    problems.append(f"node {node.name}: writes {written.name} while "
                                    f"{coll.name} still reads it")
        if is_wait(node):
            src = node.args[0] if node.args else None
            pending.pop(src, None)
            continue
        if collective_kind(node) is None:
            continue
        users = list(node.users)
        waits = [u for u in users if is_wait(u)]
        if len(waits) != 1 or len(users) != 1:
            problems.append(f"node {node.name}: a collective needs exactly one reader, its "
                            f"wait_tensor (readers: {', '.join(u.name for u in users) or 'none'})")
        pending[node] = set(node.all_input_nodes)
        if limit is not None and len(pending) > limit:
            problems.append(f"node {node.name}: {len(pending)} collectives in flight "
                            f"(limit {limit})")
    for coll in pending:
        problems.append(f"node {coll.name}: never waited in this graph")
    return problems


def limit_in_flight(graph: torch.fx.Graph, limit: int = 1) -> int:
    """Moves waits earlier so that at most `limit` collectives are pending at any point (the
    oldest one's wait goes just before the issue that would exceed the limit).  Every rank
    applies the same moves to the same graph, so collectives stay matched.  Returns the number
    of waits moved."""
    if limit < 1:
        raise ValueError(f"limit_in_flight: limit must be >= 1, got {limit}")
    pending: list = []  # collective nodes in issue order
    moved = 0
    for node in list(graph.nodes):
        if is_wait(node):
            src = node.args[0] if node.args else None
            if src in pending:
                pending.remove(src)
            continue
        if collective_kind(node) is None:
            continue
        while len(pending) >= limit:
            oldest = pending.pop(0)
            wait = next((u for u in oldest.users if is_wait(u)), None)
            if wait is None:
                break
            if wait.prev is not node.prev or wait.next is not node:
                node.prepend(wait)
                moved += 1
        pending.append(node)
    return moved


def in_flight_limit(mesh) -> Optional[int]:
    """How many collectives a rank may keep pending on this mesh's process groups: 1 where
    any of them is gloo (see the module docstring), else None (no limit)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    for dim in range(mesh.ndim):
        group = mesh.get_group(dim)
        try:
            backend = str(dist.get_backend(group)).lower()
        except (RuntimeError, ValueError):
            continue
        if "gloo" in backend:
            return 1
    return None


def gather_buffer(x: torch.Tensor, group_size: int, index: int) -> torch.Tensor:
    """A zeroed buffer of an all-gather's output shape with `x` at rows `index` of
    `group_size` equal blocks: summed over the group it is the all-gather of `x`."""
    rows = x.shape[0]
    out = x.new_zeros((group_size * rows, *x.shape[1:]))
    out[index * rows:(index + 1) * rows] = x
    return out


def group_rank(group_name: str) -> int:
    """This process's rank within the process group named `group_name`."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name).rank()


def gathers_as_sums(graph: torch.fx.Graph,
                    rank_in: Callable[[str], int] = group_rank) -> int:
    """Rewrites every `all_gather_into_tensor(x, n, group)` as an all-reduce (sum) of
    `gather_buffer(x, n, rank)`: the same values (x plus zeros, exact), through gloo's
    all-reduce instead of its all-gather, whose coalesced work corrupts the heap (module
    docstring).  The all-reduce keeps the gather's meta and is flagged GATHER_AS_SUM, so
    collective_kind still calls it an all-gather.  `rank_in(group_name)`: this process's
    rank in that group.  Returns the number of gathers rewritten."""
    target = torch.ops._c10d_functional.all_gather_into_tensor.default
    rewritten = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not target:
            continue
        x, size, group = node.args[:3]
        with graph.inserting_before(node):
            buf = graph.call_function(gather_buffer, (x, size, rank_in(group)))
            summed = graph.call_function(torch.ops._c10d_functional.all_reduce.default,
                                         (buf, "sum", group))
        buf.meta = {k: v for k, v in node.meta.items() if k != "val"}
        summed.meta = {**node.meta, GATHER_AS_SUM: True}
        node.replace_all_uses_with(summed)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def enforce_in_flight(gm: torch.fx.GraphModule, limit: Optional[int],
                      rank_in: Callable[[str], int] = group_rank) -> int:
    """Makes a graph module the runtime will run safe for its backend and checks the
    invariants; raises AssertionError naming the first problem.  `limit` is
    in_flight_limit's (not None: a gloo mesh): the graph then keeps at most `limit`
    collectives pending and does its all-gathers as sums (gathers_as_sums, `rank_in`).
    Recompiles `gm` when it changed; returns the number of waits moved."""
    moved = 0
    if limit is not None:
        changed = gathers_as_sums(gm.graph, rank_in)
        moved = limit_in_flight(gm.graph, limit)
        if changed or moved:
            gm.recompile()
    problems = check_in_flight(gm.graph, limit)
    if problems:
        raise AssertionError(f"lowered graph breaks an in-flight rule: {problems[0]} "
                             f"({len(problems)} problem(s))")
    return moved


def issue_wait_gaps(graph: torch.fx.Graph) -> dict:
    """Per collective kind ('all_gather', ...), the number of compute ops (ATen ops that are
    neither collectives nor waits) each collective has between its issue and its wait, in
    graph order: 0 is a collective the rank waits for at once (fully exposed)."""
    nodes = list(graph.nodes)
    pos = {n: k for k, n in enumerate(nodes)}
    compute_before = [0]
    for n in nodes:
        compute = (n.op == "call_function" and collective_kind(n) is None and not is_wait(n)
                   and getattr(n.target, "namespace", "") == "aten")
        compute_before.append(compute_before[-1] + compute)
    gaps: dict = {}
    for n in nodes:
        kind = collective_kind(n)
        wait = next((u for u in n.users if is_wait(u)), None) if kind else None
        if wait is not None:
            gaps.setdefault(kind, []).append(compute_before[pos[wait]] - compute_before[pos[n] + 1])
    return gaps


def collective_order(graph: torch.fx.Graph) -> list:
    """The graph's collectives and waits in order: "issue <op>" for each collective (its
    `_c10d_functional` op name) and "wait <k>" for the wait of the k-th one issued; what
    `compiled_collective_order` reads from inductor's code, to compare the two."""
    issued: dict = {}
    out: list = []
    for n in graph.nodes:
        if n.op != "call_function" or getattr(n.target, "namespace", "") != "_c10d_functional":
            continue
        if is_wait(n):
            out.append(f"wait {issued[n.args[0]]}")
        else:
            issued[n] = len(issued)
            out.append(f"issue {n.target._opname}")
    return out


_CODE_CALL = re.compile(r"(?:(\w+) = )?torch\.ops\._c10d_functional\.(\w+)\.default\((\w+)")


def compiled_collective_order(code: str) -> list:
    """`collective_order` of the Python code inductor generated for a graph (as
    `torch._inductor.utils.run_and_get_code` returns it)."""
    issued: dict = {}  # buffer name -> its collective's issue index
    out: list = []
    count = 0
    for line in code.splitlines():
        m = _CODE_CALL.search(line)
        if m is None:
            continue
        result, op, first = m.groups()
        if op == "wait_tensor":
            out.append(f"wait {issued[first]}")
            continue
        # an in-place op (all_reduce_) is waited on its argument
        for name in ({result, first} - {None}) if op.endswith("_") else {result or first}:
            issued[name] = count
        count += 1
        out.append(f"issue {op.rstrip('_')}")
    return out


def _buffer_names(snode, attr: str) -> set:
    try:
        return set(getattr(snode, attr)())
    except (AttributeError, TypeError):
        return set()


def _collectives_and_waits(nodes: list) -> tuple[dict, dict]:
    """(collective scheduler node -> its wait nodes, wait node -> its collective)."""
    from torch._inductor.utils import is_collective
    from torch._inductor.utils import is_wait as inductor_is_wait

    waits_of: dict = {}
    collective_of: dict = {}
    owner: dict = {}     # buffer name -> collective scheduler node that writes it
    for snode in nodes:
        if is_collective(getattr(snode, "node", None)):
            for b in _buffer_names(snode, "get_buffer_names") | _buffer_names(snode,
                                                                              "get_output_names"):
                owner[b] = snode
        elif inductor_is_wait(getattr(snode, "node", None)):
            for b in _buffer_names(snode, "used_buffer_names"):
                if b in owner:
                    waits_of.setdefault(owner[b], []).append(snode)
                    collective_of[snode] = owner[b]
                    break
    return waits_of, collective_of


def _fx_position(snode, index: dict) -> Optional[int]:
    """The latest position, in the FX graph inductor compiles, of the nodes a scheduler node
    was made from (its members' origins: a fused kernel runs when its last op would)."""
    best = None
    for member in snode.get_nodes():
        for origin in getattr(getattr(member, "node", None), "origins", None) or ():
            if origin not in index:
                for i, n in enumerate(origin.graph.nodes):
                    index[n] = i
            i = index.get(origin)
            if i is not None and (best is None or i > best):
                best = i
    return best


def inductor_graph_order(nodes: list) -> list:
    """An inductor post-fusion pass: the scheduler's nodes in the order of the FX graph they
    come from, as far as their dependencies allow (a list schedule: of the nodes whose
    dependencies are placed, the one earliest in the graph goes next; ties keep inductor's
    order).  The lowered graph holds the plan's schedule in its order: a prefetched gather is
    issued a layer ahead and waited at its use, a gradient reduction issued as its gradient
    exists and waited at the backward's end (autoshard.schedule).  Inductor's scheduler
    instead issues an extern collective just before its first reader and waits on it at once,
    so the compiled step would overlap nothing; this pass gives the plan's order back."""
    index: dict = {}
    owner: dict = {}
    for k, snode in enumerate(nodes):
        for name in snode.get_operation_names():
            owner[name] = k
    deps = [{owner[a] for a in getattr(sn, "ancestors", ()) if a in owner} - {k}
            for k, sn in enumerate(nodes)]
    key = []
    for k, sn in enumerate(nodes):
        pos = _fx_position(sn, index)
        key.append(pos if pos is not None else max((key[d] for d in deps[k] if d < k),
                                                   default=0))
    users: dict = {}
    for k, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(k)
    missing = [len(ds) for ds in deps]
    ready = [(key[k], k) for k in range(len(nodes)) if missing[k] == 0]
    heapq.heapify(ready)
    out: list = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(nodes[k])
        for u in users.get(k, ()):
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (key[u], u))
    return out if len(out) == len(nodes) else nodes  # a cycle: not ours to fix


def inductor_one_in_flight(nodes: list) -> list:
    """An inductor post-fusion pass (`torch._inductor.config._post_fusion_custom_pass`): the
    scheduler's node order with each collective's wait moved up to just before the next
    collective, so that the compiled code keeps one collective in flight as the eager graph
    does on gloo.  Moving a wait earlier is always valid: it depends on its collective alone."""
    from torch._inductor.utils import is_collective

    waits_of, _ = _collectives_and_waits(nodes)
    out: list = []
    placed: set = set()
    pending: list = []
    for snode in nodes:
        if snode in placed:
            continue
        if is_collective(getattr(snode, "node", None)):
            for prev in pending:
                for w in waits_of.get(prev, []):
                    if w not in placed:
                        out.append(w)
                        placed.add(w)
            pending = [snode]
        out.append(snode)
        placed.add(snode)
    return out


def _planned_order(limit: Optional[int]) -> Callable[[list], list]:
    if limit is None:
        return inductor_graph_order

    def limited(nodes: list) -> list:
        return inductor_one_in_flight(inductor_graph_order(nodes))

    return limited


def inductor_options(limit: Optional[int]) -> dict:
    """Inductor settings under which a lowered graph compiles in its own order (see
    `compile_in_order`): the post-fusion pass `inductor_graph_order` (then, with `limit`,
    `inductor_one_in_flight`, after any pass the user set), and inductor's two reorderings
    that would move the plan's collectives off it turned off: the peak-memory pass issues a
    collective just before its reader (the plan's prefetch is already counted in its memory)
    and the locality pass pulls a wait up to its collective."""
    import torch._inductor.config as inductor_config

    user = inductor_config._post_fusion_custom_pass
    ours = _planned_order(limit)

    def post_fusion(nodes: list) -> list:
        return ours(user(nodes) if user is not None else nodes)

    return {"_post_fusion_custom_pass": post_fusion, "reorder_for_peak_memory": False,
            "reorder_for_locality": False}


def compile_in_order(gm: torch.fx.GraphModule, limit: Optional[int], *args,
                     **kwargs) -> Callable:
    """`torch.compile(gm, *args, **kwargs)` whose inductor code keeps the graph's order of
    collectives, waits and compute, i.e. the plan's schedule (`inductor_graph_order`; with
    `limit`, one collective in flight as on gloo).  The settings apply only while this
    graph compiles and runs, not to the rest of the process."""
    import torch._inductor.config as inductor_config

    compiled = torch.compile(gm, *args, **kwargs)
    options = inductor_options(limit)

    def run(*flat):
        with inductor_config.patch(options):
            return compiled(*flat)

    return run

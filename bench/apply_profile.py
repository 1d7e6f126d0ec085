#!/usr/bin/env python3
"""Where a rank's lowered step spends its time against eager, kind by kind of op.

    PYTHONPATH=python build/venv/bin/python bench/apply_profile.py --cli build/autoshard \
        --mesh 2x2 --dims dp,tp --algo fsdp+tp [--ceiling] [--top 12] [--detail 40]

Same model, plan and gloo mesh as bench/apply_bench.py (its _plan and _model).  Every rank (all
`world` processes at once, as in apply_bench) holds three steps and runs them in turn, each after
a barrier, `--reps` times, so that load from elsewhere falls on all of them alike:

* eager: the traced joint step (forward, loss, backward: the ATen graph the plan was made from)
  on the rank's share of the batch (global batch / ranks) with real weights -- the ops an eager
  step runs, with no communication (the nn.Module step's wall time is printed beside it);
* lowered: the applied plan's forward and backward graphs (autoshard.lower, partition);
* ceiling (--ceiling): the same graphs with every collective replaced by a local op of its
  shape (apply_bench._local_collectives).

Each is run plain (wall time) and interpreted node by node (torch.fx.Interpreter, wall time per
node); per node the minimum over the repetitions is kept (other load only adds time).  Every
lowered node is stamped with the planned node it came from and its slot
(node.meta["autoshard"]["edge"]: "<node>:op" for the op itself, "<node>:<k>" / ":output" /
"grad:<param>" for a redistribution), so the table charges each op's local compute to the kind
of that planned node (matmul, attention, elementwise, copies, views: the kind of the eager node
with the same name) and what the lowering adds to rows of its own: the redistributions' local
ops (gather buffers of gloo's gathers as sums; the splits, stacks, cats and copies around a
collective), bucket copy-in/out, the parameters' views, collective issues and waits (or their
local stand-ins).  `--top` lists the planned nodes whose local compute exceeds eager's most;
`--detail` the ops that fill each row.  The interpreter adds its own per-node cost (a few
microseconds in every node's time), so interpreted steps are slower than plain ones; the split
between kinds is what this is for.  Rank 0's figures are printed (the ranks are symmetric).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import apply_bench as AB  # noqa: E402

VIEWS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "slice",
         "split", "getitem", "unsqueeze", "squeeze", "alias", "select", "detach", "as_strided",
         "split_with_sizes", "chunk", "unbind"}
COPIES = {"cat", "clone", "_to_copy", "copy_", "contiguous", "constant_pad_nd", "new_zeros",
          "zeros", "full", "empty", "copy", "stack", "repeat"}
MATMULS = {"mm", "bmm", "addmm", "matmul", "baddbmm"}
#: rows of what the lowering adds, in print order after the planned ops' kinds
ADDED = ["parameter views", "redistribution: gather buffers (gathers as sums)",
         "redistribution: other local ops", "bucket copy-in/out", "collective stand-ins",
         "collective issue", "wait"]
OP_KINDS = ["matmul", "attention", "elementwise", "copy", "view"]


def _op_name(node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def op_kind(node) -> str:
    """The kind of a compute node, by its ATen op's name."""
    name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
    if name in MATMULS:
        return "matmul"
    if "attention" in name or "sdpa" in name:
        return "attention"
    if name in VIEWS:
        return "view"
    if name in COPIES:
        return "copy"
    return "elementwise"


def lowered_row(node) -> tuple:
    """(row, planned node or None) of a lowered (or ceiling) node: what the lowering added
    goes to its own row; an op's own compute to its planned node (its kind is eager's)."""
    from autoshard.inflight import is_wait
    from autoshard.lower import META_KEY, collective_kind

    if node.meta.get(AB.STAND_IN):
        return "collective stand-ins", None
    if collective_kind(node) is not None:
        return "collective issue", None
    if is_wait(node):
        return "wait", None
    fn = getattr(node.target, "__name__", "")
    if fn in ("bucket_flat", "bucket_piece"):
        return "bucket copy-in/out", None
    if fn == "gather_buffer":
        return "redistribution: gather buffers (gathers as sums)", None
    stamp = node.meta.get(META_KEY, {})
    edge = stamp.get("edge")
    if edge is None:
        return "parameter views", None
    if edge.endswith(":op"):
        return "op", stamp.get("node")
    return "redistribution: other local ops", None


def _timed(gm, record):
    """An interpreter of `gm` that calls record(node, seconds) per call_function node."""
    import torch.fx

    class Timed(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op != "call_function":
                return super().run_node(n)
            t0 = time.perf_counter()
            out = super().run_node(n)
            record(n, time.perf_counter() - t0)
            return out

    return Timed(gm).run


def _eager_graph(args):
    """The traced joint step on the rank's share of the batch with real weights ->
    (graph module, its flat arguments, the nn.Module step)."""
    import torch
    import torch.fx

    from autoshard.apply import trace_for_apply

    model, tokens, labels, loss_fn = AB._model(args, args.batch // args.world)
    traced = trace_for_apply(model, (tokens,), loss_fn, (labels,))
    gm = torch.fx.GraphModule(traced.gm, traced.gm.graph)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    inputs = iter([tokens, labels])
    flat = [params[n] if k == "parameter" else buffers[n] if k == "buffer" else next(inputs)
            for n, k in zip(traced.placeholder_names, traced.placeholder_kinds)]
    flat = [t.detach() for t in flat]

    def module_step() -> None:
        loss_fn(model(tokens), labels).backward()

    return gm, flat, module_step


def worker(rank: int, args, out_dir: str, placements: dict) -> None:
    """Eager, lowered and (with --ceiling) ceiling steps in turn, `--reps` times, each after a
    barrier: first plain (wall time), then interpreted (time per node); the minimum of each
    over the repetitions (other load only adds time)."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from autoshard.apply import apply_placement, trace_for_apply

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world)
    mesh = init_device_mesh("cpu", tuple(args.mesh_shape), mesh_dim_names=tuple(args.dim_names))
    model, tokens, labels, loss_fn = AB._model(args, args.batch)
    traced = trace_for_apply(model, (tokens,), loss_fn, (labels,))
    step = apply_placement(model, placements, mesh, traced=traced)
    del model
    local = step.shard_inputs(tokens, labels)
    holder = step.__dict__["_holder"]
    graphs = {"lowered": (step.split.forward, step.split.backward)}
    if args.ceiling:
        fwd, bwd = copy.deepcopy(step.split.forward), copy.deepcopy(step.split.backward)
        for g in (fwd, bwd):
            AB._local_collectives(g)
        graphs["ceiling"] = (fwd, bwd)
    e_gm, e_flat, module_step = _eager_graph(args)
    walls: dict = defaultdict(list)
    nodes: dict = {}  # phase -> node name -> [(row, planned, kind), best s]

    def timed_run(phase: str, fn) -> None:
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        walls[phase].append(time.perf_counter() - t0)

    def record_into(table: dict, describe):
        def record(n, s: float) -> None:
            if n.name in table:
                table[n.name][1] = min(table[n.name][1], s)
            else:
                table[n.name] = [describe(n), s]
        return record

    def eager_plain() -> None:
        with torch.no_grad():
            e_gm(*e_flat)

    def plan_step(phase: str, interpreted: bool):
        fwd, bwd = graphs[phase]
        if interpreted:
            table = nodes.setdefault(phase, {})
            rec = record_into(table, lambda n: (*lowered_row(n), op_kind(n), _op_name(n)))
            holder["forward"], holder["backward_graph"] = _timed(fwd, rec), _timed(bwd, rec)
        else:
            holder["forward"], holder["backward_graph"] = fwd, bwd
        return lambda: step(*local).backward()

    eager_table = nodes.setdefault("eager", {})
    eager_interp = _timed(e_gm, record_into(eager_table,
                                            lambda n: ("op", n.name, op_kind(n), _op_name(n))))
    for _ in range(2):  # warm
        eager_plain()
        module_step()
        for phase in graphs:
            plan_step(phase, False)()
    for _ in range(args.reps):
        timed_run("eager", eager_plain)
        timed_run("eager nn.Module", module_step)
        for phase in graphs:
            timed_run(phase, plan_step(phase, False))

        def interp() -> None:
            with torch.no_grad():
                eager_interp(*e_flat)
        timed_run("eager interpreted", interp)
        for phase in graphs:
            timed_run(f"{phase} interpreted", plan_step(phase, True))
    AB._write(out_dir, rank, {"walls": {k: min(v) for k, v in walls.items()}, "nodes": nodes})
    dist.destroy_process_group()


def _rows(table: dict, kind_of: dict) -> dict:
    """row -> [nodes, s] of one phase's node table: an op's local compute under the kind of
    its planned node (eager's kind of the node with that name), the rest under its row."""
    rows: dict = defaultdict(lambda: [0, 0.0])
    for (row, planned, kind, _), s in table.values():
        key = kind_of.get(planned, kind) if row == "op" else row
        rows[key][0] += 1
        rows[key][1] += s
    return rows


def _table(args, res: dict) -> None:
    """Prints rank 0's time per kind: eager's planned ops, each phase's same ops locally,
    then what each phase adds; then the steps' wall times, not interpreted."""
    nodes, walls = res["nodes"], res["walls"]
    kind_of = {name: kind for name, ((_, _, kind, _), _) in nodes["eager"].items()}
    phases = [p for p in ("lowered", "ceiling") if p in nodes]
    e_rows = _rows(nodes["eager"], kind_of)
    p_rows = [_rows(nodes[p], kind_of) for p in phases]
    e_total = sum(s for _, s in e_rows.values())
    head = " | ".join(f"{p} nodes | {p} s | vs eager" for p in phases)
    print(f"| kind (rank 0, interpreted) | eager nodes | eager s | {head} |")
    print("|---|---|---|" + "---|---|---|" * len(phases))
    for kind in [*OP_KINDS, *ADDED, "total"]:
        if kind == "total":
            e_n, e_s = sum(c for c, _ in e_rows.values()), e_total
            cs = [(sum(c for c, _ in r.values()), sum(s for _, s in r.values())) for r in p_rows]
        else:
            e_n, e_s = e_rows.get(kind, (0, 0.0))
            cs = [tuple(r[kind]) if kind in r else (0, 0.0) for r in p_rows]
            if kind in ADDED and not any(c for c, _ in cs):
                continue
        cells = " | ".join(f"{c} | {s:.3f} | " + (f"{s / e_s:.2f}x" if e_s else
                                                  f"+{s / e_total:.1%} of eager")
                           for c, s in cs)
        label = f"planned {kind}" if kind in OP_KINDS else kind
        print(f"| {label} | {e_n or ''} | {e_s:.3f} | {cells} |")
    print(f"\nSteps, not interpreted (rank 0, min of {args.reps}, s): eager traced graph "
          f"{walls['eager']:.3f}, eager nn.Module {walls['eager nn.Module']:.3f}; "
          + "; ".join(f"{p} {walls[p]:.3f} ({walls[p] / walls['eager nn.Module']:.2f}x the "
                      f"nn.Module)" for p in phases) + ".")
    if args.top:
        local: dict = defaultdict(float)
        for (row, planned, _, _), s in nodes["lowered"].values():
            if row == "op":
                local[planned] += s
        print("\nPlanned nodes whose local compute (lowered) exceeds eager's most (rank 0):\n")
        print("| node | kind | eager ms | local ms | excess ms |")
        print("|---|---|---|---|---|")
        eager_s = {n: s for n, (_, s) in nodes["eager"].items()}
        excess = sorted(((s - eager_s.get(n, 0.0), n, s) for n, s in local.items()),
                        reverse=True)
        for ex, n, s in excess[:args.top]:
            print(f"| {n} | {kind_of.get(n, '?')} | {1e3 * eager_s.get(n, 0.0):.2f} | "
                  f"{1e3 * s:.2f} | {1e3 * ex:+.2f} |")


def _detail(res: dict, phase: str, top: int) -> None:
    """The `top` (row, op) pairs of one phase by time: which ops fill each row."""
    by: dict = defaultdict(lambda: [0, 0.0])
    for (row, planned, kind, name), s in res["nodes"][phase].values():
        key = (f"{row} ({kind})" if row == "op" else row, name)
        by[key][0] += 1
        by[key][1] += s
    print(f"\nOps of the {phase} step by row (rank 0, top {top}):\n")
    print("| row | op | nodes | s |")
    print("|---|---|---|---|")
    for (row, name), (c, s) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {row} | {name} | {c} | {s:.3f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--mesh", default="2x2")
    ap.add_argument("--dims", default="dp,tp")
    ap.add_argument("--algo", default="fsdp+tp")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--recompute", default="none")
    ap.add_argument("--prefetch-layers", type=int, default=1)
    ap.add_argument("--bucket", default="layer")
    ap.add_argument("--ceiling", action="store_true", help="also the ceiling's graphs")
    ap.add_argument("--detail", type=int, default=0,
                    help="list the N (row, op) pairs of the eager and lowered steps by time")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each phase")
    ap.add_argument("--top", type=int, default=0, help="list the N planned nodes whose local "
                    "compute exceeds eager's most")
    args = ap.parse_args()
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(64 * 1024)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    AB.set_mesh_args(args)
    placements, _ = AB._plan(args)
    res = AB._phase(worker, args, (placements,))[0]
    print(f"# {args.algo} on {args.mesh} ({args.dims}), llama {args.layers} layers seq "
          f"{args.seq}, global batch {args.batch}; eager: the traced step on batch "
          f"{args.batch // args.world}; {args.world} processes, each running every phase in "
          f"turn; rank 0, per node the minimum of {args.reps} interpreted steps\n")
    _table(args, res)
    if args.detail:
        for phase in ("eager", "lowered"):
            _detail(res, phase, args.detail)
    return 0


if __name__ == "__main__":
    sys.exit(main())

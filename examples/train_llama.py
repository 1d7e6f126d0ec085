"""Train a small LLaMA with an autoshard plan: plan, apply, train, and check the plan's promises.

    torchrun --nproc-per-node 4 examples/train_llama.py --mesh 2x2 --mesh-dims dp,tp

One process per device (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK): NCCL on GPUs (device
cuda:LOCAL_RANK), gloo on CPUs otherwise.  The script

1. builds a LLaMA-style decoder (autoshard.tracer.examples.llama) with a byte vocabulary (256:
   the tokens are the bytes of a text file, examples/data/tiny.txt by default), the same
   initial weights on every rank (one seed);
2. traces one training step (forward, cross entropy, backward) and plans it with the autoshard
   CLI on rank 0 (`autoshard plan --graph ... -o DIR`); the other ranks wait and read
   DIR/placements.json; DIR/plan.json gives the planner's predicted step time and peak memory
   per device;
3. applies the plan (autoshard.apply.apply_placement): parameters become DTensors at their
   planned placements and one call of the returned module runs the lowered per-rank step;
4. trains with AdamW on batches drawn with one seeded generator: every rank draws the same
   window starts and reads only its own part of each batch (the planned module takes local
   shards; `input_slices()` says which), as a DistributedSampler loader would;
5. prints, on rank 0, the loss and time of every step; then the first and last loss, the mean
   step time, the peak memory per device against the plan's prediction, and the collective
   audit of the first step (issued by the step vs charged by the planner).

The binary: $AUTOSHARD_BIN, else `autoshard` on PATH, else build/autoshard in this repository.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn, Optional, Sequence

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "examples" / "data" / "tiny.txt"
VOCAB = 256  # byte-level tokens

try:
    import autoshard  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH: use the repository's package
    sys.path.insert(0, str(REPO / "python"))

from autoshard.apply import apply_placement, trace_for_apply  # noqa: E402
from autoshard.audit import CommAudit, planned_collectives  # noqa: E402
from autoshard.tracer.examples.llama import (  # noqa: E402
    LlamaConfig, Transformer, cross_entropy_loss)
from autoshard.tracer.export import to_graph_dict  # noqa: E402

#: The default hardware description for the planner.  At this example's sizes (a few hundred
#: thousand parameters, batches of a few thousand tokens) a real accelerator preset such as h100
#: makes the optimum "replicate everything": every op takes microseconds, so any collective costs
#: more than the compute it would split.  This toy device computes slowly and has links without
#: latency, so splitting work always pays and the plan really shards weights and activations --
#: which is what the example is meant to exercise.  Its predicted step time is that of the toy
#: device, not of this machine.  Pass --hardware h100 (or a JSON file) for a real device.
SLOW_DEVICE = {"base": "h100", "name": "slow-compute", "peak_fp32_tflops": 1e-6,
               "peak_bf16_tflops": 1e-6, "hbm_gbps": 1e-3, "launch_floor_us": 0,
               "base_latency_us": 0, "intra_latency_us": 0, "inter_latency_us": 0}

MiB = 2.0 ** 20


class UsageError(Exception):
    """A bad argument or environment: reported as one line, exit status 2."""


def fail(msg: str, status: int = 2) -> NoReturn:
    """Prints `train_llama.py: error: msg` (on rank 0 only when distributed) and exits."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{Path(sys.argv[0]).name}: error: {msg}", file=sys.stderr, flush=True)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(status)


# --- arguments ---------------------------------------------------------------------------------
def default_ffn(dim: int) -> int:
    """LLaMA's feed-forward width: 8/3 of the model width, rounded up to a multiple of 32."""
    return int(math.ceil(8 * dim / 3 / 32) * 32)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Command-line options (sizes, training, planning, output)."""
    p = argparse.ArgumentParser(
        description="Plan a small byte-level LLaMA with autoshard, apply the plan and train it "
                    "(launch with torchrun; NCCL on GPUs, gloo on CPUs).")
    g = p.add_argument_group("mesh")
    g.add_argument("--mesh", default="2x2", help="device mesh shape, e.g. 2x2 or 4 (its product "
                   "must equal the number of processes; default 2x2)")
    g.add_argument("--mesh-dims", default="dp,tp", help="mesh dim names (default dp,tp)")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda:LOCAL_RANK with NCCL when CUDA is available, else CPU/gloo")
    g = p.add_argument_group("model")
    g.add_argument("--dim", type=int, default=64, help="model width (default 64)")
    g.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    g.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    g.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    g.add_argument("--ffn", type=int, default=None,
                   help="feed-forward width (default 8/3 dim, rounded up to 32)")
    g = p.add_argument_group("training")
    g.add_argument("--data", default=str(DEFAULT_DATA),
                   help="text file; its bytes are the tokens (default examples/data/tiny.txt)")
    g.add_argument("--seq", type=int, default=64, help="tokens per sequence (default 64)")
    g.add_argument("--batch", type=int, default=8, help="global batch size (default 8)")
    g.add_argument("--steps", type=int, default=50, help="training steps (default 50)")
    g.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default 3e-3)")
    g.add_argument("--seed", type=int, default=0, help="seed of weights and batches (default 0)")
    g.add_argument("--compile", action="store_true",
                   help="run the lowered step with torch.compile (step.compile())")
    g.add_argument("--checkpoint", metavar="DIR", default=None,
                   help="save a sharded checkpoint (autoshard.checkpoint) to DIR/step<N> "
                        "at the end")
    g = p.add_argument_group("planning")
    g.add_argument("--hardware", default=None,
                   help="planner hardware: a preset (h100, a100, ...) or a JSON file (default: a "
                        "slow toy device, so that the tiny model's plan shards; see SLOW_DEVICE)")
    g.add_argument("--comm-model", choices=("dtensor", "nccl"), default="dtensor",
                   help="planner's communication model (default dtensor: the collectives DTensor "
                        "issues, so the audit can match them exactly)")
    g.add_argument("--algo", default="alpa",
                   help="planner algorithm or recipe: alpa (the optimum), ddp, fsdp, megatron, "
                        "fsdp+tp, hsdp (default alpa)")
    g.add_argument("--time-limit", type=float, default=60.0,
                   help="planner time limit in seconds (default 60)")
    g.add_argument("--plan-dir", default=None,
                   help="where rank 0 writes the graph and the plan (readable by every rank; "
                        "default: a fresh temporary directory, removed at the end)")
    a = p.parse_args(argv)
    if a.ffn is None:
        a.ffn = default_ffn(a.dim)
    return a


def parse_mesh(mesh: str, dims: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """'2x2', 'dp,tp' -> ((2, 2), ('dp', 'tp')); raises UsageError when malformed."""
    try:
        shape = tuple(int(x) for x in mesh.lower().split("x"))
    except ValueError:
        raise UsageError(f"--mesh {mesh!r}: expected sizes joined by 'x', e.g. 2x2") from None
    if not shape or any(s < 1 for s in shape):
        raise UsageError(f"--mesh {mesh!r}: every size must be a positive integer")
    names = tuple(x.strip() for x in dims.split(","))
    if len(names) != len(shape) or any(not n for n in names) or len(set(names)) != len(names):
        raise UsageError(f"--mesh-dims {dims!r}: need {len(shape)} distinct names for mesh {mesh}")
    return shape, names


def check_args(a: argparse.Namespace, world: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Validates the sizes against each other and the world size; returns the mesh."""
    shape, names = parse_mesh(a.mesh, a.mesh_dims)
    if math.prod(shape) != world:
        raise UsageError(f"--mesh {a.mesh} has {math.prod(shape)} devices but {world} processes "
                         f"were launched (torchrun --nproc-per-node {math.prod(shape)})")
    for flag in ("dim", "layers", "heads", "kv_heads", "ffn", "seq", "batch", "steps"):
        if getattr(a, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be at least 1")
    if a.dim % a.heads:
        raise UsageError(f"--dim {a.dim} is not a multiple of --heads {a.heads}")
    if (a.dim // a.heads) % 2:
        raise UsageError(f"head size {a.dim // a.heads} (--dim / --heads) must be even (rotary)")
    if a.heads % a.kv_heads:
        raise UsageError(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    if not a.lr > 0:
        raise UsageError(f"--lr {a.lr} must be positive")
    if a.time_limit <= 0:
        raise UsageError(f"--time-limit {a.time_limit} must be positive")
    if not Path(a.data).is_file():
        raise UsageError(f"--data {a.data}: no such file")
    if a.hardware and a.hardware.endswith(".json") and not Path(a.hardware).is_file():
        raise UsageError(f"--hardware {a.hardware}: no such file")
    return shape, names


def find_binary() -> str:
    """The autoshard CLI: $AUTOSHARD_BIN, else `autoshard` on PATH, else build/autoshard."""
    env = os.environ.get("AUTOSHARD_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise UsageError(f"AUTOSHARD_BIN={env} is not an executable file")
        return env
    on_path = shutil.which("autoshard")
    if on_path:
        return on_path
    local = REPO / "build" / "autoshard"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    raise UsageError("no autoshard binary: set AUTOSHARD_BIN, put autoshard on PATH, or build "
                     "build/autoshard")


# --- data --------------------------------------------------------------------------------------
class ByteBatches:
    """Random windows of a byte string: (tokens, labels) [batch, seq], labels shifted by one.

    A per-rank loader, as with DistributedSampler: every rank draws the same sample indices
    (one seeded generator: the window starts of the whole batch) and reads only the windows
    and positions of its own part of the batch (`parts`: per tensor, a tuple of slices, the
    planned module's input_slices()), so no rank holds the global batch."""

    def __init__(self, path: str, batch: int, seq: int, seed: int) -> None:
        raw = Path(path).read_bytes()
        if len(raw) < seq + 2:
            raise UsageError(f"--data {path}: {len(raw)} bytes, need more than --seq {seq} + 1")
        self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)
        self.batch, self.seq = batch, seq
        self.gen = torch.Generator().manual_seed(seed)

    def next(self, parts: Optional[Sequence[tuple]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (tokens, labels) pair on the CPU: the global batch, or with `parts` this
        rank's piece of each (tokens' slices, labels' slices)."""
        starts = torch.randint(0, self.data.numel() - self.seq - 1, (self.batch,),
                               generator=self.gen)
        full = (slice(None), slice(None))
        out = []
        for shift, sl in zip((0, 1), parts or (full, full)):
            rows, cols = sl[0], sl[1] if len(sl) > 1 else slice(None)
            pos = torch.arange(self.seq)[cols] + shift
            out.append(self.data[starts[rows][:, None] + pos[None, :]])
        return out[0], out[1]


# --- planning ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Plan:
    """What the planner promised: placements.json and plan.json's summary."""

    placements: dict
    step_time_s: float          # predicted step time on the planner's hardware
    peak_bytes: int             # predicted peak memory per device
    param_state_bytes: int      # of which: parameters + gradients + optimizer state
    hardware: str
    report: str                 # the planner's text output


def plan_command(binary: str, graph_path: str, a: argparse.Namespace, out_dir: str) -> list[str]:
    """The `autoshard plan` command line for this run."""
    hardware = a.hardware
    if hardware is None:
        hardware = os.path.join(out_dir, "hardware.json")
        with open(hardware, "w") as f:
            json.dump(SLOW_DEVICE, f, indent=1)
    return [binary, "plan", "--graph", graph_path, "--mesh", a.mesh, "--mesh-dims", a.mesh_dims,
            "--hardware", hardware, "--comm-model", a.comm_model, "--require-divisible",
            "--algo", a.algo, "--time-limit", str(a.time_limit), "--threads", "1", "-o", out_dir]


def run_planner(binary: str, graph: dict, a: argparse.Namespace, out_dir: str) -> str:
    """Rank 0: writes DIR/graph.json and runs the planner; returns its report (stdout).
    Raises RuntimeError with the planner's last error line when it fails."""
    graph_path = os.path.join(out_dir, "graph.json")
    with open(graph_path, "w") as f:
        json.dump(graph, f)
    cmd = plan_command(binary, graph_path, a, out_dir)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=a.time_limit + 300)
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        raise RuntimeError(f"autoshard plan failed (exit {res.returncode}): "
                           f"{lines[-1] if lines else 'no output'}")
    return res.stdout


def read_plan(out_dir: str, report: str) -> Plan:
    """Reads DIR/placements.json and DIR/plan.json (summary.objective_us, peak_memory_bytes;
    the parameters' memory_bytes: weight + gradient + optimizer state per device)."""
    with open(os.path.join(out_dir, "placements.json")) as f:
        placements = json.load(f)
    with open(os.path.join(out_dir, "plan.json")) as f:
        plan = json.load(f)
    summary = plan["summary"]
    state = sum(int(n.get("memory_bytes", 0)) for n in plan["nodes"]
                if n.get("placeholder_kind") == "parameter")
    return Plan(placements=placements, step_time_s=float(summary["objective_us"]) / 1e6,
                peak_bytes=int(summary["peak_memory_bytes"]), param_state_bytes=state,
                hardware=str(plan.get("mesh", {}).get("hardware", "?")), report=report)


def make_plan(binary: str, graph: dict, a: argparse.Namespace, rank: int) -> tuple[Plan, str, bool]:
    """Rank 0 plans into the plan directory; the others wait, then read it.

    Returns (plan, plan directory, whether this script created the directory)."""
    created = a.plan_dir is None
    box: list[Any] = [None, None]  # [error message or None, plan directory]
    report = ""
    if rank == 0:
        try:
            out_dir = tempfile.mkdtemp(prefix="train_llama_plan_") if created else a.plan_dir
            os.makedirs(out_dir, exist_ok=True)
            box[1] = out_dir
            report = run_planner(binary, graph, a, out_dir)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            box[0] = str(e).splitlines()[0] if str(e) else type(e).__name__
    dist.broadcast_object_list(box, src=0)  # the others wait here for rank 0's plan
    if box[0] is not None:
        raise UsageError(box[0])
    out_dir = box[1]
    dist.barrier()
    return read_plan(out_dir, report), out_dir, created


# --- measurements ------------------------------------------------------------------------------
def max_rss_bytes() -> int:
    """This process's peak resident set size so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_memory(device: torch.device, rss0: int) -> float:
    """Peak memory so far: the CUDA allocator's peak, or the RSS high-water mark's growth."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return float(max_rss_bytes() - rss0)


def gather_floats(value: float) -> list[float]:
    """Every rank's value, on every rank."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return [float(v) for v in out]


def local_weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of this rank's shards of the module's parameters."""
    total = 0
    for p in module.parameters():
        t = p.to_local() if hasattr(p, "to_local") else p
        total += t.numel() * t.element_size()
    return total


def scalar(loss: torch.Tensor) -> float:
    """The loss as a float (a plain tensor, or a DTensor from older versions of the module)."""
    if hasattr(loss, "full_tensor"):
        loss = loss.full_tensor()
    return float(loss.detach().item())


def fmt_seconds(t: float) -> str:
    """1.5 -> '1.5 s', 0.00105 -> '1.05 ms'."""
    return f"{t:.4g} s" if t >= 1 else f"{t * 1e3:.4g} ms"


def sync(device: torch.device) -> None:
    """Waits for queued GPU work before a clock is read."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- main --------------------------------------------------------------------------------------
def setup(a: argparse.Namespace) -> tuple[int, int, torch.device]:
    """Initialises the default process group: NCCL on cuda:LOCAL_RANK or gloo on the CPU."""
    cuda = torch.cuda.is_available() if a.device == "auto" else a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda but CUDA is not available")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def train(a: argparse.Namespace) -> None:
    """The whole run: plan, apply, train, report (see the module docstring)."""
    from torch.distributed.device_mesh import init_device_mesh

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UsageError("not launched by torchrun (RANK / WORLD_SIZE unset): run "
                         "torchrun --nproc-per-node N examples/train_llama.py --mesh ...")
    world = int(os.environ["WORLD_SIZE"])
    shape, names = check_args(a, world)
    binary = find_binary()
    data = ByteBatches(a.data, a.batch, a.seq, a.seed + 1)
    rank, world, device = setup(a)
    say = (lambda *x: print(*x, flush=True)) if rank == 0 else (lambda *x: None)
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)

    cfg = LlamaConfig(dim=a.dim, n_layers=a.layers, n_heads=a.heads, n_kv_heads=a.kv_heads,
                      ffn_dim=a.ffn, vocab_size=VOCAB, max_seq_len=a.seq)
    torch.manual_seed(a.seed)  # the same initial weights on every rank
    model = Transformer(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: LLaMA dim {a.dim}, {a.layers} layers, {a.heads} heads ({a.kv_heads} kv), "
        f"ffn {a.ffn}, vocab {VOCAB}: {n_params:,} parameters; batch {a.batch} x seq {a.seq}; "
        f"mesh {a.mesh} ({a.mesh_dims}) on {world} x {device.type} ({dist.get_backend()})")

    tokens, labels = data.next()
    t0 = time.perf_counter()
    traced = trace_for_apply(model, (tokens,), cross_entropy_loss, (labels,))
    graph = to_graph_dict(traced)
    say(f"traced the training step: {len(graph['nodes'])} nodes "
        f"({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    plan, plan_dir, created = make_plan(binary, graph, a, rank)
    say(f"planned on rank 0 with {binary} ({time.perf_counter() - t0:.1f} s):\n"
        f"{plan.report.rstrip()}")

    t0 = time.perf_counter()
    step = apply_placement(model, plan.placements, mesh, traced=traced, graph=graph)
    del model  # the planned module holds its own (sharded) copy of the weights
    say(f"applied the plan: lowered per-rank step of {len(step.step_graph.graph.nodes)} nodes "
        f"({time.perf_counter() - t0:.1f} s); the plan's schedule: {step.split.prefetched} "
        f"redistributions issued ahead of use, {step.split.bucketed} collectives saved by "
        f"its buckets")
    if a.compile:
        step.compile()
    opt = torch.optim.AdamW(step.parameters(), lr=a.lr)
    planned, _ = planned_collectives(binary, graph, plan.placements, shape,
                                     comm_model=a.comm_model)

    # Memory baseline: the sharded parameters are resident, nothing of the step yet.
    sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    rss0 = max_rss_bytes()

    losses: list[float] = []
    times: list[float] = []
    audit_table = ""
    first_step_mem = 0.0
    parts = step.input_slices()  # the part of each global batch this rank loads
    batch = (tokens[parts[0]], labels[parts[1]])  # the traced batch, this rank's part of it
    for i in range(a.steps):
        x, y = (b.to(device) for b in (batch if i == 0 else data.next(parts)))
        sync(device)
        t = time.perf_counter()
        if i == 0:  # the first step runs under the collective audit (node by node: slower)
            with CommAudit(step) as audit:
                loss = step(x, y)
                loss.backward()
            audit_table = audit.table(planned)
        else:
            loss = step(x, y)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = scalar(loss)
        sync(device)
        times.append(time.perf_counter() - t)
        losses.append(value)
        say(f"step {i + 1:>4}/{a.steps}  loss {value:.4f}  time {times[-1] * 1e3:8.1f} ms")
        if i == 0:
            first_step_mem = peak_memory(device, rss0)

    if device.type == "cuda":
        how = "torch.cuda.max_memory_allocated over the training steps"
    else:
        how = "growth of ru_maxrss (resident set high-water mark) over the training steps"
        if a.compile:
            how += ", torch.compile's own memory included"
    per_rank = gather_floats(peak_memory(device, rss0))
    first_step = max(gather_floats(first_step_mem))
    weights = local_weight_bytes(step)

    if a.checkpoint:
        try:
            from autoshard import checkpoint
        except ImportError:
            say("checkpoint: autoshard.checkpoint is not available in this version; not saved")
        else:
            path = os.path.join(a.checkpoint, f"step{a.steps}")
            checkpoint.save(path, step, opt, step=a.steps)
            say(f"checkpoint: saved to {path}")

    # Steady-state time: without the audited first step (run node by node) and, with
    # --compile, the second (the one that compiles).
    warm = min(1 + (1 if a.compile else 0), len(times) - 1)
    steady = times[warm:]
    first, last = losses[0], losses[-1]
    trend = "down" if last < first else "NOT down"
    excluded = [f"step 1, audited: {times[0] * 1e3:.1f} ms"] if warm else ["audited"]
    if warm > 1:
        excluded.append(f"step 2, compiling: {times[1] * 1e3:.1f} ms")
    say("")
    say(f"loss: first {first:.4f} -> last {last:.4f} ({trend} {abs(first - last) / first:.1%})")
    say(f"step time: mean {sum(steady) / len(steady) * 1e3:.1f} ms over steps "
        f"{warm + 1}-{len(times)} ({'; '.join(excluded)}); planner's prediction "
        f"{fmt_seconds(plan.step_time_s)} on '{plan.hardware}'"
        + (" (the toy default device, see --hardware)" if a.hardware is None else ""))
    if device.type == "cuda":
        planned_cmp = plan.peak_bytes
        planned_how = "plan.json's peak_memory_bytes"
    else:  # RSS growth leaves out what was resident before training: the sharded weights
        planned_cmp = plan.peak_bytes - weights
        planned_how = (f"plan.json's peak {plan.peak_bytes / MiB:.2f} MiB less the "
                       f"{weights / MiB:.2f} MiB of sharded weights resident before training")
    say(f"peak memory per device: measured {max(per_rank) / MiB:.2f} MiB vs planned "
        f"{planned_cmp / MiB:.2f} MiB ({max(per_rank) / planned_cmp:.2f}x)")
    say(f"  measured: {how}, max over ranks (per rank: "
        f"{', '.join(f'{v / MiB:.2f}' for v in per_rank)} MiB; after step 1: "
        f"{first_step / MiB:.2f} MiB)")
    say(f"  planned: {planned_how}; the plan counts parameters, gradients and AdamW state "
        f"({plan.param_state_bytes / MiB:.2f} MiB) and the live activations")
    caveat = "" if a.comm_model == "dtensor" else (
        "; nccl charges autoshard's own schedule, which DTensor's greedy walk may not follow")
    say(f"collective audit of step 1 (issued by the step vs charged by the plan, comm model "
        f"{a.comm_model}{caveat}):\n{audit_table}")
    dist.barrier()
    if created and rank == 0:
        shutil.rmtree(plan_dir, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point: one-line errors for bad arguments or a failed plan."""
    a = parse_args(argv)
    try:
        train(a)
    except UsageError as e:
        fail(str(e))
    # The planned module sits in a reference cycle (its graph holder calls back into it), so
    # its DTensors -- and through their mesh the gloo process groups -- would otherwise live
    # until interpreter teardown, where destroying gloo's worker state can abort the process.
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

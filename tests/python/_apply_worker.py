"""Models, plans and the per-rank worker of test_apply.py (importable by spawned processes)."""
from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Optional, Sequence

import torch
import torch.nn as nn

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)


# --- models: (model, inputs + targets, loss_fn, n_inputs) with real, seeded weights -----------
def squared_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error written out.  Not F.mse_loss: DTensor 2.13 runs mse_loss_backward on
    shards with the LOCAL element count (a Shard(1) input gets gradients 2x too large on 2
    ranks), a DTensor bug the fused op would expose in every batch-sharded plan."""
    return ((out - y) ** 2).mean()


def make_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 8))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)
    return model, (x,), (y,), squared_error


def make_llama(batch: int = 4):
    from autoshard.tracer.examples.llama import LlamaConfig, Transformer, cross_entropy_loss

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=64,
                      max_seq_len=8)
    model = Transformer(cfg)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (batch, 8), generator=g)
    labels = torch.randint(0, 64, (batch, 8), generator=g)
    return model, (tokens,), (labels,), cross_entropy_loss


def make_llama_b2():
    """The LLaMA with one sequence per rank of a 2-way dp dim (context_parallel's nested views)."""
    return make_llama(2)


def squared_sum(out: torch.Tensor) -> torch.Tensor:
    """The user's loss of the model's outputs (DTensors on the planned side)."""
    return (out ** 2).sum()


def make_mlp_outputs():
    """The MLP traced without a loss, as AutoParallel traces: the module returns its outputs
    and the test's own loss of them (squared_sum) back-propagates."""
    model, inputs, _, _ = make_mlp()
    return model, inputs, (), squared_sum


def make_odd_mlp():
    """Widths that 2 ranks cannot split evenly (15 features, batch 6): uneven shards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 15), nn.ReLU(), nn.Linear(15, 8))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 16, generator=g), torch.randn(6, 8, generator=g)
    return model, (x,), (y,), squared_error


def make_rotary(table: str = "buffer"):
    """The LLaMA above with Meta's complex rotary (torch.polar table, view_as_complex, complex
    mul, view_as_real; examples/complex_rotary.py): table="buffer" keeps the complex64 table
    as a buffer, "forward" runs polar in the step."""
    from autoshard.tracer.examples.complex_rotary import ComplexRotaryTransformer
    from autoshard.tracer.examples.llama import LlamaConfig, cross_entropy_loss

    torch.manual_seed(0)
    cfg = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=64,
                      max_seq_len=8)
    model = ComplexRotaryTransformer(cfg, table)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (4, 8), generator=g)
    labels = torch.randint(0, 64, (4, 8), generator=g)
    return model, (tokens,), (labels,), cross_entropy_loss


def make_rotary_polar():
    return make_rotary("forward")


MODELS = {"mlp": make_mlp, "llama": make_llama, "mlp_out": make_mlp_outputs,
          "mlp_odd": make_odd_mlp, "rotary": make_rotary, "rotary_polar": make_rotary_polar}

def make_group_norm():
    """A conv net with nn.GroupNorm (4 groups of 2 channels): native_group_norm and its
    backward (test_apply_conv_rnn.py)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(),
                          nn.Flatten(2), nn.Linear(64, 4))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randn(4, 8, 4, generator=g)
    return model, (x,), (y,), squared_error


class LastStepLSTM(nn.Module):
    """A 2-layer nn.LSTM (gates split by unsafe_split) and a head on its last step."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


def make_lstm():
    torch.manual_seed(0)
    model = LastStepLSTM()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 6, 3, generator=g), torch.randn(4, 4, generator=g)
    return model, (x,), (y,), squared_error


class _WeightNormUpsample(nn.Module):
    """A weight-normed conv (_weight_norm_interface and its backward) whose output is
    upsampled bicubically (upsample_bicubic2d and its backward), then a head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv2d(3, 8, 3, padding=1))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        y = nn.functional.interpolate(self.conv(x), scale_factor=2, mode="bicubic",
                                      align_corners=False)
        return self.head(y.mean((2, 3)))


def make_weight_norm_upsample():
    torch.manual_seed(0)
    model = _WeightNormUpsample()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randn(4, 4, generator=g)
    return model, (x,), (y,), squared_error


#: Models of test_apply_conv_rnn.py and test_context_parallel.py, kept out of MODELS (test_apply.py
#: plans every one there).
EXTRA_MODELS = {"llama_b2": make_llama_b2, "group_norm": make_group_norm, "lstm": make_lstm,
                "weight_norm_upsample": make_weight_norm_upsample}


def model_factory(key: str):
    return MODELS[key] if key in MODELS else EXTRA_MODELS[key]


#: Models planned on the 2x2 mesh only, under one plan each (test time): the complex64 table
#: as a buffer under Megatron (the heads split, so the rotary runs on head shards), polar in
#: the step under the optimum (which splits the complex tensors its own ways).
MESH_2X2_ONLY = {"rotary": "megatron", "rotary_polar": "optimum"}


def returns_outputs(key: str) -> bool:
    return key.endswith("_out")


def trace(key: str):
    from autoshard.apply import trace_for_apply
    from autoshard.tracer.export import to_graph_dict
    from autoshard.tracer.trace import trace_training_step

    model, inputs, targets, loss_fn = model_factory(key)()
    if returns_outputs(key):
        # AutoParallel's trace: no loss function, the outputs summed (autoshard.api.output_loss)
        traced = trace_training_step(copy.deepcopy(model), inputs, lambda out: out.float().sum(),
                                     None, mark_outputs=True, attention="cpu")
    else:
        traced = trace_for_apply(model, inputs, loss_fn, targets)
    return traced, to_graph_dict(traced)


# --- plans (made in the parent with the CLI) ------------------------------------------------
def param_pins(graph: dict, rule) -> list[str]:
    """--pin NODE=PLACEMENTS for every parameter rule(name, shape) gives a placement for."""
    pins = []
    for n in graph["nodes"]:
        if n.get("kind") == "parameter":
            p = rule(n["name"], n["outputs"][0]["shape"])
            if p:
                pins.append(f"{n['name']}={p}")
    return pins


def input_pins(graph: dict, placement: str) -> list[str]:
    return [f"{n['name']}={placement}" for n in graph["nodes"] if n.get("kind") == "input"]


_COLUMN = (".wq.weight", ".wk.weight", ".wv.weight", ".w1.weight", ".w3.weight")
_ROW = (".wo.weight", ".w2.weight")


def megatron(name: str, shape) -> str:
    """Megatron-LM tensor parallelism of one parameter (weight [out, in]): column-parallel
    in-projections split `out`, row-parallel out-projections split `in`; for the MLP, layer 0
    is column- and layer 2 row-parallel; everything else replicated."""
    if name.endswith(_COLUMN) or name in ("0.weight", "0.bias"):
        return "S(0)"
    if name.endswith(_ROW) or name == "2.weight":
        return "S(1)"
    return "R"


#: A toy device whose compute is slow and whose links are free of latency: at the tests' tiny
#: sizes an H100 plan would replicate everything; this one shards wherever it can, so the
#: "optimum" plans exercise sharded strategies.
SLOW_COMPUTE = {"base": "h100", "name": "slow-compute", "peak_fp32_tflops": 1e-6,
                "peak_bf16_tflops": 1e-6, "hbm_gbps": 1e-3, "launch_floor_us": 0,
                "base_latency_us": 0, "intra_latency_us": 0, "inter_latency_us": 0}


#: An H100 as it is: at the tests' sizes the planner keeps compute whole, so a recipe's
#: parameters are gathered once for use (FSDP2 over TP: `_S(0,tp)S(0)` -> `RS(0)`).
H100 = {"base": "h100", "name": "h100"}


def plan(binary: str, graph: dict, mesh: Sequence[int], dims: Sequence[str],
         pins: Sequence[str], out_dir: str, extra: Sequence[str] = (),
         divisible: bool = True, hardware: Optional[dict] = None,
         comm_model: str = "dtensor") -> dict:
    """`autoshard plan --graph ... -o DIR` on `hardware` (default SLOW_COMPUTE) with
    DTensor's comm model (the model DTensor executes, see autoshard.audit; or `comm_model`)
    -> the placements.json object."""
    gpath = os.path.join(out_dir, "graph.json")
    with open(gpath, "w") as f:
        json.dump(graph, f)
    hpath = os.path.join(out_dir, "hardware.json")
    with open(hpath, "w") as f:
        json.dump(hardware or SLOW_COMPUTE, f)
    cmd = [binary, "plan", "--graph", gpath, "--hardware", hpath, "--mesh", "x".join(map(str, mesh)),
           "--mesh-dims", ",".join(dims), "--comm-model", comm_model, "-o", out_dir,
           "--time-limit", "20"]
    if divisible:
        cmd.append("--require-divisible")
    for p in pins:
        cmd += ["--pin", p]
    cmd += list(extra)
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    with open(os.path.join(out_dir, "placements.json")) as f:
        return json.load(f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the worker -----------------------------------------------------------------------------
def check_job(tc, res: dict, where: str, tol: float) -> None:
    """A job's result on one rank against one process (unittest assertions on `tc`): loss,
    gradients and parameters after the steps within `tol`, the gradients laid out as their
    parameters, DTensor choosing every planned placement, no DTensor in the lowered graph."""
    tc.assertLessEqual(res["loss_err"], tol, where)
    for n, e in res["grad_err"].items():
        tc.assertLessEqual(e, tol, f"{where}: grad of {n}")
    for n, e in res["param_err"].items():
        tc.assertLessEqual(e, tol, f"{where}: {n} after 3 AdamW steps")
    tc.assertTrue(res["grad_placements_ok"], where)
    tc.assertEqual(res["mismatches"], [], f"{where}: DTensor chose otherwise")
    tc.assertTrue(res["dtensor_free"], f"{where}: a DTensor in the lowered graph")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (0 when both are zero)."""
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def _reference(model, inputs, targets, loss_fn, steps: int, lr: float):
    model = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, grads = [], None
    for i in range(steps):
        loss = loss_fn(model(*inputs), *targets)
        loss.backward()
        losses.append(loss.item())
        if i == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        opt.zero_grad()
    return losses, grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def run_jobs(mesh, jobs: Sequence[dict], steps: int = 3, lr: float = 1e-2) -> list[dict]:
    """Applies each plan, runs `steps` AdamW steps, compares with the single-process reference."""
    from torch.distributed.tensor import DTensor

    from autoshard.apply import apply_placement, placements_str
    from autoshard.audit import CommAudit

    traced_cache: dict = {}
    results = []
    for job in jobs:
        print(f"job {job['name']}", file=sys.stderr, flush=True)  # names the job a crash hit
        key = job["model"]
        if key not in traced_cache:
            traced_cache[key] = trace(key)
        traced, graph = traced_cache[key]
        model, inputs, targets, loss_fn = model_factory(key)()
        ref_losses, ref_grads, ref_params = _reference(model, inputs, targets, loss_fn, steps, lr)
        outputs = returns_outputs(key)
        step = apply_placement(model, job["placements"], mesh, traced=traced, graph=graph,
                               returns="outputs" if outputs else "loss")

        # Each rank loads its own part of the batch (what a per-rank data loader reads), the
        # same as the full-batch convenience cuts.
        full = [*inputs, *targets]
        try:
            local = [t[sl] for t, sl in zip(full, step.input_slices())]
            assert all(torch.equal(a, b) for a, b in zip(local, step.shard_inputs(*full)))
        except ValueError:  # load-balanced context parallelism: permuted, cut from the full
            local = step.shard_inputs(*full)
        if any(a.shape != b.shape for a, b in zip(local, full)):  # full tensors by mistake
            try:
                step(*full)
                raise AssertionError("the module took full tensors for local shards")
            except ValueError as e:
                assert "pass module.shard_inputs(*full)" in str(e), str(e)

        def call(fn):
            out = fn(*local)
            return loss_fn(out).full_tensor() if outputs else out
        planned = {n: placements_str(t.placements) for n, t in step.named_parameters()
                   if isinstance(t, DTensor)}
        opt = torch.optim.AdamW(step.parameters(), lr=lr)
        compiled = job.get("compile", False)
        run = torch.compile(step) if compiled else step
        res: dict = {"name": job["name"], "loss_err": 0.0, "grad_err": {}, "param_err": {},
                     "placements": planned}
        for i in range(steps):
            if i == 0:
                if compiled:  # the compiled code's collectives run in the graphs' order
                    from torch._inductor.utils import run_and_get_code

                    from autoshard.inflight import collective_order, compiled_collective_order

                    def first_step():
                        out = call(run)
                        out.backward()
                        return out
                    loss, codes = run_and_get_code(first_step)
                    res["compiled_order"] = [o for o in map(compiled_collective_order, codes) if o]
                    res["graph_order"] = [o for o in (collective_order(g.graph) for g in
                                                      (step.split.forward, step.split.backward))
                                          if o]
                elif outputs:  # audited in the job's eager twin / user collectives
                    loss = call(run)
                    loss.backward()
                else:
                    with CommAudit(step) as audit:
                        loss = step(*local)
                        loss.backward()
                    res["issued"] = {f"{k[0]}|{k[1]}": v for k, v in audit.totals().items()}
                    res["issued_edges"] = audit.per_edge()
                res["grad_placements_ok"] = all(
                    tuple(p.grad.placements) == tuple(p.placements)
                    for p in step.parameters() if p.grad is not None)
                for n, p in step.named_parameters():
                    res["grad_err"][n] = rel_err(p.grad.full_tensor(), ref_grads[n])
            else:
                loss = call(run)
                loss.backward()
            full = loss.full_tensor() if isinstance(loss, DTensor) else loss
            res["loss_err"] = max(res["loss_err"], abs(full.item() - ref_losses[i]) /
                                  abs(ref_losses[i]))
            opt.step()
            opt.zero_grad()
        for n, p in step.named_parameters():
            res["param_err"][n] = rel_err(p.detach().full_tensor(), ref_params[n])
        res["mismatches"] = [vars(m) for m in step.mismatches]
        res["unbalanced"] = list(step.unbalanced_attention)
        if compiled:  # Dynamo really compiled the step (no silent fallback to eager)
            from torch._dynamo.utils import counters

            res["compiled_graphs"] = counters["stats"]["unique_graphs"]
        res["dtensor_free"] = lowered_is_local(step)
        res["op_order"] = lowered_op_order(step)
        res["recomputed"] = step.split.recomputed
        res["saved"] = step.split.n_saved
        results.append(res)
    return results


def lowered_op_order(step) -> list:
    """The planned ops in the order the lowered step runs them (each at its first lowered
    node: its inputs' redistributions, then the op)."""
    from autoshard.lower import META_KEY

    seen: dict = {}
    for node in step.step_graph.graph.nodes:
        name = node.meta.get(META_KEY, {}).get("node")
        if node.op == "call_function" and name is not None:
            seen.setdefault(name, len(seen))
    return list(seen)


def lowered_is_local(step) -> bool:
    """The lowered graph holds plain tensors only (no DTensor dispatch on the hot path)."""
    from torch.distributed.tensor import DTensor

    for node in step.step_graph.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, DTensor):
            return False
    return True


def rank_main(rank: int, world: int, port: int, mesh_shape: Sequence[int], dims: Sequence[str],
              out_dir: str, run) -> None:
    """One rank: gloo on 127.0.0.1, a CPU DeviceMesh, `run(mesh)`'s results (or the
    traceback) written atomically to out_dir/rank<r>.json."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    import faulthandler

    faulthandler.enable()  # a native crash (SIGABRT, SIGSEGV) still shows the Python stack
    torch.set_num_threads(1)
    # A rank that dies of something other than an Exception (SystemExit from a library, a
    # KeyboardInterrupt) still writes its result: the parent fails at once, not at its timeout.
    result: Any = {"ok": False, "error": "the rank stopped before it reported (see its stderr)"}
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(dims))
        result = {"ok": True, "results": run(mesh)}
    except BaseException:  # reported to the parent, which fails the test with the traceback
        result = {"ok": False, "error": traceback.format_exc()}
    finally:
        with tempfile.NamedTemporaryFile("w", dir=out_dir, delete=False) as f:
            json.dump(result, f)
        os.replace(f.name, os.path.join(out_dir, f"rank{rank}.json"))
        if dist.is_initialized():
            dist.destroy_process_group()


#: Signals that mean a native crash of a rank (SIGABRT, SIGBUS, SIGSEGV), not our timeout.
NATIVE_CRASH = {-6: "SIGABRT", -7: "SIGBUS", -11: "SIGSEGV"}


def forkserver_context():
    """The multiprocessing context every test's ranks start from: fresh processes (a fork of the
    test process would inherit its threads) made by one fork server per test session, which
    imports torch once, so each rank starts in well under a second instead of re-importing torch
    (~1.3 s of CPU per rank).  The preload is set before the first start, whichever test that is."""
    import torch.multiprocessing as mp

    # One inductor compile thread per rank: the ranks already fill the cores, and a pool of
    # compile workers per rank (inductor's default: one per core) only adds process starts.  Set
    # before the server starts: its children inherit its environment, not the caller's.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "torch.distributed.tensor", __name__])
    return ctx


def _spawn_ranks(world: int, mesh: Sequence[int], dims: Sequence[str], run, out_dir: str,
                 timeout_s: float) -> list:
    """Starts the ranks, waits at most timeout_s, kills leftovers; -> the processes."""
    import time

    ctx = forkserver_context()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, world, port, mesh, dims, out_dir, run),
                         daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    return procs


def abort_rank0(mesh) -> list:
    """Test helper for launch: rank 0 dies of SIGABRT (a native crash); -> [coordinate]."""
    if mesh.get_rank() == 0:
        os.abort()
    return [mesh.get_coordinate()]


def launch(world: int, mesh: Sequence[int], dims: Sequence[str], run, out_dir: str,
           timeout_s: float) -> list:
    """Spawns `world` ranks running `run(mesh)` (a picklable callable), waits at most
    timeout_s, kills leftovers; -> per-rank results (AssertionError with the rank's
    traceback when one failed or gave none).

    A rank that dies of a native crash (SIGSEGV, SIGABRT, SIGBUS) fails the launch at once,
    never retried: a crash is a defect to find (faulthandler has printed the rank's Python
    stack to stderr, which the test's output shows).  The one crash seen in this runtime was
    torch 2.13's gloo with several all-gathers in flight on one process group; the runtime
    keeps one collective in flight on gloo (autoshard.inflight)."""
    procs = _spawn_ranks(world, mesh, dims, run, out_dir, timeout_s)
    crashed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode in NATIVE_CRASH]
    if crashed:
        r, code = crashed[0]
        raise AssertionError(f"rank {r} died of {NATIVE_CRASH[code]} (a native crash; its "
                             f"Python stack is in the output above)")
    results = []
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.json")
        if not os.path.exists(path):
            raise AssertionError(f"rank {r} gave no result within {timeout_s} s "
                                 f"(exit code {procs[r].exitcode})")
        with open(path) as f:
            res = json.load(f)
        if not res["ok"]:
            raise AssertionError(f"rank {r} failed:\n{res['error']}")
        results.append(res["results"])
    return results

"""Runs a multi-process gloo job N times in a row and counts the runs that crashed.

    python bench/crash_bench.py --runs 100 train          # examples/train_llama.py, 4 ranks, 2x2
    python bench/crash_bench.py --runs 20 train --compile # the same with the compiled step
    python bench/crash_bench.py --runs 100 jobs           # the test suite's 2x2 gloo job set

`jobs` launches, --runs times, the 4-rank 2x2 (dp, tp) job set of tests/python/test_apply.py
(every model, the optimum and the pinned dp / fsdp / megatron plans, planned once up front;
eager, 3 AdamW steps each, numerics against one process): one launch is one of the test
suite's gloo jobs.

A run is *clean* when every process exits 0 (for `jobs`: and every loss, gradient and
parameter is within 1e-5 of one process); a rank killed by a signal (SIGSEGV, SIGABRT, SIGBUS)
is a *crash*, any other failure an *error*.  Each crash's output is kept under
--log-dir (default build/crash_bench/) with the rank's Python stack (faulthandler).  Prints one
table row per run kind and exits 1 when any run crashed or failed, so that a bench run can
serve as evidence of the issue's "100 consecutive runs without a crash".

Environment knobs worth trying while hunting a crash: MALLOC_CHECK_=3 and MALLOC_PERTURB_=165
(glibc's heap checks: they turn a silent corruption into an abort near its cause),
TORCH_DISTRIBUTED_DEBUG=DETAIL.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env.setdefault("AUTOSHARD_BIN", str(REPO / "build" / "autoshard"))
    cores = sorted((REPO / "build").glob("_core*.so"))
    if cores:
        env.setdefault("AUTOSHARD_CORE", str(cores[0]))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"),
                                                    env.get("PYTHONPATH", "")) if p)
    return env


def _command(kind: str, args: argparse.Namespace) -> list:
    py = sys.executable
    if kind == "train":
        cmd = [py, "-m", "torch.distributed.run", "--nproc-per-node", "4",
               str(REPO / "examples" / "train_llama.py"), "--mesh", "2x2",
               "--mesh-dims", "dp,tp", "--steps", str(args.steps)]
        return cmd + (["--compile"] if args.compile else [])
    raise SystemExit(f"crash_bench.py: error: unknown kind {kind!r} (train, jobs)")


#: What a signal death looks like in the output of torchrun, multiprocessing and pytest.
_SIGNAL = re.compile(r"Signal (\d+) \(SIG\w+\)|exitcode\s*:\s*-(\d+)|exit code -(\d+)|"
                     r"Fatal Python error: (Segmentation fault|Aborted|Bus error)")


#: Signals a native crash dies of (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV).  SIGTERM and
#: SIGKILL are torchrun stopping the other ranks after one failed: not a crash themselves.
_FATAL = {4, 6, 7, 8, 11}


def _fatal(m: re.Match) -> bool:
    number = next((g for g in m.groups()[:3] if g), None)
    return int(number) in _FATAL if number else True


def run_once(cmd: list, env: dict, timeout_s: float) -> tuple[str, str]:
    """-> ("clean" | "crash" | "error" | "timeout", output)."""
    try:
        p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", out
    out = p.stdout + p.stderr
    if -p.returncode in _FATAL or any(_fatal(m) for m in _SIGNAL.finditer(out)):
        return "crash", out
    return ("clean" if p.returncode == 0 else "error"), out


class GlooJobs:
    """The test suite's 2x2 gloo job set, planned once; `run_once()` launches it."""

    def __init__(self, tmp: str) -> None:
        os.environ.update({k: v for k, v in _env().items() if k.startswith("AUTOSHARD_")})
        sys.path[:0] = [str(REPO / "tests" / "python"), str(REPO / "python")]
        import _apply_worker as W  # noqa: N814 (the test suite's name for it)
        import test_apply

        self.W, self.tmp = W, tmp
        binary = os.environ["AUTOSHARD_BIN"]
        graphs = {k: W.trace(k)[1] for k in W.MODELS}
        plans = test_apply._plans(binary, graphs, [2, 2], ["dp", "tp"], tmp)
        self.jobs = [{"name": n, "model": k, "placements": p} for n, (k, p) in plans.items()]

    def run_once(self) -> tuple[str, str]:
        import functools

        try:
            per_rank = self.W.launch(4, [2, 2], ["dp", "tp"],
                                     functools.partial(self.W.run_jobs, jobs=self.jobs),
                                     self.tmp, 900)
        except AssertionError as e:
            return ("crash" if " died of SIG" in str(e) else "error"), str(e)
        worst = max(max([r["loss_err"], *r["grad_err"].values(), *r["param_err"].values()])
                    for results in per_rank for r in results)
        return ("clean" if worst <= 1e-5 else "error"), f"worst relative error {worst:.3g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["train", "jobs"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50, help="train: steps per run")
    ap.add_argument("--compile", action="store_true", help="train: torch.compile the step")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--log-dir", default=str(REPO / "build" / "crash_bench"))
    args = ap.parse_args()
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    jobs = GlooJobs(tempfile.mkdtemp(prefix="crash-bench-")) if args.kind == "jobs" else None
    cmd, env = (None, None) if jobs else (_command(args.kind, args), _env())
    counts = {"clean": 0, "crash": 0, "error": 0, "timeout": 0}
    start = time.monotonic()
    for i in range(1, args.runs + 1):
        t0 = time.monotonic()
        verdict, out = jobs.run_once() if jobs else run_once(cmd, env, args.timeout)
        counts[verdict] += 1
        if verdict != "clean":
            (log_dir / f"{args.kind}-{i:03d}-{verdict}.log").write_text(out)
        print(f"run {i:3d}/{args.runs}: {verdict:7s} {time.monotonic() - t0:6.1f} s",
              flush=True)
    label = args.kind + (" --compile" if args.compile else "")
    if jobs:  # one launch runs the whole job set: count the test suite's jobs too
        label += f" ({len(jobs.jobs)} jobs a launch, {len(jobs.jobs) * args.runs} in all)"
    print()
    print("| job | runs | clean | crashed | other failures | wall |")
    print("|---|---|---|---|---|---|")
    print(f"| {label} | {args.runs} | {counts['clean']} | {counts['crash']} | "
          f"{counts['error'] + counts['timeout']} | {time.monotonic() - start:.0f} s |")
    return 0 if counts["clean"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())

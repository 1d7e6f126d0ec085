"""examples/train_llama.py end to end: torchrun, 4 gloo ranks on CPU, mesh 2x2 (dp, tp).

The example plans a 1-layer byte-level LLaMA with the autoshard binary (AUTOSHARD_BIN), applies
the plan and trains a few steps on examples/data/tiny.txt.  Its output must show the loss going
down, the memory line, and the collective audit of the first step with every row matching.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from _paths import PYTHON_DIR, ROOT

SCRIPT = os.path.join(ROOT, "examples", "train_llama.py")
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
TIMEOUT_S = 300  # generous for a loaded machine; the run takes ~30-45 s on 2 shared cores


def _env(binary: str) -> dict:
    env = dict(os.environ)
    env.update(AUTOSHARD_BIN=os.path.abspath(binary), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (PYTHON_DIR, env.get("PYTHONPATH")) if p))
    return env


@pytest.fixture(scope="module")
def binary() -> str:
    """The autoshard CLI from AUTOSHARD_BIN; skips when it is not there."""
    path = os.environ.get("AUTOSHARD_BIN", "")
    if not path or not os.path.isfile(path):
        pytest.skip("no autoshard binary (set AUTOSHARD_BIN)")
    return path


def _audit_rows(out: str) -> list[str]:
    """The rows of the printed audit table (after its header line)."""
    lines = out.splitlines()
    header = [i for i, ln in enumerate(lines) if ln.startswith("collective") and "match" in ln]
    assert header, "no audit table in the output:\n" + out
    rows = []
    for ln in lines[header[-1] + 1:]:
        if not ln.startswith(KINDS):
            break
        rows.append(ln)
    return rows


def test_train_llama_4_ranks(binary: str, tmp_path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           SCRIPT, "--mesh", "2x2", "--mesh-dims", "dp,tp", "--steps", "5", "--layers", "1",
           "--dim", "32", "--heads", "4", "--kv-heads", "2", "--seq", "32", "--batch", "8",
           "--lr", "1e-2", "--plan-dir", str(tmp_path / "plan")]
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=_env(binary), capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    elapsed = time.monotonic() - t0
    out = res.stdout
    assert res.returncode == 0, f"exit {res.returncode}\n{out}\n{res.stderr[-4000:]}"

    losses = [float(m) for m in re.findall(r"^step +\d+/5 +loss ([0-9.]+)", out, re.M)]
    assert len(losses) == 5, out
    assert losses[-1] < losses[0], out
    m = re.search(r"^loss: first ([0-9.]+) -> last ([0-9.]+) \(down ", out, re.M)
    assert m and float(m.group(2)) < float(m.group(1)), out

    assert re.search(r"^step time: mean [0-9.]+ ms over steps 2-5", out, re.M), out
    assert re.search(r"^peak memory per device: measured [0-9.]+ MiB vs planned [0-9.]+ MiB",
                     out, re.M), out

    rows = _audit_rows(out)
    assert rows, "empty audit table:\n" + out
    bad = [r for r in rows if not r.rstrip().endswith("yes")]
    assert not bad, "audit rows that do not match the plan:\n" + "\n".join(bad)
    # The default (toy) hardware makes the plan shard: there is communication to audit.
    assert any(r.startswith(("all_gather", "reduce_scatter")) for r in rows), out
    print(f"train_llama.py, 4 ranks, 5 steps: {elapsed:.1f} s")


def test_bad_mesh_is_one_line_error(binary: str) -> None:
    """A mesh that does not match the number of processes: exit 2, one line on stderr."""
    env = _env(binary)
    env.update(RANK="0", WORLD_SIZE="4", LOCAL_RANK="0")
    res = subprocess.run([sys.executable, SCRIPT, "--mesh", "3x2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == ["train_llama.py: error: --mesh 3x2 has 6 devices but 4 processes were "
                     "launched (torchrun --nproc-per-node 6)"], res.stderr

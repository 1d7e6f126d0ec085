"""Plans and the per-rank worker of test_context_parallel.py (importable by spawned processes)."""
from __future__ import annotations

import copy
import faulthandler
import sys
from typing import Sequence

from _paths import PYTHON_DIR  # noqa: F401  (sets sys.path)
import _apply_worker as W

SDPA = "_scaled_dot_product_flash_attention_for_cpu"
#: every sequence-indexed placeholder of the LLaMA step sharded on its sequence dim over cp:
#: the tokens and labels [B, S], the rope tables [S, D]
SEQUENCE_PINS = ["tokens=S(1)", "target=S(1)", "rope_cos=S(0)", "rope_sin=S(0)"]


def cp_nodes(doc: dict) -> dict:
    """node -> its "context_parallel" entry, for the plan's CP attention nodes."""
    return {n: e["context_parallel"] for n, e in doc["placements"].items()
            if "context_parallel" in e}


def force_kind(doc: dict, kind: str) -> dict:
    """The plan with every CP attention node's kind set to `kind` (the planner chooses one;
    the test runs both lowerings on the same plan)."""
    out = copy.deepcopy(doc)
    for e in out["placements"].values():
        if "context_parallel" in e:
            e["context_parallel"]["kind"] = kind
    return out


def run_cp(mesh, jobs: Sequence[dict]) -> list:
    """W.run_jobs with a watchdog: a hung collective dumps every thread's stack and exits."""
    faulthandler.dump_traceback_later(240, exit=True, file=sys.stderr)
    try:
        return W.run_jobs(mesh, jobs)
    finally:
        faulthandler.cancel_dump_traceback_later()

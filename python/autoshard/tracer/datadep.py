"""What a trace on meta tensors cannot know, decided by a policy chosen for planning.

A meta tensor has a shape but no values, so three kinds of code cannot run on it as written:

* **data-dependent sizes**: `nonzero` (also `torch.where(mask)`, `argwhere`), boolean-mask
  indexing `x[mask]`, `masked_select`.  The policy takes the **upper bound**: every element
  of the mask counts as kept, so the output has as many rows as the mask has elements (the
  most work and memory the step can see; a plan made for it holds for any data).  Values are
  known too: the upper bound of `nonzero(mask)` is every index of the mask in order, so an
  expert loop `for e in (counts > 0).nonzero():` runs over every expert.
* **values read in Python** (`.item()`, `bool(t)`, `int(t)`, a 0-d integer tensor used as an
  index): branches such as `if mask.any().item():`.  A value the trace knows (below) is
  used; an unknown boolean is taken as **True** (the guarded code runs, usually the branch
  with more work) with a `DataDependentWarning` naming the source line, unless True makes the
  step raise (a validation check: `if (labels >= vocab).any(): raise ...`): the tracer then
  traces again with the last such default flipped (why "default flipped", warned); an unknown
  integer or float has no safe default and stops the trace with one line naming the line.
* **random draws** decided in Python (layerdrop: `if torch.rand([]) < p: continue`): a small
  uniform draw (`rand`, `rand_like`, `uniform_`, at most MAX_KNOWN elements) takes the **top
  of its range** (1.0 for `rand`), so `draw < p` is False for every p <= 1 and every
  layer runs; values computed from known tensors are computed (on CPU copies of at most
  MAX_KNOWN elements), which is how the comparison becomes known.  A warning names the line;
  the applied step keeps this choice (it makes no eager island: autoshard/islands.py).

A user overrides any of these per call with `data_dependent={"file.py:LINE": value}` (the
source line the warning names): a bool or number for a value read in Python, an int for the
number of kept elements of a data-dependent size (at most its upper bound).  A key that no
decision used is an error (a typo would otherwise go unnoticed).  Every decision is recorded
(`TracedStep.data_dependent`, a list of `Decision`) for the plan's summary and the runtime.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Mapping, Optional

import torch

__all__ = ["DataDependentPolicy", "DataDependentWarning", "DataDependentError", "Decision",
           "MAX_KNOWN", "MAX_FLIPS", "as_policy", "warn_flipped"]

#: At most this many defaults are flipped (each costs a trace) before the error is raised.
MAX_FLIPS = 8

#: Tensors of at most this many elements get their values tracked (random draws, nonzero's
#: upper-bound indices and what is computed from them).
MAX_KNOWN = 4096


class DataDependentWarning(UserWarning):
    """A data-dependent value the trace took by the policy's default (names the source line)."""


class DataDependentError(ValueError):
    """A data-dependent value with no safe default and no override (names the source line)."""


@dataclasses.dataclass
class Decision:
    """One thing the trace decided instead of the data."""

    source: str            # "file.py:LINE" of the user code (the override key)
    kind: str              # "size" (nonzero / mask index / masked_select) | "value" (.item())
    op: str                # the ATen op, e.g. "nonzero", "index.Tensor", "_local_scalar_dense"
    value: Any             # the size (kept elements) or value taken
    why: str               # "upper bound" | "known" | "random draw" | "default" |
    #                        "default flipped" | "override"
    module: Optional[str] = ""  # the module whose forward ran it ("" the root, None: backward)

    def describe(self) -> str:
        """One line: where, what, which value and why."""
        mod = f" in {self.module}" if self.module else ""
        what = "size" if self.kind == "size" else "value"
        return f"{self.source}{mod}: {self.op} {what} {self.value!r} ({self.why})"


class DataDependentPolicy:
    """The decisions for data-dependent code while tracing (module docstring).

    overrides: "file.py:LINE" -> value at that source line (a bool/int/float for a value read
        in Python, an int number of kept elements for a data-dependent size).
    unknown_bool: the value taken for an unknown boolean (default True: the branch runs).
    warn: emit a DataDependentWarning for each default taken (once per source line and op).
    """

    def __init__(self, overrides: Optional[Mapping[str, Any]] = None, *,
                 unknown_bool: bool = True, warn: bool = True) -> None:
        self.overrides = dict(overrides or {})
        for key in self.overrides:
            if not isinstance(key, str) or ":" not in key:
                raise ValueError(f"data_dependent: key {key!r} is not 'file.py:LINE'")
        self.unknown_bool = bool(unknown_bool)
        self.warn = warn
        self.decisions: list[Decision] = []
        self.used: set = set()
        self.source: Callable[[], str] = lambda: ""
        self.module: Callable[[], Optional[str]] = lambda: ""
        self._warned: set = set()
        #: source line -> the value an unknown boolean takes there instead of unknown_bool,
        #: because the default made the step raise (flip_last_default)
        self.flipped: dict[str, bool] = {}

    def flip_last_default(self) -> Optional[Decision]:
        """After a trace that raised: the last boolean taken by default at a line not flipped
        yet, now flipped for the next trace (None when there is none)."""
        for d in reversed(self.decisions):
            if d.why == "default" and d.source not in self.flipped:
                self.flipped[d.source] = not d.value
                return d
        return None

    # -- the recording mode's hooks ---------------------------------------------------------
    def decide_size(self, op: str, bound: int) -> int:
        """The number of kept elements of a data-dependent size whose upper bound is `bound`."""
        src = self.source()
        if src in self.overrides:
            self.used.add(src)
            n = self.overrides[src]
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= bound:
                raise DataDependentError(
                    f"{src}: data_dependent override {n!r} for {op} must be an int in "
                    f"[0, {bound}] (the number of kept elements)")
            self._record(src, "size", op, n, "override")
            return n
        self._record(src, "size", op, bound, "upper bound")
        return bound

    def decide_value(self, op: str, dtype: torch.dtype, known: Any, random: bool) -> Any:
        """The Python value read from a 0-d tensor: override, known value, or default."""
        src = self.source()
        if src in self.overrides:
            self.used.add(src)
            value = self.overrides[src]
            self._record(src, "value", op, value, "override")
            return value
        if known is not None:
            self._record(src, "value", op, known, "random draw" if random else "known")
            if random and self.warn and (src, "draw") not in self._warned:
                self._warned.add((src, "draw"))
                _warn(src, f"autoshard trace: {src or '<unknown line>'}: a value drawn at "
                           f"random decides Python code; taken as {known!r} (draws at the top "
                           f"of their range: every layerdrop-style layer runs, when planned "
                           f"and when applied)")
            return known
        if dtype == torch.bool and src in self.flipped:
            self._record(src, "value", op, self.flipped[src], "default flipped")
            return self.flipped[src]
        if dtype == torch.bool:
            self._record(src, "value", op, self.unknown_bool, "default")
            if self.warn and (src, op) not in self._warned:
                self._warned.add((src, op))
                _warn(src, f"autoshard trace: {src or '<unknown line>'}: a boolean read from "
                           f"a tensor (.item() / bool()) has no value on meta; taken as "
                           f"{self.unknown_bool} for planning (override: "
                           f"data_dependent={{{src!r}: ...}})")
            return self.unknown_bool
        kind = "an integer" if not dtype.is_floating_point and not dtype.is_complex else "a float"
        raise DataDependentError(
            f"{src or '<unknown line>'}: {kind} read from a tensor (.item() / int() / "
            f"indexing) has no value on meta and no safe default; pass "
            f"data_dependent={{{src!r}: VALUE}} to the trace")

    def finish(self) -> None:
        """Raises for override keys that no decision used."""
        unused = sorted(set(self.overrides) - self.used)
        if unused:
            seen = sorted({d.source for d in self.decisions if d.source})
            raise DataDependentError(
                f"data_dependent: no data-dependent value at {', '.join(unused)} "
                f"(decisions were taken at: {', '.join(seen) or 'none'})")

    def _record(self, source: str, kind: str, op: str, value: Any, why: str) -> None:
        self.decisions.append(Decision(source, kind, op, value, why, self.module()))


def _warn(source: str, message: str) -> None:
    """A DataDependentWarning shown at the user's line ("file.py:LINE") rather than here."""
    file, _, line = source.rpartition(":")
    lineno = int(line) if line.isdigit() else 0
    warnings.warn_explicit(message, DataDependentWarning, file or "<unknown>", lineno,
                           module=file.removesuffix(".py") or None)


def warn_flipped(decision: Decision, error: BaseException) -> None:
    """The warning for a default flipped because the step raised with it."""
    first = (str(error).strip().splitlines() or [""])[0]
    _warn(decision.source, f"autoshard trace: {decision.source}: taking {decision.value} "
                           f"there made the step raise {type(error).__name__}: {first}; "
                           f"taken as {not decision.value} instead")


def as_policy(data_dependent: Any) -> DataDependentPolicy:
    """The trace keyword `data_dependent`: None (the default policy), a dict of overrides, or a
    DataDependentPolicy (used as is; its decisions are reset)."""
    if data_dependent is None:
        return DataDependentPolicy()
    if isinstance(data_dependent, DataDependentPolicy):
        data_dependent.decisions = []
        data_dependent.used = set()
        return data_dependent
    if isinstance(data_dependent, Mapping):
        return DataDependentPolicy(data_dependent)
    raise TypeError(f"data_dependent must be None, a dict 'file.py:LINE' -> value or a "
                    f"DataDependentPolicy, got {type(data_dependent).__name__}")

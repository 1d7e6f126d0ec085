"""Checks that every public name of autoshard's public Python modules has a docstring.

    PYTHONPATH=python AUTOSHARD_CORE=build/_core...so build/venv/bin/python scripts/check_docstrings.py

The public modules are PUBLIC_MODULES (the API reference documents exactly these).  A public
name is one in the module's `__all__`, or else one that does not start with `_` and is a
function or class defined in that module.  Classes are checked with their public methods and
properties defined in the class itself (inherited ones are their base's business).  Prints one
line per name without a docstring and exits 1 if there is any; scripts/api_docs.sh runs it
before it builds the reference, and tests/python/test_docs.py runs it in the test command.
"""
from __future__ import annotations

import importlib
import inspect
import sys

PUBLIC_MODULES = [
    "autoshard",
    "autoshard.api",
    "autoshard.apply",
    "autoshard.audit",
    "autoshard.checkpoint",
    "autoshard.core",
    "autoshard.islands",
    "autoshard.module",
    "autoshard.optimizer",
    "autoshard.pipeline",
    "autoshard.plan_file",
    "autoshard.tracer",
    "autoshard.tracer.datadep",
    "autoshard.tracer.export",
    "autoshard.tracer.meta_init",
    "autoshard.tracer.trace",
    "autoshard.tracer.validate",
    "autoshard.visualizer.build_display_from_json",
]


def public_names(mod) -> list[str]:
    names = getattr(mod, "__all__", None)
    if names is not None:
        return list(names)
    return [n for n, v in vars(mod).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", None) == mod.__name__]


def has_doc(obj) -> bool:
    return bool((getattr(obj, "__doc__", None) or "").strip())


def missing_in_class(qual: str, cls) -> list[str]:
    out = []
    for n, v in vars(cls).items():
        if n.startswith("_"):
            continue
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        if isinstance(v, property) or inspect.isfunction(v):
            if not has_doc(v):
                out.append(f"{qual}.{n}")
    return out


def missing(modules=PUBLIC_MODULES) -> list[str]:
    out = []
    for name in modules:
        mod = importlib.import_module(name)
        if not has_doc(mod):
            out.append(name)
        for n in public_names(mod):
            if n == "__version__":
                continue
            obj = getattr(mod, n)
            qual = f"{name}.{n}"
            if inspect.ismodule(obj):
                continue
            if (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)
                    or callable(obj)) and not has_doc(obj):
                out.append(qual)
            if inspect.isclass(obj) and obj.__module__.startswith("autoshard"):
                out += missing_in_class(qual, obj)
    return sorted(set(out))


def main() -> int:
    bad = missing()
    for q in bad:
        print(f"no docstring: {q}")
    if bad:
        print(f"{len(bad)} public names without a docstring", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

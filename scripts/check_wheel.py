"""Checks an installed autoshard package against the source tree: every module there, every
module importable from there.

    PYTHONPATH=build/venv-wheel/lib/python3.11/site-packages build/venv/bin/python \\
        scripts/check_wheel.py python/autoshard

Run by scripts/test.sh after `pip install .` into a fresh venv, with the test venv's Python
(which has torch) and the wheel's site-packages first on PYTHONPATH, so that the imports come
from the installed package, never from the checkout.  A file the wheel drops (a packaging
exclude that matches more than it should) fails here with its name; so does a module that
imports something the wheel lacks.  Exit status 1 on any problem, one line each.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path


def source_files(src: Path) -> set:
    """Package-relative paths of the .py files of the source package."""
    return {p.relative_to(src).as_posix() for p in src.rglob("*.py")
            if "__pycache__" not in p.parts}


def main(argv: list) -> int:
    if len(argv) != 1:
        print("usage: check_wheel.py SOURCE_PACKAGE_DIR (e.g. python/autoshard)",
              file=sys.stderr)
        return 2
    src = Path(argv[0]).resolve()
    os.environ.pop("AUTOSHARD_CORE", None)  # the wheel's own extension module, not a build's
    import autoshard

    installed = Path(autoshard.__file__).resolve().parent
    problems = []
    if installed == src or src in installed.parents:
        problems.append(f"{installed}: autoshard imports from the source tree, not a wheel")
    missing = sorted(source_files(src) - source_files(installed))
    problems += [f"{installed}/{m}: in the source package but not installed" for m in missing]
    names = ["autoshard"] + [m.name for m in pkgutil.walk_packages([str(installed)],
                                                                  prefix="autoshard.")]
    for name in sorted(names):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 -- every failure is reported, one line each
            problems.append(f"{name}: import failed: {type(e).__name__}: {e}".splitlines()[0])
    for p in problems:
        print(f"check_wheel: {p}", file=sys.stderr)
    if not problems:
        print(f"check_wheel: {len(names)} modules import from {installed}; no file missing")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

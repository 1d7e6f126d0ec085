"""pytest setup: python/ on sys.path, and fixtures for the C++ core and the CLI binary.

CTest (python_apply, python_tracer) sets AUTOSHARD_BIN to the `autoshard` binary and, when the module is
built (-DAUTOSHARD_PYTHON_MODULE=ON, scripts/test.sh does), AUTOSHARD_CORE to autoshard._core.
"""
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


@pytest.fixture(scope="session")
def core():
    """autoshard.core (the C++ extension); skips when it is not built."""
    try:
        from autoshard import core as c
    except ImportError as e:
        pytest.skip(f"autoshard._core not built: {e}")
    return c


@pytest.fixture(scope="session")
def cli_bin():
    """Path of the `autoshard` binary (AUTOSHARD_BIN, else PATH); skips without one."""
    path = os.environ.get("AUTOSHARD_BIN") or shutil.which("autoshard")
    if not path:
        pytest.skip("no autoshard binary (set AUTOSHARD_BIN)")
    return path


@pytest.fixture(scope="session")
def llama2l_graph():
    return os.path.join(FIXTURES, "llama2l.graph.json")

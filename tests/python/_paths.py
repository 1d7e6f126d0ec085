"""Puts python/ on sys.path so the tests run from a plain checkout."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)


def run_planned_script(test, script: str, *args: str) -> dict:
    """Runs `script` (Python source) in a fresh interpreter with the package on its path and
    AUTOSHARD_BIN set (else skips `test`); returns the JSON object its last stdout line
    prints.  A fresh process keeps a fake process group or a gloo one out of the test's own."""
    import json
    import subprocess

    binary = os.environ.get("AUTOSHARD_BIN")
    if not binary or not os.path.exists(binary):
        test.skipTest("autoshard binary not built (set AUTOSHARD_BIN)")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                       text=True, timeout=600)
    test.assertEqual(r.returncode, 0, r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])

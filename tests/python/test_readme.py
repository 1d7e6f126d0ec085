"""Runs the python blocks of README.md's "Use from Python" section, in order, in a temporary
directory (the docs are code that works)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import PYTHON_DIR, ROOT

pytest.importorskip("torch")


def readme_blocks():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## Use from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_python_blocks(core, tmp_path):
    blocks = readme_blocks()
    assert len(blocks) >= 2
    (tmp_path / "out").mkdir()
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "out" / "report.html").stat().st_size > 1000
    assert "Shard(dim=0)" in r.stdout or "Shard(" in r.stdout or "Replicate" in r.stdout

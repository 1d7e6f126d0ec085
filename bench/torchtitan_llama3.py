#!/usr/bin/env python3
"""torchtitan's llama3 model definition, unchanged, traced, planned and applied by autoshard.

torchtitan from PyPI does not import beside torch 2.13, and its model file imports the rest of
torchtitan (trainer configuration, tokenizer, logging), so this bench assembles a package tree
in a temporary directory: torchtitan's own model files, read from a git checkout or mirror at
a given commit (never committed here), and small stand-ins, written here, for the names those
files import but the model does not use (a tokenizer base class, the job config type, a
logger, the state-dict adapter base):

    torchtitan:  models/llama3/model/{model,args}.py, models/attention.py, models/utils.py,
                 protocols/model.py
    stand-ins:   components/tokenizer.py, config/__init__.py, tools/logging.py,
                 protocols/{train_spec,state_dict_adapter}.py

The model's rotary embedding is torchtitan's complex one (torch.polar, view_as_complex, a
complex multiply, view_as_real).  The run is bench/autoparallel_llama3.py's --apply on that
package: dp x tp gloo ranks, each tracing and planning the tiny model (dim 64, 2 layers, 4
heads, 2 KV heads, vocab 128, seq 16, batch 8, f32) through AutoParallel(model, input_fn, mesh)
with the batch split over dp and the default parameter-memory bound, applying the plan and
comparing the loss and every gradient with one process (1e-5).

    AUTOSHARD_CORE=build/_core*.so PYTHONPATH=python build/venv/bin/python \\
        bench/torchtitan_llama3.py --git /path/to/torchtitan/.git [--commit REV] [--dp 2 --tp 2]

The default commit, e38d7abe0 of pytorch/torchtitan, is the last with the llama3 model in
torchtitan/models/llama3/model/ before the configuration refactor (#2386) spread it over the
trainer's configuration system.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

#: torchtitan's files the model needs, as they are at the commit.
MODEL_FILES = ("models/llama3/model/model.py", "models/llama3/model/args.py",
               "models/attention.py", "models/utils.py", "protocols/model.py")
#: Stand-ins for imported names the model does not use.
STAND_INS = {
    "components/tokenizer.py": "class BaseTokenizer:\n    \"\"\"Unused by the model.\"\"\"\n",
    "config/__init__.py": "class JobConfig:\n    \"\"\"Unused by the model.\"\"\"\n",
    "tools/logging.py": "import logging\n\nlogger = logging.getLogger('torchtitan')\n",
    "protocols/state_dict_adapter.py": "class StateDictAdapter:\n    \"\"\"Unused.\"\"\"\n",
    "protocols/train_spec.py": "from torchtitan.protocols.model import ModelProtocol  # noqa\n",
}


def assemble(git_dir: str, commit: str, root: str) -> None:
    """Writes the package tree under `root` (see the module docstring)."""
    for rel in MODEL_FILES:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:torchtitan/{rel}"],
                              check=True, capture_output=True, text=True).stdout
        _write(root, rel, text)
    for rel, text in STAND_INS.items():
        _write(root, rel, text)
    for dirpath, _, files in os.walk(os.path.join(root, "torchtitan")):
        if "__init__.py" not in files:
            _write(dirpath, "__init__.py", "", absolute=True)


def _write(root: str, rel: str, text: str, absolute: bool = False) -> None:
    path = os.path.join(root, rel) if absolute else os.path.join(root, "torchtitan", rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git", required=True, help="torchtitan's git directory (a clone's .git)")
    ap.add_argument("--commit", default="e38d7abe0")
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    import autoparallel_llama3

    with tempfile.TemporaryDirectory(prefix="torchtitan-") as root:
        assemble(args.git, args.commit, root)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return autoparallel_llama3.run_apply(root, args.dp, args.tp)


if __name__ == "__main__":
    sys.exit(main())

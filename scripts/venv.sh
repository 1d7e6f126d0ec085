#!/usr/bin/env bash
# Creates (once) the Python virtual environment the tests and the Python package use:
# build/venv, with torch 2.13.0 (CPU build), pybind11, scikit-build-core, pytest and
# playwright (which drives Debian's /usr/bin/chromium; no browser is downloaded) and transformers
# (the Hugging Face zoo: tests/python/test_zoo.py, bench/zoo_bench.py; no weights are downloaded)
# and pdoc (the Python API reference: scripts/api_docs.sh).
# Prints the venv's python path on stdout.  Usage: scripts/venv.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/venv}
want="torch==2.13.0 numpy pytest pybind11>=2.12 scikit-build-core>=0.10 playwright transformers==5.24.0 pdoc==16.0.0"
stamp="$venv/.autoshard-requirements"
if [[ ! -x "$venv/bin/python" ]]; then
  # pyenv's python3 when present (Debian 12's python3.11 works as well).
  python3 -m venv "$venv" >&2
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  log="$venv/pip-install.log"
  # shellcheck disable=SC2086
  if ! "$venv/bin/python" -m pip install $want >"$log" 2>&1; then
    tail -20 "$log" >&2; echo "venv: pip install failed (full log: $log)" >&2; exit 1
  fi
  echo "$want" > "$stamp"
fi
echo "$PWD/$venv/bin/python"

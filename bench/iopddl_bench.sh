#!/usr/bin/env bash
# Runs the IOPDDL contest benchmark (builds nothing).
# Usage: bench/iopddl_bench.sh [BINARY] [--scale F] [--threads N] [--only A,G,M,S]
#   BINARY defaults to build/iopddl_bench (configure with -DAUTOSHARD_BENCH=ON and build the
#   iopddl_bench target).  --scale is the fraction of the contest timeouts
#   (A 60 s, G 120 s, M 180 s, S 240 s); default 0.1.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/iopddl_bench"
if [[ $# -gt 0 && "$1" != --* ]]; then bin="$1"; shift; fi
if [[ ! -x "$bin" ]]; then
  echo "iopddl_bench binary not found at $bin (build target iopddl_bench with AUTOSHARD_BENCH=ON)" >&2
  exit 2
fi
exec "$bin" --dir "$root/../shared/iopddl" "$@"

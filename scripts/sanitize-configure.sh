#!/usr/bin/env bash
# Configures the clang build with AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's
# coverage instrumentation (fuzz/fuzz.cmake) in DIR (default build-asan).  scripts/test.sh runs
# the unit tests from it and scripts/fuzz.sh the harnesses, so both use these same flags.
#   scripts/sanitize-configure.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-asan}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DAUTOSHARD_FUZZ=ON \
  -DAUTOSHARD_BENCH=OFF -DAUTOSHARD_WERROR=ON >/dev/null

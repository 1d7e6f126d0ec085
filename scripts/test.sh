#!/usr/bin/env bash
# Sets up (Debian packages when root), builds every target in Release and in Debug with
# AddressSanitizer + UndefinedBehaviorSanitizer, and runs every test in both builds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
jobs=$(nproc)
echo "== Python venv (torch 2.13.0, pytest, pybind11, playwright)"
py=$(scripts/venv.sh)
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi
echo "== Release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAUTOSHARD_WERROR=ON \
  -DAUTOSHARD_VENV_PYTHON="$py" -DAUTOSHARD_PYTHON_MODULE=ON >/dev/null
cmake --build build -j"$jobs"
echo "== Release tests"
(cd build && ctest --output-on-failure -j"$jobs")
echo "== Debug + ASan/UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAUTOSHARD_SANITIZE=ON -DAUTOSHARD_BENCH=OFF \
  -DAUTOSHARD_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== Debug + ASan/UBSan tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs" -LE "slow|python|fuzz")
echo "== Fuzzing: every loader's libFuzzer harness for 20 s (clang + ASan/UBSan in build-fuzz)"
scripts/fuzz.sh 20

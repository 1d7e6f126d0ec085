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
echo "== pip install . (the wheel, into a fresh venv without torch; ccache shares the objects)"
rm -rf build/venv-wheel
python3 -m venv build/venv-wheel
build/venv-wheel/bin/python -m pip install -q . --config-settings=build-dir=build/wheel \
  --config-settings=cmake.define.AUTOSHARD_WERROR=ON >build/pip-wheel.log 2>&1 \
  || { tail -30 build/pip-wheel.log; echo "pip install . failed (build/pip-wheel.log)"; exit 1; }
build/venv-wheel/bin/autoshard plan --model mlp --mesh 2 --json >/dev/null
(cd build && venv-wheel/bin/python -c "from autoshard.core import Graph, Mesh; print(\"wheel: autoshard._core loads (no torch):\", Graph, Mesh)")
echo "== Debug + ASan/UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAUTOSHARD_SANITIZE=ON -DAUTOSHARD_BENCH=OFF \
  -DAUTOSHARD_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
echo "== Debug + ASan/UBSan tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j"$jobs" -LE "slow|python|fuzz")
echo "== Fuzzing: every loader's libFuzzer harness for 20 s (clang + ASan/UBSan in build-fuzz)"
scripts/fuzz.sh 20

#!/usr/bin/env bash
# Sets up (Debian packages when root), builds every target in Release (g++) and with
# AddressSanitizer + UndefinedBehaviorSanitizer (clang), runs every test in both builds, and
# fuzzes every file loader for 10 s (a smoke run: scripts/fuzz.sh SECONDS fuzzes longer).  What
# CI runs; its time from a clean clone, stage by stage, is in docs/benchmarks.md ("Test
# command").  The tests are most of it: whole-model work runs in the Release pass only, and the
# Python suites' ranks fork from a server that imported torch once.
#
# One clang build serves the sanitizer tests and the libFuzzer harnesses (its objects carry
# libFuzzer's edge coverage, and only the parsing libraries its comparison tracing, which would
# double the tests' time in the solver's loops: fuzz/fuzz.cmake), and `pip install .`
# reuses the Release build directory: a clean run compiles the sources twice, not four times.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { echo "== $1 (at $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s)"; }
scripts/deps.sh --test
jobs=$(nproc)
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi
# shellcheck source=scripts/generator.sh
source scripts/generator.sh
use_one_generator build build-asan

# The sanitizer build needs neither the venv nor the Release build: it runs from the start at
# the lowest priority on what the foreground leaves of the cores (the venv's download and
# install use one, the Python suites' ranks wait on each other), and is waited for before its
# tests.  Job control gives it a process group to stop on failure; not setsid: a new session
# is a scheduler autogroup of its own, which gets half the CPU whatever its nice value.
stage "clang + ASan/UBSan build (tests and libFuzzer harnesses), in the background at nice 19"
scripts/sanitize-configure.sh build-asan
set -m
nice -n 19 cmake --build build-asan -j"$jobs" >build-asan/build.log 2>&1 &
asan_build=$!
set +m
trap 'kill -- -"$asan_build" 2>/dev/null || true' EXIT

stage "Python venv (torch 2.13.0, pytest, pybind11, playwright, transformers)"
py=$(scripts/venv.sh)

stage "Release build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAUTOSHARD_WERROR=ON \
  -DAUTOSHARD_VENV_PYTHON="$py" -DAUTOSHARD_PYTHON_MODULE=ON >/dev/null
cmake --build build -j"$jobs"
stage "Release tests"
(cd build && ctest --output-on-failure -j"$jobs")

stage "pip install . (the wheel, into a fresh venv without torch)"
rm -rf build/venv-wheel
python3 -m venv build/venv-wheel
build/venv-wheel/bin/python -m pip install -q . --config-settings=build-dir=build \
  --config-settings=cmake.define.AUTOSHARD_WERROR=ON >build/pip-wheel.log 2>&1 \
  || { tail -30 build/pip-wheel.log; echo "pip install . failed (build/pip-wheel.log)"; exit 1; }
build/venv-wheel/bin/autoshard plan --model mlp --mesh 2 --json >/dev/null
(cd build && venv-wheel/bin/python -c "from autoshard.core import Graph, Mesh; print('wheel: autoshard._core loads (no torch):', Graph, Mesh)")
# Every module of the source package is in the wheel and imports from it (torch from the test
# venv, autoshard from the wheel's site-packages only).
PYTHONPATH="$(echo "$PWD"/build/venv-wheel/lib/python3*/site-packages)" "$py" scripts/check_wheel.py python/autoshard

stage "waiting for the ASan/UBSan build"
if ! wait "$asan_build"; then
  tail -40 build-asan/build.log; echo "the ASan/UBSan build failed (build-asan/build.log)"; exit 1
fi
trap - EXIT
stage "ASan/UBSan tests"
# Whole-model work runs in the Release pass only: the CLI scripts labelled slow and the test
# suites named *Large.  Every other unit test, the error and bad-input scripts, the report,
# what-if and trace scripts run here.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1 GTEST_FILTER="-*Large.*" \
  ctest --output-on-failure -j"$jobs" -LE "slow|python")
stage "Fuzzing: every loader's libFuzzer harness for 10 s"
FUZZ_BUILD=build-asan scripts/fuzz.sh 10
stage "done"

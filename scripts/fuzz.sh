#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang with ASan+UBSan, build dir build-asan) and runs
# each for SECONDS (default 20) on a scratch corpus seeded from fuzz/corpus/NAME.
#   scripts/fuzz.sh [SECONDS] [NAME...]     e.g. scripts/fuzz.sh 60 graph_json iopddl
# Prints one line per harness (executions, corpus size, crashes) and exits non-zero if any
# harness found a crash, leak, timeout or out-of-memory; the reproducer is left in
# build-asan/artifacts/.  FUZZ_BUILD overrides the build dir, FUZZ_ARGS adds libFuzzer flags,
# FUZZ_JOBS sets how many harnesses run at once (default: one per core).  The long run recorded in
# docs/benchmarks.md:  FUZZ_JOBS=1 FUZZ_ARGS=-runs=10000000 scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
build=${FUZZ_BUILD:-build-asan}
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache; fi
[ -f "$build/CMakeCache.txt" ] || scripts/sanitize-configure.sh "$build"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do
    names+=("$(basename "$f" _fuzz.cc)")
  done
fi
targets=()
for n in "${names[@]}"; do targets+=("${n}_fuzz"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
mkdir -p "$build/artifacts"
# run_one NAME: fuzzes one harness; prints its result line(s); exits non-zero on a finding.
run_one() {
  local n=$1 corpus seeds gen log rc execs size start elapsed
  corpus="$build/corpus/$n"
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/corpus/$n" ] && seeds+=("fuzz/corpus/$n")
  # The state/replay harnesses write generated seeds (fuzz/state_seeds.h) into this directory.
  gen="$build/seeds/$n"
  rm -rf "$gen" && mkdir -p "$gen"
  seeds+=("$gen")
  log="$build/fuzz-$n.log"
  # -max_len: above every seed (the largest, a solved state, is ~20 KB).  -timeout: one input taking
  # 10 s is a hang.  -rss_limit_mb / -malloc_limit_mb: a file that makes a loader allocate
  # 1 GiB is a finding (resource bounds, issue 14).
  rc=0
  start=$SECONDS
  AUTOSHARD_FUZZ_SEEDS="$gen" "$build/${n}_fuzz" -max_total_time="$seconds" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$n-" ${FUZZ_ARGS:-} "$corpus" "${seeds[@]}" \
    >"$log" 2>&1 || rc=$?
  elapsed=$((SECONDS - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  size=$(ls "$corpus" | wc -l)
  if [ "$rc" -ne 0 ]; then
    echo "fuzz $n: FAILED (exit $rc) after ${execs:-?} executions; see $log:"
    grep -E "^==[0-9]+==ERROR|runtime error|^SUMMARY|Test unit written|property violated|bad error message|uncaught" "$log" | head -8 | sed 's/^/  /'
  else
    echo "fuzz $n: ${execs:-?} executions in ${elapsed} s, corpus $size files, 0 crashes"
  fi
  return "$rc"
}
# The harnesses run side by side, one per core; results print in harness order.
jobs=${FUZZ_JOBS:-$(nproc)}
for n in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  rm -f "$build/rc-$n.txt"
  { rc=0; run_one "$n" >"$build/result-$n.txt" 2>&1 || rc=$?; echo "$rc" >"$build/rc-$n.txt"; } &
done
wait
failed=0
for n in "${names[@]}"; do
  cat "$build/result-$n.txt"
  [ "$(cat "$build/rc-$n.txt" 2>/dev/null)" = 0 ] || failed=1
done
exit "$failed"

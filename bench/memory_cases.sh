#!/usr/bin/env bash
# The big-model cases of issue 12, as a user runs them (H100 preset, one solver thread,
# --time-limit 60): prints a Markdown table of status, step time, lower bound and gap, peak
# memory, the smallest achievable peak when nothing fits, wall time and peak resident memory.
#   bench/memory_cases.sh [AUTOSHARD_BINARY]      (default build/autoshard)
set -euo pipefail
cd "$(dirname "$0")/.."
as=${1:-build/autoshard}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=(
  "llama3-8b 1x8 seq 8192 batch 8 (torchtitan), default|--model llama3-8b --mesh 1x8 --seq 8192 --batch 8"
  "llama3-8b 1x8 seq 8192 batch 8 (torchtitan), --recompute auto|--model llama3-8b --mesh 1x8 --seq 8192 --batch 8 --recompute auto"
  "llama3-8b 1x8 seq 8192 batch 8 (torchtitan), --recompute none|--model llama3-8b --mesh 1x8 --seq 8192 --batch 8 --recompute none"
  "llama3-8b 2x8 at 20 GiB|--model llama3-8b --mesh 2x8 --memory-limit 20GiB"
  "llama3-70b 4x8|--model llama3-70b --mesh 4x8"
  "llama3-70b 2x8|--model llama3-70b --mesh 2x8"
  "llama3-70b 8x8x8|--model llama3-70b --mesh 8x8x8 --mesh-dims pp,dp,tp"
  "llama3-8b 8x8|--model llama3-8b --mesh 8x8"
  "llama3-70b 4x8x8x4 (4-D)|--model llama3-70b --mesh 4x8x8x4 --mesh-dims pp,dp,cp,tp"
)
echo "| case | status | step time ms | lower bound ms | gap | peak GiB | smallest peak GiB (lower bound .. found) | wall s | RSS MB |"
echo "|---|---|---:|---:|---:|---:|---|---:|---:|"
for c in "${cases[@]}"; do
  name=${c%%|*}
  # shellcheck disable=SC2206
  args=(${c#*|})
  rc=0
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$as" plan "${args[@]}" --threads 1 --time-limit 60 \
    --json >"$tmp/out.json" 2>"$tmp/err" || rc=$?
  read -r wall rss < <(tail -1 "$tmp/time") || true
  if [[ ! -s $tmp/out.json ]]; then
    echo "| $name | error: $(tail -1 "$tmp/err" | cut -c1-120) | | | | | | ${wall:-} | $(( ${rss:-0} / 1024 )) |"
    continue
  fi
  python3 - "$tmp/out.json" "$name" "$wall" "$rss" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
name, wall, rss = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
gib = 1 << 30
def ms(x):
    return "" if x is None else f"{x / 1000:.1f}"
# A pipelined plan (a pp dim) has no solver status: its schedule, step and per-rank peaks.
pipelined = "schedule" in j
status = f"pipelined, {j['schedule']}" if pipelined else j["status"]
step = j.get("step_us") if pipelined else j.get("objective_us")
peak_bytes = max(j["rank_peak_memory_bytes"]) if pipelined else j.get("peak_memory_bytes")
peak = f"{peak_bytes / gib:.2f}" if pipelined or j.get("has_solution") else ""
lo, hi = j.get("min_peak_lower_bound_bytes"), j.get("min_peak_memory_bytes")
smallest = ""
if lo is not None or hi is not None:
    smallest = f"{lo / gib:.2f}" if lo is not None else "?"
    smallest += " (proven)" if lo is not None and lo == hi else f" .. {hi / gib:.2f}" if hi is not None else ""
solved = pipelined or j.get("has_solution")
gap = "" if j.get("gap") is None or not solved else f"{100 * j['gap']:.2f} %"
print(f"| {name} | {status} | {ms(step)} | {ms(j.get('lower_bound_us'))} | {gap} "
      f"| {peak} | {smallest} | {wall:.2f} | {rss // 1024} |")
EOF
done

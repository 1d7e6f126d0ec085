#!/usr/bin/env bash
# Pipeline stages (issue 25): plans llama3-70b and llama3-405b on meshes with a pp dim and
# prints plan time, chosen schedule and stages, the pipelined step, its proven bound and gap,
# and the peak memory per device of each pp rank.
# Usage: bench/pipeline_bench.sh [BINARY] [-- extra plan options, e.g. --objective additive]
#   BINARY defaults to build/autoshard.  Cases (batch = global batch, split in --microbatches):
#   70b   8x8x8  pp,dp,tp  seq 2048 batch 128 M 16
#   405b  8x8x8  pp,dp,tp  seq 8192 batch 256 M 32  (torchtitan's 405B run: 512 H100s, FSDP 8,
#                                                    TP 8, PP 8, local batch 32, global 256)
#   405b  8x16x8 pp,dp,tp  seq 8192 batch 256 M 16  (the same global batch on 1024 GPUs)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/autoshard"
if [[ $# -gt 0 && "$1" != --* ]]; then bin="$1"; shift; fi
[[ ${1:-} == -- ]] && shift
[[ -x "$bin" ]] || { echo "autoshard binary not found at $bin" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=(
  "llama3-70b 8x8x8 2048 128 16 h100"
  "llama3-405b 8x8x8 8192 256 32 h100-500w"
  "llama3-405b 8x16x8 8192 256 16 h100"
)
printf '%-12s %-7s %-10s %6s %8s %-18s %-28s %12s %12s %8s %10s %6s\n' model mesh hardware batch M schedule \
  "layers per stage" step bound gap "peak GiB" "plan s"
for c in "${cases[@]}"; do
  read -r model mesh seq batch m hw <<<"$c"
  t0=$(date +%s.%N)
  "$bin" plan --model "$model" --mesh "$mesh" --mesh-dims pp,dp,tp --seq "$seq" --batch "$batch" \
    --microbatches "$m" --hardware "$hw" --json "$@" >"$tmp/out.json"
  t1=$(date +%s.%N)
  python3 - "$tmp/out.json" "$model" "$mesh" "$hw" "$batch" "$m" "$t0" "$t1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
model, mesh, hw, batch, m, t0, t1 = sys.argv[2:]
sched = j["schedule"] + (f" v={j['stages_per_rank']}" if j["stages_per_rank"] > 1 else "")
sizes = [len(s["layers"]) for s in j["stages"]]
layers = ",".join(map(str, sizes))
if len(layers) > 28: layers = layers[:25] + "..."
peak = max(j["rank_peak_memory_bytes"]) / 2**30
print(f"{model:<12} {mesh:<7} {hw:<10} {batch:>6} {m:>8} {sched:<18} {layers:<28} "
      f"{j['step_us']/1e3:>10.1f}ms {j['lower_bound_us']/1e3:>10.1f}ms {j['gap']*100:>7.3f}% "
      f"{peak:>10.2f} {float(t1)-float(t0):>6.2f}")
PY
done

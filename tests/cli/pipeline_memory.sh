#!/usr/bin/env bash
# ctest-label: slow
# `autoshard plan` on a mesh with a pp dim under memory limits, and beside torchtitan's layout
# (--compare, --algo): whole-model stage searches, run in the Release pass only (pipeline.sh
# keeps the quick cases the sanitizer pass runs too).
source "$(dirname "$0")/lib.bash" "$@"

M=(--model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2 --mesh-dims pp,dp --objective additive)

# --price-memory: a memory-limited stage of 1F1B bounded by pricing its memory (the priced plan
# here is within the target gap of its bound, so no memory-limited solve runs); same plan.
# (--param-gather per-use here and below: these check the memory-limited search, and `auto`
# would plan every case twice; the M cases above keep the default.)
P=(--model llama3-8b --layers 8 --seq 512 --batch 4 --mesh 2x4 --mesh-dims pp,dp --microbatches 4 --schedule 1F1B
   --memory-limit 7GiB --param-gather per-use)
plain=$("$AS" plan "${P[@]}" 2>&1)
priced=$("$AS" plan "${P[@]}" --price-memory -v 2>&1)
expect_contains "$priced" "stage kind 0 with 4 layers, memory priced at t*" "--price-memory"
expect_contains "$priced" "fits, in" "--price-memory plan"
expect_contains "$priced" "$(grep 'pipelined step time' <<<"$plain")" "--price-memory step"
case "$plain" in *"memory priced"*) fail "--price-memory is off by default" ;; esac
# --no-rank-bound: interleaved layouts bounded by their memory-free stages only; same plan,
# a bound no higher.
I=(--model llama3-8b --layers 8 --seq 2048 --batch 8 --mesh 2x4 --mesh-dims pp,dp --microbatches 4
   --schedule Interleaved1F1B --stages-per-rank 2 --memory-limit 12GiB --json --param-gather per-use)
"$AS" plan "${I[@]}" >"$TMP/rank.json"
"$AS" plan "${I[@]}" --no-rank-bound >"$TMP/norank.json"
# Below what the memory-free ranks need (9.63 GiB) no share of it fits, but the rank refit
# recomputes the memory-free split's rank 0 under 9.5 GiB (and 8 GiB); at 7 GiB nothing fits: the
# same error as before the memory-free splits were candidates (not their plan over the limit).
"$AS" plan "${I[@]/12GiB/9.5GiB}" >"$TMP/refit.json"
"$AS" plan "${I[@]/12GiB/9.5GiB}" --no-refit >"$TMP/norefit.json" 2>&1 && fail "--no-refit: 9.5 GiB planned"
expect_contains "$(cat "$TMP/norefit.json")" "no stage split fits 9.50 GiB per device" "--no-refit at 9.5 GiB"
pycheck "$TMP/refit.json" "
assert max(j['rank_peak_memory_bytes']) <= 9.5 * 2**30, j['rank_peak_memory_bytes']
assert any(s['recompute_us'] > 0 for s in j['stages']), j['stages']
"
expect_error "no stage split fits 7.00 GiB per device" -- "$AS" plan "${I[@]/12GiB/7GiB}"
pycheck "$TMP/rank.json" "
k = json.load(open('$TMP/norank.json'))
assert abs(j['step_us'] - k['step_us']) <= 1e-6 * j['step_us'] and k['lower_bound_us'] <= j['lower_bound_us'] + 1e-6, (j, k)
"
ok "memory-limited stage searches"

# --compare: the optimum beside torchtitan's PP x FSDP x TP (equal stages); never worse.
"$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2x2 --mesh-dims pp,dp,tp --microbatches 4 \
  --objective additive --compare --json >"$TMP/cmp.json"
pycheck "$TMP/cmp.json" "
names = [r['recipe'] for r in j]
assert names[0].startswith('alpa') and any('1F1B x fsdp+tp' in n for n in names), names
best = j[0]['step_us']
for r in j[1:]:
    assert 'error' not in r, r
    assert r['step_us'] >= best * (1 - 1e-9), (r['recipe'], r['step_us'], best)
tt = next(r for r in j if r['recipe'].startswith('torchtitan PP 1F1B'))
assert [len(s['layers']) for s in tt['stages']] == [2, 2], tt['stages']
"
ok "--compare"

# --algo on a pp mesh: torchtitan's layout alone (equal stages, the recipe in each, 2 stages per
# rank for Interleaved1F1B as torchtitan's generate_split_points), the same plan as its
# --compare row.
"$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2x2 --mesh-dims pp,dp,tp --microbatches 4 \
  --objective additive --algo fsdp+tp --schedule Interleaved1F1B --json >"$TMP/tt.json"
python3 - "$TMP/tt.json" "$TMP/cmp.json" <<'PY'
import json, sys
tt = json.load(open(sys.argv[1]))
row = next(r for r in json.load(open(sys.argv[2])) if r['recipe'].startswith('torchtitan PP Interleaved1F1B'))
assert tt['schedule'] == 'Interleaved1F1B' and tt['stages_per_rank'] == 2, (tt['schedule'], tt['stages_per_rank'])
assert [len(s['layers']) for s in tt['stages']] == [1, 1, 1, 1], tt['stages']
assert abs(tt['step_us'] - row['step_us']) <= 1e-6 * row['step_us'], (tt['step_us'], row['step_us'])
# torchtitan's FSDP keeps the stages' parameters gathered over the step: their memory counts them.
assert tt['params_gathered_once'] is True, tt['params_gathered_once']
assert all(s['gathered_param_bytes'] > 0 for s in tt['stages']), [s['gathered_param_bytes'] for s in tt['stages']]
assert not any('gathered' in w for w in tt.get('warnings', [])), tt.get('warnings')
# The peak rank's memory by part (bench/pipeline_levers.py): the parts sum to the rank's peak.
for r, peak in enumerate(tt['rank_peak_memory_bytes']):
    st = [s for s in tt['stages'] if s['pp_rank'] == r]
    held = sum(s['boundary_bytes'] + s['deferred_grad_bytes'] + (s['inflight_microbatches'] - 1) * s['activation_bytes']
               + s['deferred_microbatches'] * s['kept_for_w_bytes'] for s in st)
    passing = max(max(0, s['microbatch_peak_bytes'] - s['boundary_bytes']) for s in st)
    assert abs(held + passing - peak) <= len(st) + 1, (r, held + passing, peak)
    assert all(s['deferred_grad_bytes'] > 0 and s['boundary_bytes'] >= s['activation_bytes'] + s['gathered_param_bytes']
               for s in st), st
PY
# Per use asked for, the recipe's parameters are gathered at each use (FSDP2's reshard after
# forward): no kept copies, less memory than gathered once.
"$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2x2 --mesh-dims pp,dp,tp --microbatches 4 \
  --objective additive --algo fsdp+tp --schedule Interleaved1F1B --param-gather per-use --json >"$TMP/tt_pu.json"
python3 - "$TMP/tt.json" "$TMP/tt_pu.json" <<'PY'
import json, sys
once, pu = (json.load(open(f)) for f in sys.argv[1:])
assert pu['params_gathered_once'] is False and all(s['gathered_param_bytes'] == 0 for s in pu['stages']), pu['stages']
assert [s['layers'] for s in pu['stages']] == [s['layers'] for s in once['stages']]
assert max(pu['rank_peak_memory_bytes']) < max(once['rank_peak_memory_bytes']), (pu['rank_peak_memory_bytes'], once['rank_peak_memory_bytes'])
PY
expect_error "--algo with --compare" -- "$AS" plan "${M[@]}" --algo fsdp --compare
ok "--algo on a pp mesh"

# --algo under a memory limit its memory-free stage plans exceed: the recipe leaves the
# gradients' and optimizer state's placements to the solver, which under --float8 (cheap
# matmuls) picks memory-hungry ones; the fitted search must find the placements that save
# memory (priced solves with the recipe's pins), not only recompute.  Below every plan's need,
# the error's parts add up to what the memory-free plan needs.
F=(--model llama3-8b --layers 4 --seq 2048 --batch 8 --mesh 2x2x2 --mesh-dims pp,dp,tp --microbatches 4
   --algo fsdp+tp --schedule 1F1B --recompute full --float8 --compile --json -q)
"$AS" plan "${F[@]}" --memory-limit 0 >"$TMP/f8free.json"
"$AS" plan "${F[@]}" --memory-limit 6.5GiB >"$TMP/f8fit.json"
pycheck "$TMP/f8fit.json" "
free = json.load(open('$TMP/f8free.json'))
assert max(free['rank_peak_memory_bytes']) > 6.5 * 2**30, free['rank_peak_memory_bytes']
assert max(j['rank_peak_memory_bytes']) <= 6.5 * 2**30, j['rank_peak_memory_bytes']
# The last stage fits by its sharding: less memory with no more recomputation.
a, b = free['stages'][-1], j['stages'][-1]
assert b['peak_memory_bytes'] < a['peak_memory_bytes'], (a['peak_memory_bytes'], b['peak_memory_bytes'])
assert b['recompute_us'] <= a['recompute_us'], (a['recompute_us'], b['recompute_us'])
"
"$AS" plan "${F[@]}" --memory-limit 6GiB >"$TMP/f8no.txt" 2>&1 && fail "--float8 --algo fsdp+tp planned at 6 GiB"
python3 - "$TMP/f8no.txt" <<'PY'
import re, sys
msg = open(sys.argv[1]).read()
unit = {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}
size = r'([0-9.]+) (B|KiB|MiB|GiB)'
m = re.search(r'with (\d+) microbatches in flight.*memory-free plan needs ' + size + ': ' + size +
              r' of parameter state.*?, ' + size + r' of gradients summed over the step, and ' + size +
              r' of activations kept by each microbatch in flight', msg)
assert m, msg
f = int(m.group(1))
need, state, grads, act = (float(m.group(i)) * unit[m.group(i + 1)] for i in (2, 4, 6, 8))
assert need > 6 * 2**30, msg
assert abs(state + grads + f * act - need) <= 0.02 * 2**30, (need, state, grads, f, act)
PY
ok "--algo under a memory limit: sharding that saves memory"


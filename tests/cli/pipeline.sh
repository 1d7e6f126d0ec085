#!/usr/bin/env bash
# `autoshard plan` on a mesh with a pp dim: pipeline stages (issue 25), their placements.json
# (docs/pipeline-format.md: "pipeline" section, per-node "stage") and the bad inputs.
source "$(dirname "$0")/lib.bash" "$@"

M=(--model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2 --mesh-dims pp,dp --objective additive)

out=$("$AS" plan "${M[@]}" --microbatches 4 --schedule 1F1B -o "$TMP/p")
for k in "pipelined over pp" "schedule: 1F1B, 4 microbatches" "pipelined step time:" "lower bound:" \
         "layers.0" "+first" "+last" "intra-op solves:" "stage parameters gathered:"; do
  expect_contains "$out" "$k" "plan 1F1B"
done
pycheck "$TMP/p/placements.json" "
assert j['mesh_shape'] == [2, 2] and j['mesh_dim_names'] == ['pp', 'dp'], j['mesh_shape']
p = j['pipeline']
assert p['mesh_dim'] == 'pp' and p['schedule'] == '1F1B' and p['microbatches'] == 4, p
assert p['stages_per_rank'] == 1 and len(p['stages']) == 2, p
s0, s1 = p['stages']
assert s0['index'] == 0 and s0['pp_rank'] == 0 and s0['first'] and not s0['last'], s0
assert s1['pp_rank'] == 1 and s1['last'] and not s1['first'], s1
assert s0['layers'] + s1['layers'] == ['layers.0', 'layers.1', 'layers.2', 'layers.3'], p
pl = j['placements']
assert all('stage' in e for e in pl.values())
assert pl['tok_embeddings.weight']['stage'] == 0 and pl['output.weight']['stage'] == 1
assert pl['labels']['stage'] == 1 and pl['tokens']['stage'] == 0
assert pl['rope_cos']['stage'] == -1
first = {n for n, e in pl.items() if e['stage'] == 0}
assert all(('layers.%s.' % l[len('layers.'):]) and True for l in s0['layers'])
for l in s0['layers']:
    assert pl[l + '.attention.wq.weight']['stage'] == 0 and pl[l + '.attention.wq.weight.exp_avg']['stage'] == 0
for l in s1['layers']:
    assert pl[l + '.feed_forward.w2.weight']['stage'] == 1
# Two mesh dims per spec, R on pp.
for n, e in pl.items():
    outs = e['output'].strip('()').split(', ')
    for o in outs + e['inputs']:
        assert o.startswith('R'), (n, o)
"
pycheck "$TMP/p/plan.json" "
assert j['schedule'] == '1F1B' and len(j['stages']) == 2
# The step is the 1F1B timeline of the chosen stages; the bound (each rank's work with the
# fill ahead of it and the drain after it) leaves out the stall a rank meets waiting for its
# first backward, ~10 % here (docs/benchmarks.md, pipeline section).
assert j['lower_bound_us'] <= j['step_us'] * (1 + 1e-9) and 0 <= j['gap'] <= 0.15, (j['step_us'], j['lower_bound_us'])
assert abs(j['gap'] - (j['step_us'] - j['lower_bound_us']) / j['step_us']) < 1e-9
assert all(s['peak_memory_bytes'] > 0 and s['microbatch_us'] > 0 for s in j['stages'])
assert j['stages'][0]['inflight_microbatches'] == 2 and j['stages'][1]['inflight_microbatches'] == 1
"
ok "1F1B on 2 stages"

# Auto: the best of the schedules, with v for the interleaved one; same bytes twice.
"$AS" plan "${M[@]}" --microbatches 4 --json >"$TMP/auto.json"
"$AS" plan "${M[@]}" --microbatches 4 -o "$TMP/a1" >/dev/null
"$AS" plan "${M[@]}" --microbatches 4 -o "$TMP/a2" >/dev/null
cmp -s "$TMP/a1/placements.json" "$TMP/a2/placements.json" || fail "pipelined placements.json differs between runs"
pycheck "$TMP/auto.json" "
import json
one = json.load(open('$TMP/p/plan.json'))
assert j['step_us'] <= one['step_us'] * (1 + 1e-9), (j['step_us'], one['step_us'])
assert {c['schedule'] for c in j['candidates']} >= {'Interleaved1F1B', '1F1B'}, j['candidates']
"
"$AS" plan "${M[@]}" --microbatches 4 --schedule Interleaved1F1B --stages-per-rank 2 -o "$TMP/i" >/dev/null
pycheck "$TMP/i/placements.json" "
p = j['pipeline']
assert p['schedule'] == 'Interleaved1F1B' and p['stages_per_rank'] == 2 and len(p['stages']) == 4, p
assert [s['pp_rank'] for s in p['stages']] == [0, 1, 0, 1], p
"
ok "auto and Interleaved1F1B"

# Zero bubble: the V puts the last stage back on pp rank 0; the backward split into B and W.
"$AS" plan "${M[@]}" --microbatches 4 --schedule ZBVZeroBubble -o "$TMP/z" >/dev/null
pycheck "$TMP/z/placements.json" "
p = j['pipeline']
assert p['schedule'] == 'ZBVZeroBubble' and p['stages_per_rank'] == 2 and len(p['stages']) == 4, p
assert [s['pp_rank'] for s in p['stages']] == [0, 1, 1, 0], p
"
pycheck "$TMP/z/plan.json" "
s = j['stages']
assert all(x['part_us']['weight_grad'] > 0 and x['deferred_microbatches'] > 0 for x in s), s
assert s[0]['part_us']['input_grad'] == 0 and s[1]['part_us']['input_grad'] > 0, s  # the first sends no gradient
"
"$AS" plan "${M[@]}" --microbatches 4 --json >"$TMP/auto2.json"
pycheck "$TMP/auto2.json" "
assert {c['schedule'] for c in j['candidates']} >= {'InterleavedZeroBubble', 'ZBVZeroBubble'}, j['candidates']
"
expect_error "ZBVZeroBubble runs exactly 2 stages per rank (got 3)" -- \
  "$AS" plan "${M[@]}" --microbatches 4 --schedule ZBVZeroBubble --stages-per-rank 3
ok "ZBVZeroBubble"

# Bad inputs: one line, non-zero exit, nothing written.
expect_error "--microbatches: 3 does not divide the batch 8" -- "$AS" plan "${M[@]}" --microbatches 3 -o "$TMP/bad1"
[[ ! -e $TMP/bad1 ]] || fail "a failed plan wrote $TMP/bad1"
expect_error "pp size 8 exceeds the graph's 4 layers" -- "$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 \
  --mesh 8 --mesh-dims pp --microbatches 8
expect_error "needs the microbatches (3) to be a multiple of the pp size (2)" -- \
  "$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 6 --mesh 2x2 --mesh-dims pp,dp --microbatches 3 \
  --schedule Interleaved1F1B
expect_error "--schedule: unknown schedule 'zb'" -- "$AS" plan "${M[@]}" --schedule zb
expect_error "--param-gather: unknown value 'sometimes'" -- "$AS" plan "${M[@]}" --param-gather sometimes
expect_error "need a mesh dim named pp" -- "$AS" plan --model llama3-8b --layers 2 --mesh 2x2 --microbatches 2
python3 -c "import json,sys
j=json.load(open(sys.argv[1]))
for n in j['nodes']: n.pop('module', None)
json.dump(j, open(sys.argv[2], 'w'))" "$SRC/tests/fixtures/llama2l.graph.json" "$TMP/flat.json"
expect_error "pipeline stages need repeated layers" -- "$AS" plan --graph "$TMP/flat.json" --mesh 2x2 --mesh-dims pp,dp
ok "bad inputs"

# Progress: on a terminal (script(1) gives the command one) a status line on stderr, erased
# before the summary; none with --quiet, none when stderr is not a terminal.
if command -v script >/dev/null; then
  # stdout to a file, stderr left on the terminal, which script records in its typescript.
  script -qec "$AS plan ${M[*]} >$TMP/tty.out" "$TMP/tty.log" >/dev/null
  grep -q "stage solves [0-9]*/[0-9]*" "$TMP/tty.log" || fail "no progress line on a terminal: $(cat "$TMP/tty.log")"
  grep -q "pipelined step time" "$TMP/tty.out" || fail "no summary under script"
  script -qec "$AS plan ${M[*]} --quiet >/dev/null" "$TMP/quiet.log" >/dev/null
  ! grep -q "stage solves" "$TMP/quiet.log" || fail "--quiet drew progress: $(cat "$TMP/quiet.log")"
fi
"$AS" plan "${M[@]}" 2>"$TMP/pipe.err" >/dev/null
[ ! -s "$TMP/pipe.err" ] || fail "progress on a stderr that is not a terminal: $(cat "$TMP/pipe.err")"
ok "progress line"

# search --pp: meshes with a pipeline dim ranked beside the others, planned as `plan` plans
# them; with pruning (the default), a pipelined mesh whose bound cannot beat the best flat
# mesh is listed with that bound, and its bound is the one the full plan proves.  (The
# progress line and a pipelined winner: search_pipelined.sh, in the Release pass only.)
S=(search --model llama3-8b --layers 4 --seq 256 --batch 8 --gpus 4 --max-dims 2 --pp 2 --json)
"$AS" "${S[@]}" --no-prune >"$TMP/search.json"
"$AS" "${S[@]}" >"$TMP/search-pruned.json" 2>"$TMP/search.err"
[ ! -s "$TMP/search.err" ] || fail "search: progress on a stderr that is not a terminal: $(cat "$TMP/search.err")"
"$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2 --mesh-dims pp,dp --microbatches 2 \
  --json >"$TMP/search-plan.json"
pycheck "$TMP/search.json" "
p = j['pipelined_meshes']
assert p and p[0]['mesh'] == [2, 2] and p[0]['mesh_dims'][0] == 'pp' and p[0]['outcome'] == 'planned', p
assert p[0]['lower_bound_us'] <= p[0]['step_us'] * (1 + 1e-9), p[0]
pl = json.load(open('$TMP/search-plan.json'))
assert abs(pl['step_us'] - p[0]['step_us']) <= 1e-6 * p[0]['step_us'], (pl['step_us'], p[0])
q = json.load(open('$TMP/search-pruned.json'))
best = min(m['step_us'] for m in q['meshes'] if m['outcome'] == 'planned')
assert best < p[0]['lower_bound_us'], (best, p[0])
r = q['pipelined_meshes'][0]
assert r['outcome'] == 'pruned' and 'step_us' not in r and best <= r['lower_bound_us'] <= p[0]['step_us'], r
"
ok "search --pp"

# Pipeline stages with a cp dim: the stages' context-parallel attentions keep their
# "context_parallel" entry in placements.json, naming the cp dim of the full mesh.
"$AS" plan --model llama3-8b --layers 4 --batch 2 --seq 32768 --mesh 2x2 --mesh-dims pp,cp \
  --microbatches 2 -o "$TMP/ppcp" >/dev/null
pycheck "$TMP/ppcp/placements.json" "
cp = [e['context_parallel'] for e in j['placements'].values() if 'context_parallel' in e]
assert cp and all(c['mesh_dim'] == 'cp' for c in cp), cp
"
ok "pp with cp"

# The stage solves stop on their work limits; a --time-limit too short for them is said, with
# the count of solves it stopped (the plan may then differ elsewhere), and the default is not.
out=$("$AS" plan "${M[@]}" --microbatches 4 --schedule 1F1B)
[[ "$out" != *"stopped at --time-limit"* ]] || fail "the default limit stopped a stage solve: $out"
out=$("$AS" plan "${M[@]}" --microbatches 4 --schedule 1F1B --time-limit 0.000001)
expect_contains "$out" "of them stopped at --time-limit, not on their work limits" "a limit too short"
ok "stage solves stopped by the clock are reported"

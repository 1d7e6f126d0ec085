#!/usr/bin/env bash
# ctest-label: slow
# `autoshard plan`: the default job (llama3-8b on 2x8), --json, -o, --preload and determinism.
source "$(dirname "$0")/lib.bash" "$@"

strip_phases() {  # the JSON summary without the (timing-dependent) phase_seconds
  python3 -c 'import json,sys
j=json.load(open(sys.argv[1])); j.pop("phase_seconds")
print(json.dumps(j, indent=1, sort_keys=True))' "$1"
}

# Defaults: llama3-8b on a 2x8 H100 mesh (dp, tp), proven optimal, written to -o DIR.
"$AS" plan --json -o "$TMP/a" >"$TMP/a.json"
pycheck "$TMP/a.json" "
assert j['graph'] == 'llama3-8b', j['graph']
assert j['mesh']['shape'] == [2, 8] and j['mesh']['dim_names'] == ['dp', 'tp'], j['mesh']
assert j['mesh']['hardware'] == 'h100'
# The overlap-aware objective: proven bound, a gap stated (optimal when it closes).
assert j['status'] in ('optimal', 'feasible') and j['has_solution'] is True, j['status']
assert j['objective'] == 'overlap' and j['objective_solves'] >= 2, (j['objective'], j['objective_solves'])
for k in ('objective_us', 'lower_bound_us', 'gap', 'compute_us', 'comm_us', 'additive_us', 'overlapped_us'):
    assert isinstance(j[k], float) or isinstance(j[k], int), (k, j[k])
assert j['objective_us'] > 0 and 0 <= j['gap'] <= 0.05, (j['objective_us'], j['gap'])
assert abs(j['gap'] - (j['objective_us'] - j['lower_bound_us']) / j['objective_us']) <= 1e-9
assert abs(j['compute_us'] + j['comm_us'] - j['additive_us']) <= 1e-6 * j['additive_us']
assert abs(j['additive_us'] - j['overlapped_us'] - j['objective_us']) <= 1e-6 * j['additive_us']
assert j['overlapped_us'] > 0
assert 0 < j['peak_memory_bytes'] <= j['memory_limit_bytes'], (j['peak_memory_bytes'], j['memory_limit_bytes'])
assert j['checked'] is True
p = j['problem']
assert p['graph_nodes'] > 8000 and p['edges'] > 0, p
# One problem node per graph node but the output, plus the K/V buffer node of each of the 64
# attention ops that may run context parallel (planner/cp_memory.h).
assert p['nodes'] == p['graph_nodes'] - 1 + 64, p
assert 0 < p['clustered_nodes'] <= p['nodes'] and p['reduced_nodes'] <= p['clustered_nodes'], p
assert p['alpa_variables'] > 0 and p['layer_classes'] > 0, p
assert isinstance(j['phase_seconds'], dict) and j['phase_seconds'], j['phase_seconds']
assert all(v >= 0 for v in j['phase_seconds'].values())
assert len(j['parameters']) == 291, len(j['parameters'])
"
ok "defaults: optimal, json fields"

# placements.json in AutoParallel's save_placements schema.
P="$TMP/a/placements.json"
[[ -f $P ]] || fail "no $P"
[[ -z $(ls -A "$TMP/a" | grep -vxE 'placements.json|plan.json|plan.ap|report.html|trace.json' || true) ]] ||
  fail "stray files in -o dir: $(ls -A "$TMP/a")"
pycheck "$P" "
assert j['version'] == 1
assert j['mesh_shape'] == [2, 8] and j['mesh_dim_names'] == ['dp', 'tp']
pl = j['placements']
assert len(pl) > 8000, len(pl)
import re
item = r'(R|S\(\d+\)|P\(\w+\))'
spec = re.compile(item + '{2}$')
for name, e in pl.items():
    assert set(e) == {'output', 'inputs'}, (name, e)
    outs = e['output'][1:-1].split(', ') if e['output'].startswith('(') else [e['output']]
    assert all(spec.match(o) for o in outs), (name, e['output'])
    assert all(spec.match(s) for s in e['inputs']), (name, e['inputs'])
assert pl['tok_embeddings.weight']['inputs'] == []
assert any(e['output'].startswith('(') for e in pl.values()), 'no tuple outputs'
"
ok "placements.json schema"

# Determinism: the same run gives the same summary (but for timings) and the same bytes.
"$AS" plan --json -o "$TMP/b" >"$TMP/b.json"
cmp "$TMP/a/placements.json" "$TMP/b/placements.json" || fail "placements.json differs between runs"
diff <(strip_phases "$TMP/a.json") <(strip_phases "$TMP/b.json") >&2 || fail "--json differs between runs"
ok "deterministic"

# --preload of the saved placements reproduces the objective (and the placements).
"$AS" plan --preload "$P" --json -o "$TMP/c" >"$TMP/c.json" 2>"$TMP/c.err"
[[ ! -s $TMP/c.err ]] || { cat "$TMP/c.err" >&2; fail "--preload printed warnings"; }
python3 -c 'import json,sys
a=json.load(open(sys.argv[1])); c=json.load(open(sys.argv[2]))
assert c["status"] == a["status"], (a["status"], c["status"])
assert abs(a["objective_us"] - c["objective_us"]) <= 1e-9 * a["objective_us"], (a["objective_us"], c["objective_us"])' \
  "$TMP/a.json" "$TMP/c.json" || fail "--preload changed the objective"
cmp "$P" "$TMP/c/placements.json" || fail "--preload changed the placements"
ok "--preload reproduces the plan"

# The text summary of the same job.
out=$("$AS" plan --model llama3-8b --layers 2 --mesh 2x8)
for k in "autoshard plan: llama3-8b on mesh 2x8 (dp, tp) of h100 (16 devices)" "status: " \
         "estimated step time: " "overlap-aware" "lower bound: " "gap: " "peak memory per device: " \
         "time per phase:" "tok_embeddings.weight"; do
  expect_contains "$out" "$k" "plan text"
done
ok plan

# A plan cut short by its time limit still states a proven bound (the first dual solve of the
# overlap objective runs past the deadline: it is bounded by iterations).
"$AS" plan --model llama3-8b --layers 4 --mesh 2x8 --time-limit 0.001 --threads 1 --json >"$TMP/short.json"
pycheck "$TMP/short.json" "
import math
assert j['has_solution'] is True, j['status']
lb = j['lower_bound_us']
assert isinstance(lb, (int, float)) and math.isfinite(lb) and 0 < lb <= j['objective_us'], lb
assert 0 <= j['gap'] < 1, j['gap']
"
ok "a time-limited plan states its bound"

#!/usr/bin/env bash
# The saved-plan workflow end to end: plan -o DIR (plan.ap, placements.json, plan.json),
# plan --placements (evaluate without solving: the same objective, bit for bit), show,
# explain, pin (re-solve + diff), diff, export (--json bytes equal plan.json, --placements,
# --mps solved by Debian's cbc, --iopddl read by `autoshard iopddl`), and one-line errors.
source "$(dirname "$0")/lib.bash" "$@"

# A 2-layer MLP with a large batch on 2x2, untied (--no-cluster: the exported MPS is then
# exactly the problem the planner solved): small, solves in well under a second, and shards.
MODEL=(--model mlp --layers 2 --batch 8192 --mesh 2x2 --memory-limit 0 --no-cluster --objective additive)  # CBC checks the MPS export against the additive optimum

"$AS" plan "${MODEL[@]}" --json -o "$TMP/a" >"$TMP/a.json"
for f in plan.ap placements.json plan.json; do [[ -s $TMP/a/$f ]] || fail "plan -o lacks $f"; done
# Every output was renamed into place: no temporaries left behind.
extra=$(ls -A "$TMP/a" | grep -vxE 'plan.ap|placements.json|plan.json|report.html|trace.json' || true)
[[ -z $extra ]] || fail "unexpected files in the output dir: $extra"
ok "plan -o writes plan.ap, placements.json, plan.json"
pycheck "$TMP/a/placements.json" "
assert j['version'] == 1 and j['mesh_shape'] == [2, 2] and j['mesh_dim_names'] == ['dp', 'tp']
assert len(j['graph_fingerprint']) == 16 and j['autoshard_version']
assert any(not set(p['output']) <= set('R') for p in j['placements'].values()), 'nothing sharded'"
pycheck "$TMP/a/plan.json" "
s = j['summary']
assert s['status'] in ('optimal', 'feasible') and s['total'] == s['additive_us'] >= s['objective_us'] > 0, s
assert abs(s['compute'] + s['comm'] - s['total']) <= 1e-9 * s['total'], s
assert j['mesh']['shape'] == [2, 2] and len(j['nodes']) > 10
n = j['nodes'][0]
for k in ('name', 'op', 'phase', 'placement', 'compute_cost', 'transition_cost', 'inputs', 'dtype',
          'shape', 'module_path', 'cluster_id', 'cluster_root', 'memory_bytes'):
    assert k in n, k"

# Same inputs, same bytes.
"$AS" plan "${MODEL[@]}" -o "$TMP/a2" >/dev/null
cmp -s "$TMP/a/plan.json" "$TMP/a2/plan.json" || fail "plan.json differs between two runs"
cmp -s "$TMP/a/placements.json" "$TMP/a2/placements.json" || fail "placements.json differs between two runs"
ok "plan.json and placements.json are deterministic"

# Placements -> the same plan without a solve (JSON numbers are exact: bitwise equal).
"$AS" plan "${MODEL[@]}" --placements "$TMP/a/placements.json" --json >"$TMP/p.json"
python3 - "$TMP/a.json" "$TMP/p.json" <<'PY' || fail "placements did not give the same plan"
import json, sys
a, p = (json.load(open(f)) for f in sys.argv[1:3])
assert p['objective_us'] == a['objective_us'], (p['objective_us'], a['objective_us'])
assert p['compute_us'] == a['compute_us'] and p['comm_us'] == a['comm_us']
assert p['peak_memory_bytes'] == a['peak_memory_bytes']
assert not any(k.startswith('solve') for k in p['phase_seconds']), p['phase_seconds']
assert [x['placement'] for x in p['parameters']] == [x['placement'] for x in a['parameters']]
PY
ok "plan --placements gives the identical objective without solving"

out=$("$AS" show "$TMP/a/plan.ap")
expect_contains "$out" "estimated step time" "show"
expect_contains "$out" "status: optimal" "show"
"$AS" show --json "$TMP/a/plan.ap" >"$TMP/show.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); s=json.load(open(sys.argv[2]))
assert s['objective_us'] == a['objective_us']" "$TMP/a.json" "$TMP/show.json" || fail "show --json objective"
ok "show prints the plan's summary"

out=$("$AS" explain "$TMP/a/plan.ap" --node mm)
expect_contains "$out" "node mm (mm" "explain"
expect_contains "$out" "resharding cost" "explain"
expect_contains "$out" " * " "explain (chosen strategy marked)"
out=$("$AS" explain "$TMP/a/plan.ap" --node mm --placement RR)
expect_contains "$out" "why not RR for mm?" "explain --placement"
python3 - "$out" <<'PY' || fail "explain's cost difference is not pinned - optimum >= 0"
import re, sys
m = re.search(r"optimum ([0-9.]+) us; best plan with mm = RR: ([0-9.]+) us \(\+([0-9.]+) us", sys.argv[1])
assert m, sys.argv[1][:400]
opt, pinned, delta = map(float, m.groups())
assert delta >= 0 and abs(pinned - opt - delta) <= 2e-3, (opt, pinned, delta)
PY
ok "explain lists strategies and matrices; --placement gives pinned - optimum >= 0"

out=$("$AS" pin "$TMP/a/plan.ap" --node mm --placement RR -o "$TMP/b.ap")
expect_contains "$out" "objective:" "pin"
expect_contains "$out" "mm" "pin"
[[ -s $TMP/b.ap ]] || fail "pin wrote no state"
out=$("$AS" diff "$TMP/a/plan.ap" "$TMP/b.ap")
expect_contains "$out" "node placements changed" "diff"
expect_contains "$out" "mm " "diff"
out=$("$AS" diff "$TMP/a/plan.ap" "$TMP/a/plan.ap")
expect_contains "$out" "0 node placements changed" "diff of a plan with itself"
out=$("$AS" explain "$TMP/b.ap" --node mm)
expect_contains "$out" "RR" "explain of the pinned plan"
ok "pin re-solves and prints the diff; diff compares two states"

"$AS" export "$TMP/a/plan.ap" --json "$TMP/e.json" --placements "$TMP/e.placements.json" \
  --mps "$TMP/e.mps" --iopddl "$TMP/e.iopddl.json"
cmp -s "$TMP/e.json" "$TMP/a/plan.json" || fail "export --json differs from plan -o's plan.json"
cmp -s "$TMP/e.placements.json" "$TMP/a/placements.json" || fail "export --placements differs"
ok "export --json and --placements equal plan -o's files byte for byte"
out=$("$AS" iopddl "$TMP/e.iopddl.json" 5 | tail -1)
[[ $out == \[*\] && $out != "[]" ]] || fail "autoshard iopddl found no solution of the export: $out"
ok "export --iopddl is readable by autoshard iopddl"
if command -v cbc >/dev/null 2>&1; then
  (cd "$TMP" && cbc e.mps solve solu cbc.txt >/dev/null 2>&1) || fail "cbc failed on the MPS export"
  python3 - "$TMP/cbc.txt" "$TMP/a.json" <<'PY' || fail "CBC's optimum differs from the plan's"
import json, sys
first = open(sys.argv[1]).readline()
assert first.startswith('Optimal'), first
cbc = float(first.split('objective value')[1])
ours = json.load(open(sys.argv[2]))['objective_us']
assert abs(cbc - ours) <= 1e-6 * ours, (cbc, ours)
PY
  ok "cbc solves the MPS export to our optimum"
  # A 1-layer LLaMA on 2 devices (375 problem nodes, attention, norms, embeddings): same check.
  "$AS" plan --model llama3-1b --layers 1 --batch 2 --seq 128 --mesh 2 --memory-limit 0 --no-cluster --objective additive \
    -o "$TMP/ll" --json >"$TMP/ll.json"
  "$AS" export "$TMP/ll/plan.ap" --mps "$TMP/ll.mps"
  (cd "$TMP" && cbc ll.mps solve solu ll.txt >/dev/null 2>&1) || fail "cbc failed on the llama MPS export"
  python3 - "$TMP/ll.txt" "$TMP/ll.json" <<'PY' || fail "CBC's optimum differs from the llama plan's"
import json, sys
first = open(sys.argv[1]).readline()
assert first.startswith('Optimal'), first
cbc = float(first.split('objective value')[1])
j = json.load(open(sys.argv[2]))
assert j['status'] == 'optimal', j['status']
assert abs(cbc - j['objective_us']) <= 1e-6 * j['objective_us'], (cbc, j['objective_us'])
PY
  ok "cbc solves a 1-layer LLaMA's MPS export to our optimum"
else
  echo "skip: Debian's cbc (coinor-cbc) is not installed: MPS cross-check skipped"
fi

# Errors: one line, naming the file and the node.
python3 - "$TMP/a/placements.json" "$TMP" <<'PY'
import json, sys, copy
j = json.load(open(sys.argv[1])); d = sys.argv[2]
w = copy.deepcopy(j); w['mesh_shape'] = [4, 1]; json.dump(w, open(d + '/wrong_mesh.json', 'w'))
u = copy.deepcopy(j); u['placements']['ghost'] = u['placements']['mm']; json.dump(u, open(d + '/unknown.json', 'w'))
s = copy.deepcopy(j); s['placements']['mm']['inputs'] = ['S(0)S(0)', 'S(0)S(0)']; json.dump(s, open(d + '/unmatched.json', 'w'))
PY
expect_error "wrong_mesh.json: /mesh_shape" -- "$AS" plan "${MODEL[@]}" --placements "$TMP/wrong_mesh.json"
expect_error "/placements/ghost: no such node" -- "$AS" plan "${MODEL[@]}" --placements "$TMP/unknown.json"
expect_error "/placements/mm: output" -- "$AS" plan "${MODEL[@]}" --placements "$TMP/unmatched.json"
expect_error "no node named 'ghost'" -- "$AS" explain "$TMP/a/plan.ap" --node ghost
expect_error "--placement" -- "$AS" pin "$TMP/a/plan.ap" --node mm --placement 'Q(1)' -o "$TMP/c.ap"
expect_error "nothing to write" -- "$AS" export "$TMP/a/plan.ap"
expect_error "missing.ap" -- "$AS" show "$TMP/missing.ap"
[[ ! -e $TMP/c.ap ]] || fail "a failed pin wrote its output"
ok "bad inputs give one-line errors"

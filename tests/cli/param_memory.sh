#!/usr/bin/env bash
# `autoshard plan --param-memory`: AutoParallel's parameter-memory constraint from the CLI.  A
# bound no layout can reach (a bias of 10 elements cannot be split 8 ways) is `infeasible` at
# once, with the least reachable share as a `to fit, ...` line (issue 40, item 5); the advised
# bound plans; malformed values are one-line errors.
source "$(dirname "$0")/lib.bash" "$@"

# x [16, 64] -> x @ w^T + b, w [BIAS, 64], b [BIAS] -> sum: the forward of one linear layer.
graph() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
bias, path = int(sys.argv[1]), sys.argv[2]
t = lambda *s: [{"shape": list(s), "dtype": "f32"}]
nodes = [
    {"name": "x", "kind": "input", "outputs": t(16, 64)},
    {"name": "w", "kind": "parameter", "outputs": t(bias, 64), "module": "fc"},
    {"name": "b", "kind": "parameter", "outputs": t(bias), "module": "fc"},
    {"name": "wt", "kind": "op", "op": "t", "inputs": ["w"], "outputs": t(64, bias)},
    {"name": "y", "kind": "op", "op": "addmm", "inputs": ["b", "x", "wt"], "outputs": t(16, bias)},
    {"name": "loss", "kind": "op", "op": "sum", "inputs": ["y"], "outputs": t()},
]
json.dump({"format": "autoshard-graph", "version": 1, "name": f"linear{bias}", "nodes": nodes},
          open(path, "w"))
EOF
}
graph 10 "$TMP/l10.json"
graph 16 "$TMP/l16.json"
P=(plan --mesh 8 --mesh-dims dp --objective additive --time-limit 10)

# Out of reach at 1/8 with even shards: w [10, 64] splits 8 ways on its 64 (80 of its 640
# elements per device), the bias not at all (10): (80 + 10) / 650 = 13.85 % per device.
rc=0
"$AS" "${P[@]}" --graph "$TMP/l10.json" --require-divisible --param-memory 1/8 \
  >"$TMP/inf.out" 2>"$TMP/inf.err" || rc=$?
[[ $rc -eq 1 ]] || { cat "$TMP/inf.out" "$TMP/inf.err" >&2; fail "expected exit 1, got $rc"; }
out=$(cat "$TMP/inf.out")
expect_contains "$out" "status: infeasible"
expect_contains "$out" "warning: constraint 'parameter_memory': at most 12.50 % of the parameter bytes per device is out of reach: every layout holds at least 13.85 %"
expect_contains "$out" "to fit, parameter memory: allow at least 13.85 % (--param-memory 0.1385, add_parameter_memory_constraint(high=0.1385))"
[[ $(cat "$TMP/inf.err") == "autoshard: error: no plan found (infeasible): constraint 'parameter_memory': at most 12.50 %"* ]] \
  || fail "unexpected error line: $(cat "$TMP/inf.err")"
ok "--param-memory 1/8 on a 10-element bias: infeasible, least share 13.85 %"

# The same as JSON: the status, the advice as fit_suggestions, and no search (build only).
"$AS" "${P[@]}" --graph "$TMP/l10.json" --require-divisible --param-memory 0.125 --json \
  >"$TMP/inf.json" 2>/dev/null && fail "an infeasible plan exited 0"
pycheck "$TMP/inf.json" "
assert j['status'] == 'infeasible', j['status']
assert j['fit_suggestions'] == ['parameter memory: allow at least 13.85 % (--param-memory 0.1385, add_parameter_memory_constraint(high=0.1385))'], j['fit_suggestions']
assert list(j['phase_seconds']) == ['build'], j['phase_seconds']  # answered before any solve
"
ok "--json: status infeasible, fit_suggestions"

# Without --require-divisible the bias's shards are uneven (torch.chunk: 2 elements on the
# first five ranks): 2 of 10 elements is no better than 1/8 either.
rc=0
"$AS" "${P[@]}" --graph "$TMP/l10.json" --param-memory 1/8 >"$TMP/unev.out" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$TMP/unev.out" >&2; fail "uneven shards: expected exit 1, got $rc"; }
expect_contains "$(cat "$TMP/unev.out")" "status: infeasible"
expect_contains "$(cat "$TMP/unev.out")" "to fit, parameter memory: allow at least"
ok "--param-memory 1/8 with uneven shards allowed: infeasible with advice"

# The advised bound plans, and it is met.
"$AS" "${P[@]}" --graph "$TMP/l10.json" --require-divisible --param-memory 0.1385 --json \
  >"$TMP/fit.json"
pycheck "$TMP/fit.json" "
assert j['status'] in ('optimal', 'feasible'), j['status']
ps = {p['name']: p['placement'] for p in j['parameters']}
assert ps == {'w': 'S(1)', 'b': 'R'}, ps
"
ok "--param-memory 0.1385 (the advice) plans: w S(1), b R"

# A bias of 16 splits 8 ways: 1/8 is reached exactly, every parameter sharded.
"$AS" "${P[@]}" --graph "$TMP/l16.json" --require-divisible --param-memory 0,1/8 --json \
  >"$TMP/even.json"
pycheck "$TMP/even.json" "
assert j['status'] in ('optimal', 'feasible'), j['status']
assert all(p['placement'].startswith('S(') for p in j['parameters']), j['parameters']
"
ok "--param-memory 0,1/8 on a 16-element bias: every parameter sharded"

# A pin counts: the 16-element bias pinned replicated puts 1/8 out of reach, (128 + 16) / 1040.
"$AS" "${P[@]}" --graph "$TMP/l16.json" --param-memory 1/8 --pin b=R >"$TMP/pin.out" 2>&1 \
  && fail "a pinned replicated bias met 1/8"
expect_contains "$(cat "$TMP/pin.out")" "to fit, parameter memory: allow at least 13.85 %"
ok "--pin b=R under --param-memory 1/8: infeasible"

for bad in x 1/0 -1 0.5,0.25 1/8,; do
  expect_error "--param-memory '$bad'" -- "$AS" "${P[@]}" --graph "$TMP/l16.json" --param-memory "$bad"
done

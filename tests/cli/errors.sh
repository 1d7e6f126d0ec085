#!/usr/bin/env bash
# Bad input: one line on stderr starting "autoshard: error:", naming the file and place, a
# non-zero exit, and no (half-written) output left behind.
source "$(dirname "$0")/lib.bash" "$@"

FIX="$SRC/tests/fixtures/llama2l.graph.json"
G=(--model gpt2 --layers 1)
SMALL=("${G[@]}" --mesh 2x2)

# Malformed graph JSON: a truncated file.
head -c 3000 "$FIX" >"$TMP/trunc.graph.json"
expect_error "trunc.graph.json: malformed JSON at line 24" -- "$AS" plan --graph "$TMP/trunc.graph.json" -o "$TMP/o1"
[[ ! -e $TMP/o1 ]] || fail "output directory created for a bad graph"
expect_error "trunc.graph.json: malformed JSON" -- "$AS" graph --graph "$TMP/trunc.graph.json"
: >"$TMP/empty.graph.json"
expect_error "empty.graph.json: malformed JSON at line 1" -- "$AS" graph --graph "$TMP/empty.graph.json"
expect_error "missing.graph.json: cannot open file" -- "$AS" graph --graph "$TMP/missing.graph.json"
# Structurally wrong graph: the JSON pointer and node are named.
python3 - "$FIX" "$TMP/badref.graph.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
k = next(i for i, n in enumerate(g["nodes"]) if n["kind"] == "op")
g["nodes"][k]["inputs"][0] = "no_such_tensor"
json.dump(g, open(sys.argv[2], "w"))
PY
expect_error "badref.graph.json: /nodes/" -- "$AS" plan --graph "$TMP/badref.graph.json"
grep -q "refers to unknown node 'no_such_tensor'" "$TMP/err.err" || fail "bad reference not named"

# Unknown model, dtype, hardware, comm model, memory size.
expect_error "unknown model 'nope'" -- "$AS" plan --model nope
expect_error "unknown model 'nope'" -- "$AS" graph --model nope
expect_error "--dtype: unknown dtype 'fp64'" -- "$AS" graph --model gpt2 --dtype fp64
expect_error "--dtype: unknown dtype 'fp64'" -- "$AS" cost --shape 8,8 --from R --to R --dtype fp64
expect_error "--hardware: unknown preset 'tpu9'" -- "$AS" plan "${SMALL[@]}" --hardware tpu9
expect_error "missing-hw.json: cannot open file" -- "$AS" plan "${SMALL[@]}" --hardware "$TMP/missing-hw.json"
printf '{"name": ' >"$TMP/hw.json"
expect_error "hw.json" -- "$AS" plan "${SMALL[@]}" --hardware "$TMP/hw.json"
expect_error "--float8: hardware 'a100' has no FP8 tensor cores" -- "$AS" plan "${SMALL[@]}" --hardware a100 --float8
expect_error "--comm-model" -- "$AS" plan "${SMALL[@]}" --comm-model magic
expect_error "--memory-limit: '10XB'" -- "$AS" plan "${SMALL[@]}" --memory-limit 10XB
expect_error "--memory-limit: 'lots'" -- "$AS" plan "${SMALL[@]}" --memory-limit lots

# Impossible meshes.
expect_error "--mesh: " -- "$AS" plan "${G[@]}" --mesh 0x8
expect_error "--mesh: " -- "$AS" plan "${G[@]}" --mesh 2xx8
expect_error "--mesh: " -- "$AS" cost --mesh -4 --shape 8,8 --from R --to R
expect_error "--mesh-dims: 1 names for a 2-D mesh '2x8'" -- "$AS" plan "${G[@]}" --mesh 2x8 --mesh-dims dp
expect_error "--mesh-dims: " -- "$AS" plan "${G[@]}" --mesh 2x8 --mesh-dims dp,dp

# Usage errors from the option parser have the same one-line form.
expect_error "--mesh" -- "$AS" plan "${SMALL[@]}" --mesh 4
expect_error "--no-such-option" -- "$AS" plan --no-such-option
expect_error "--shape" -- "$AS" cost --from R --to R
expect_error "frobnicate" -- "$AS" frobnicate

# Invalid placement strings.
expect_error "--from 'S(x)'" -- "$AS" cost --mesh 8 --shape 8,8 --from 'S(x)' --to R
expect_error "--to 'Q'" -- "$AS" cost --mesh 8 --shape 8,8 --from R --to Q
expect_error "--from 'S(0)R': 2 placements for a 1-D mesh" -- "$AS" cost --mesh 8 --shape 8,8 --from 'S(0)R' --to R
expect_error "--from 'S(2)': cannot shard shape" -- "$AS" cost --mesh 8 --shape 8,8 --from 'S(2)' --to R
expect_error "--pin 'S(0)Q'" -- "$AS" plan "${SMALL[@]}" --pin 'mm=S(0)Q'
expect_error "--pin 'mm': expected NODE=PLACEMENTS" -- "$AS" plan "${SMALL[@]}" --pin mm
expect_error "--shape" -- "$AS" cost --mesh 8 --shape 8,x --from R --to R

# Placements JSON for --preload: made by a good plan, then broken in several ways.
"$AS" plan "${SMALL[@]}" -o "$TMP/good" >/dev/null
P="$TMP/good/placements.json"
mutate() {  # mutate OUT 'python statements over j'
  python3 -c "import json,sys
j=json.load(open(sys.argv[1]))
$2
json.dump(j, open(sys.argv[3], 'w'))" "$P" "$2" "$1"
}
mutate "$TMP/mesh.json" "j['mesh_shape'] = [4, 1]"
expect_error "mesh.json: /mesh_shape: saved for mesh 4x1" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/mesh.json" -o "$TMP/o2"
[[ ! -e $TMP/o2 ]] || fail "output written despite a bad --preload"
mutate "$TMP/names.json" "j['mesh_dim_names'] = ['a', 'b']"
expect_error "names.json: /mesh_dim_names" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/names.json"
mutate "$TMP/node.json" "j['placements']['ghost'] = {'output': 'RR', 'inputs': []}"
expect_error "node.json: /placements/ghost: no such node" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/node.json"
mutate "$TMP/place.json" "n = next(k for k, e in j['placements'].items() if e['inputs']); j['placements'][n]['inputs'][0] = 'S(zero)R'"
expect_error "/inputs/0: placement 'S(zero)R'" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/place.json"
mutate "$TMP/arity.json" "n = next(k for k, e in j['placements'].items() if e['inputs']); j['placements'][n]['inputs'].append('RR')"
expect_error "input specs" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/arity.json"
mutate "$TMP/ver.json" "j['version'] = 7"
expect_error "ver.json: /version" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/ver.json"
head -c 200 "$P" >"$TMP/cut.json"
expect_error "cut.json: malformed JSON at line" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/cut.json"
expect_error "nothing.json: cannot open file" -- "$AS" plan "${SMALL[@]}" --preload "$TMP/nothing.json"
# A valid entry that no strategy matches is a warning (and the plan still succeeds).
mutate "$TMP/odd.json" "n = next(k for k, e in j['placements'].items() if e['inputs']); j['placements'][n]['inputs'][0] = 'P(max)P(max)'"
"$AS" plan "${SMALL[@]}" --preload "$TMP/odd.json" >/dev/null 2>"$TMP/odd.err"
grep -q "^autoshard: warning: .*odd.json: 1 saved placements match no strategy" "$TMP/odd.err" \
  || { cat "$TMP/odd.err" >&2; fail "no warning for an unmatched entry"; }
ok "--preload errors"

# Unwritable -o: a regular file where the directory should be, or below one.  Checked before
# the solve, and nothing is created.
: >"$TMP/file"
expect_error "file: cannot write output: not a directory" -- "$AS" plan "${SMALL[@]}" -o "$TMP/file"
expect_error "cannot write output" -- "$AS" plan "${SMALL[@]}" -o "$TMP/file/sub"
mkdir -p "$TMP/clash/placements.json"
expect_error "placements.json is a directory" -- "$AS" plan "${SMALL[@]}" -o "$TMP/clash"
if [[ $(id -u) -ne 0 ]]; then
  mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
  expect_error "ro/sub: cannot write output" -- "$AS" plan "${SMALL[@]}" -o "$TMP/ro/sub"
  [[ ! -e $TMP/ro/sub ]] || fail "created $TMP/ro/sub"
  chmod 755 "$TMP/ro"
fi
# An existing placements.json is replaced whole, and no temporary file is left.
"$AS" plan "${SMALL[@]}" -o "$TMP/good" >/dev/null
[[ -z $(ls -A "$TMP/good" | grep -vxE 'placements.json|plan.json|plan.ap|report.html|trace.json' || true) ]] ||
  fail "stray files: $(ls -A "$TMP/good")"

# Bad numbers for solver options.
expect_error "--threads" -- "$AS" plan "${SMALL[@]}" --threads 0
expect_error "--time-limit" -- "$AS" plan "${SMALL[@]}" --time-limit -1
ok errors

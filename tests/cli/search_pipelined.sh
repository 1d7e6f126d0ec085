#!/usr/bin/env bash
# ctest-label: slow
# `autoshard search --pp` end to end, beside pipeline.sh's quick case: the progress line on a
# terminal, and a pipelined mesh that wins (several whole searches: the Release pass only).
source "$(dirname "$0")/lib.bash" "$@"

S=(search --model llama3-8b --layers 4 --seq 256 --batch 8 --gpus 4 --max-dims 2 --pp 2 --json)
if command -v script >/dev/null; then
  # On a terminal: the flat meshes' count, then the pipelined mesh's stage solves.
  script -qec "$AS ${S[*]} --no-prune >/dev/null" "$TMP/search-tty.log" >/dev/null
  grep -q "meshes 2/2" "$TMP/search-tty.log" || fail "search: no mesh count on a terminal: $(cat "$TMP/search-tty.log")"
  grep -q "stage solves [0-9]*/[0-9]*, mesh 2x2 (1/1)" "$TMP/search-tty.log" \
    || fail "search: no pipelined progress on a terminal: $(cat "$TMP/search-tty.log")"
  script -qec "$AS ${S[*]} --quiet >/dev/null" "$TMP/search-quiet.log" >/dev/null
  ! grep -q "meshes" "$TMP/search-quiet.log" || fail "search --quiet drew progress: $(cat "$TMP/search-quiet.log")"
fi
ok "search progress line"

# Over gloo the pipelined 2x2 wins: the best line, the JSON's best and -o name it, and -o
# writes its pipelined plan, the one `plan` makes on that mesh.
G=(search --model llama3-8b --layers 4 --seq 256 --batch 8 --gpus 4 --max-dims 2 --pp 2,4 --backend gloo)
"$AS" "${G[@]}" --json -o "$TMP/search-pp" >"$TMP/search-gloo.json"
"$AS" plan --model llama3-8b --layers 4 --seq 256 --batch 8 --mesh 2x2 --mesh-dims pp,dp --microbatches 2 \
  --backend gloo --json >"$TMP/search-gloo-plan.json"
pycheck "$TMP/search-gloo.json" "
b = j['best']
assert b['pipelined'] and b['mesh'] == [2, 2] and b['mesh_dims'] == ['pp', 'dp'], b
assert b['step_us'] < min(m['step_us'] for m in j['meshes'] if m['outcome'] == 'planned'), j
pl = json.load(open('$TMP/search-gloo-plan.json'))
assert abs(pl['step_us'] - b['step_us']) <= 1e-6 * b['step_us'], (pl['step_us'], b)
saved = json.load(open('$TMP/search-pp/placements.json'))
assert saved['mesh_shape'] == [2, 2] and 'pipeline' in saved, sorted(saved)
"
out=$("$AS" "${G[@]}")
expect_contains "$out" "best: mesh 2x2 (pp=2 within, dp=2 within), pipelined" "search --pp best line"
ok "search: a pipelined winner"

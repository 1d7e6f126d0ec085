#!/usr/bin/env bash
# `autoshard graph`: the summary of every built-in model, as text and as JSON.
source "$(dirname "$0")/lib.bash" "$@"

# Published parameter counts (Meta's model cards; GPT-2 small with tied embeddings).
declare -A PARAMS=([llama3-8b]=8030261248 [llama3-70b]=70553706496 [llama3-405b]=405853388800 [gpt2]=124439808)

# Every built-in model, as listed by the error for an unknown one.
models=$("$AS" graph --model '?' 2>&1 | sed -n 's/.*(known: \(.*\))$/\1/p' | tr -d ',' || true)
[[ -n $models ]] || fail "could not list the built-in models"
for m in gpt2 llama3-8b llama3-70b llama3-405b mlp; do [[ " $models " == *" $m "* ]] || fail "model $m missing: $models"; done
for m in $models; do
  out=$("$AS" graph --model "$m")
  expect_contains "$out" "graph $m:" "graph $m"
  for k in "ops per phase:" forward backward optimizer "parameters: " "FLOPs per step: " "op histogram" \
           parameter input output mm; do
    expect_contains "$out" "$k" "graph $m"
  done
  "$AS" graph --model "$m" --json >"$TMP/$m.json"
  pycheck "$TMP/$m.json" "
assert j['name'] == '$m', j['name']
assert j['nodes'] == sum(j['nodes_per_kind'].values()), 'nodes per kind do not add up'
assert j['nodes_per_kind']['op'] == sum(j['ops_per_phase'].values()), 'ops per phase do not add up'
assert j['nodes_per_kind']['op'] == sum(j['op_histogram'].values()), 'op histogram does not add up'
assert set(j['ops_per_phase']) == {'forward', 'backward', 'optimizer'}, j['ops_per_phase']
assert j['op_histogram'].get('mm', 0) + j['op_histogram'].get('addmm', 0) > 0
assert j['parameters'] > 0 and j['flops_per_step'] > 0
"
  # Text and JSON agree.
  p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters"])' "$TMP/$m.json")
  expect_contains "$out" "parameters: $p " "graph $m"
  if [[ -n ${PARAMS[$m]:-} ]]; then
    [[ $p == "${PARAMS[$m]}" ]] || fail "$m has $p parameters, expected ${PARAMS[$m]}"
  fi
  ok "graph $m ($p parameters)"
done

# llama3-8b: the exact figures.
out=$("$AS" graph --model llama3-8b)
expect_contains "$out" "parameters: 8030261248 (8.030 B)"
"$AS" graph --model llama3-8b --json >"$TMP/l8.json"
# Training FLOPs of a dense transformer are about 6 * params * tokens (plus attention):
# between 6 and 8 times params * tokens for the default batch and sequence.
pycheck "$TMP/l8.json" "
r = j['flops_per_step'] / (6 * j['parameters'])
assert 1000 < r, r   # at least a thousand tokens per step
"

# Options of the built-in models change the graph.
small=$("$AS" graph --model llama3-8b --layers 2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["nodes"])')
big=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"])' "$TMP/l8.json")
(( small < big )) || fail "--layers 2 did not shrink the graph ($small vs $big)"

# A graph file works like a model.
out=$("$AS" graph --graph "$SRC/tests/fixtures/llama2l.graph.json")
expect_contains "$out" "graph llama2l:"
ok graph

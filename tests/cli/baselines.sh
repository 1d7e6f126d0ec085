#!/usr/bin/env bash
# ctest-label: slow
# Baselines and mesh search from the command line: plan --algo, plan --compare (text and JSON),
# autoshard search (ranking, -o), and the one-line reasons and errors.
source "$(dirname "$0")/lib.bash" "$@"

M=(--model llama3-8b --layers 2 --batch 8 --seq 256 --mesh 2x4 --mesh-dims dp,tp)

# --compare --json: one row per recipe; the optimum is never worse than an applicable recipe.
"$AS" plan "${M[@]}" --compare --json >"$TMP/cmp.json"
pycheck "$TMP/cmp.json" '
rows = {r["recipe"]: r for r in j["recipes"]}
assert list(rows) == ["alpa", "ddp", "fsdp", "megatron", "fsdp+tp", "hsdp"], list(rows)
best = rows["alpa"]["step_us"]
for name, r in rows.items():
    assert r["applicable"] and r["has_solution"], (name, r)
    assert best <= r["step_us"] * (1 + 1e-9), (name, best, r["step_us"])
    assert r["simulated_step_us"] > 0 and r["fits"] is True, (name, r)
    assert abs(r["compute_us"] + r["comm_us"] - r["additive_us"]) <= 1e-6 * r["additive_us"], name
    assert r["objective"] == "overlap" and r["step_us"] <= r["additive_us"] * (1 + 1e-9), name
    if name != "alpa":
        assert abs(r["optimum_saving"] - (r["step_us"] - best) / r["step_us"]) < 1e-9, name
'
ok "--compare --json"

# The text table has the same rows and the saving column.
out=$("$AS" plan "${M[@]}" --compare)
for r in alpa ddp fsdp megatron fsdp+tp hsdp; do expect_contains "$out" "$r " "--compare"; done
expect_contains "$out" "optimum saves" "--compare"
ok "--compare table"

# --algo: the recipe's placements, and a step time equal to its --compare row.
"$AS" plan "${M[@]}" --algo megatron --json -o "$TMP/meg" >"$TMP/meg.json"
pycheck "$TMP/meg.json" '
p = {x["name"]: x["placement"] for x in j["parameters"]}
assert p["layers.0.attention.wq.weight"] == "RS(0)", p["layers.0.attention.wq.weight"]
assert p["layers.1.feed_forward.w2.weight"] == "RS(1)", p["layers.1.feed_forward.w2.weight"]
assert p["layers.0.attention_norm.weight"] == "RR"
'
python3 -c 'import json,sys
a=json.load(open(sys.argv[1]))["objective_us"]
b=[r for r in json.load(open(sys.argv[2]))["recipes"] if r["recipe"]=="megatron"][0]["step_us"]
assert abs(a-b) <= 1e-9*b, (a, b)' "$TMP/meg.json" "$TMP/cmp.json" || fail "--algo megatron differs from --compare"
[[ -s "$TMP/meg/placements.json" ]] || fail "--algo -o wrote no placements"
"$AS" plan "${M[@]}" --algo ddp --json >"$TMP/ddp.json"
pycheck "$TMP/ddp.json" 'assert all(x["placement"] == "RR" for x in j["parameters"])'
ok "--algo megatron / ddp"

# Recipes that do not apply say why, in one line; unknown recipes are errors.
expect_error "hsdp needs a mesh of at least 2 dims" -- \
  "$AS" plan --model llama3-8b --layers 1 --batch 8 --seq 128 --mesh 4 --algo hsdp
expect_error "needs a tensor-parallel mesh dim named tp" -- \
  "$AS" plan --model llama3-8b --layers 1 --batch 8 --seq 128 --mesh 2x2 --mesh-dims a,b --algo megatron
expect_error "--algo: unknown recipe 'pp'" -- "$AS" plan "${M[@]}" --algo pp
out=$("$AS" plan --model llama3-8b --layers 1 --batch 8 --seq 128 --mesh 4 --compare)
expect_contains "$out" "hsdp      not applicable: hsdp needs a mesh of at least 2 dims" "--compare 1-D"
ok "not applicable"

# search: tp inside a node beats tp across nodes; -o writes the best plan.
"$AS" search --model llama3-8b --layers 1 --batch 2 --seq 1024 --gpus 16 --max-dims 2 \
  --memory-limit 0 --json -o "$TMP/search" >"$TMP/search.json"
pycheck "$TMP/search.json" '
rows = j["meshes"]
shapes = [tuple(r["mesh"]) for r in rows]
assert shapes[0] == (2, 8), shapes
assert rows[0]["inter_node"] == [True, False]
assert rows[0]["outcome"] == "planned"
assert 0 < rows[0]["step_lower_bound_us"] <= rows[0]["step_us"] * (1 + 1e-9), rows[0]
if rows[shapes.index((8, 2))]["outcome"] == "planned":
    assert rows[shapes.index((8, 2))]["step_us"] > rows[0]["step_us"]
assert j["candidates"] == 4
'
pycheck "$TMP/search/placements.json" 'assert j["mesh_shape"] == [2, 8], j["mesh_shape"]'
[[ -s "$TMP/search/plan.json" ]] || fail "search -o wrote no plan.json"
out=$("$AS" search --model llama3-8b --layers 1 --batch 2 --seq 1024 --gpus 16 --max-dims 2 --memory-limit 0)
expect_contains "$out" "best: mesh 2x8" "search"
expect_contains "$out" "step time       bound" "search: each plan's bound beside its step"
expect_error "--gpus: expected >= 1" -- "$AS" search --model gpt2 --gpus 0
ok "search"

# Op coverage (torch 2.13 traces): graph lists no op without a rule, and plan warns about none.
for f in "$SRC"/tests/fixtures/coverage/*.graph.json; do
  out=$("$AS" graph --graph "$f")
  expect_contains "$out" "ops without a sharding rule: none" "graph $(basename "$f")"
  "$AS" plan --graph "$f" --mesh 2x2 --json >"$TMP/cov.json" 2>"$TMP/cov.err"
  ! grep -q "no sharding rule" "$TMP/cov.err" || fail "fallback planning $(basename "$f"): $(cat "$TMP/cov.err")"
  pycheck "$TMP/cov.json" 'assert j["has_solution"] and not [w for w in j["warnings"] if "no sharding rule" in w]'
done
"$AS" graph --graph "$SRC/tests/fixtures/coverage/moe_tiny.graph.json" --json >"$TMP/g.json"
pycheck "$TMP/g.json" 'assert j["ops_without_rule"] == {} and "topk" in j["op_histogram"]'
ok "op coverage"

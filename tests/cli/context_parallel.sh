#!/usr/bin/env bash
# ctest-label: slow
# Context parallelism from the command line (issue 25): on a long sequence `plan --mesh-dims
# cp,tp` splits attention's sequence over cp (ring or all-gather attention), placements.json
# carries the "context_parallel" key of docs/pipeline-format.md (read back by --placements and
# --preload), bad keys are one-line errors, --compare gains cp+fsdp and search reports +CP.
source "$(dirname "$0")/lib.bash" "$@"

L=(--model llama3-8b --layers 2 --batch 1 --seq 32768)
M=("${L[@]}" --mesh 2x4 --mesh-dims cp,tp)

out=$("$AS" plan "${M[@]}" -o "$TMP/long")
expect_contains "$out" "context parallelism: cp: " "plan"
expect_contains "$out" "attention, load-balanced (4 attention ops)" "plan"
pycheck "$TMP/long/placements.json" '
pl = j["placements"]
cp = {k: v for k, v in pl.items() if "context_parallel" in v}
assert sorted(cp) == ["_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_1",
                      "_scaled_dot_product_efficient_attention_backward",
                      "_scaled_dot_product_efficient_attention_backward_1"], sorted(cp)
for k, v in cp.items():
    c = v["context_parallel"]
    assert c["mesh_dim"] == "cp" and c["kind"] in ("ring", "allgather") and c["load_balance"] is True, c
    assert v["inputs"][:3] == ["S(2)S(1)"] * 3 if "backward" not in k else v["inputs"][1:4] == ["S(2)S(1)"] * 3, v
f = pl["_scaled_dot_product_efficient_attention"]
assert f["output"] == "(S(2)S(1), S(2)S(1), RR, RR)", f
'
pycheck "$TMP/long/plan.json" '
cp = [n for n in j["nodes"] if "context_parallel" in n]
assert len(cp) == 4 and all(n["context_parallel"]["mesh_dim"] == "cp" for n in cp), cp
assert all(" | cp:" in n["strategy"] for n in cp), [n["strategy"] for n in cp]
'
ok "long sequence: attention context parallel over cp"

# --placements evaluates the saved plan to the same step time; --preload starts from it.
"$AS" plan "${M[@]}" --json >"$TMP/long.json"
pycheck "$TMP/long.json" '
u = j["context_parallel"]
assert len(u) == 1 and u[0]["mesh_dim"] == "cp" and u[0]["attention_ops"] == 4 and u[0]["load_balance"], u
'
"$AS" plan "${M[@]}" --placements "$TMP/long/placements.json" --json >"$TMP/eval.json"
python3 -c 'import json,sys
a=json.load(open(sys.argv[1]))["objective_us"]; b=json.load(open(sys.argv[2]))["objective_us"]
assert abs(a-b) <= 1e-9*a, (a, b)' "$TMP/long.json" "$TMP/eval.json" || fail "--placements differs"
"$AS" plan "${M[@]}" --preload "$TMP/long/placements.json" --json >"$TMP/pre.json"
pycheck "$TMP/pre.json" 'assert j["has_solution"] and j["context_parallel"], j["context_parallel"]'
ok "--placements / --preload read context_parallel back"

# The other kind has the same specs and costs more here: the problem keeps only the cheaper
# of the two, so a file asking for the other one matches none of the node's strategies.
python3 - "$TMP/long/placements.json" "$TMP/other.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for v in j["placements"].values():
    if "context_parallel" in v:
        c = v["context_parallel"]
        c["kind"] = "allgather" if c["kind"] == "ring" else "ring"
json.dump(j, open(sys.argv[2], "w"))
PY
expect_error "matches none of the node's" -- "$AS" plan "${M[@]}" --placements "$TMP/other.json"
ok "the dominated CP kind is not a strategy of the problem"

# Bad context_parallel entries: one line naming the file and the JSON pointer.
bad() {
  python3 - "$TMP/long/placements.json" "$TMP/bad.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["placements"]["_scaled_dot_product_efficient_attention"]["context_parallel"] = json.loads(sys.argv[3])
json.dump(j, open(sys.argv[2], "w"))
PY
}
bad '{"mesh_dim": "cp", "kind": "ulysses"}'
expect_error "bad.json: /placements/_scaled_dot_product_efficient_attention/context_parallel/kind" -- \
  "$AS" plan "${M[@]}" --placements "$TMP/bad.json"
bad '{"mesh_dim": "sp", "kind": "ring", "load_balance": true}'
expect_error "no mesh dim named 'sp'" -- "$AS" plan "${M[@]}" --placements "$TMP/bad.json"
bad '"ring"'
expect_error "context_parallel: expected an object" -- "$AS" plan "${M[@]}" --placements "$TMP/bad.json"

# A short sequence keeps batch and heads: no context parallelism.
"$AS" plan --model llama3-8b --layers 2 --batch 8 --seq 512 --mesh 2x4 --mesh-dims cp,tp -o "$TMP/short" >/dev/null
pycheck "$TMP/short/placements.json" '
assert not any("context_parallel" in v for v in j["placements"].values())
'
ok "short sequence: no context parallelism"

# --compare on cp,dp gains torchtitan's CP x FSDP; the optimum is never worse.
"$AS" plan --model llama3-8b --layers 1 --batch 2 --seq 32768 --mesh 2x4 --mesh-dims dp,cp --compare --json >"$TMP/cmp.json"
pycheck "$TMP/cmp.json" '
rows = {r["recipe"]: r for r in j["recipes"]}
assert "cp+fsdp" in rows, list(rows)
r = rows["cp+fsdp"]
assert r["applicable"] and r["has_solution"], r
assert rows["alpa"]["step_us"] <= r["step_us"] * (1 + 1e-9), (rows["alpa"]["step_us"], r["step_us"])
'
expect_error "cp+fsdp needs a context-parallel mesh dim named cp" -- \
  "$AS" plan --model llama3-8b --layers 1 --mesh 2x4 --mesh-dims dp,tp --algo cp+fsdp
ok "--compare cp+fsdp"

# search: any dim may carry context parallelism; the ranking says which one does.
"$AS" search --model llama3-8b --layers 1 --batch 1 --seq 32768 --gpus 8 --max-dims 2 --threads 1 --json >"$TMP/search.json"
pycheck "$TMP/search.json" '
rows = [r for r in j["meshes"] if r.get("dim_use")]
assert rows and any(u.endswith("+CP") for u in rows[0]["dim_use"]), rows[:1]
'
ok "search reports +CP"

# The state file keeps the CP strategies: show reports them, export writes the same placements.
out=$("$AS" show "$TMP/long/plan.ap")
expect_contains "$out" "context parallelism: cp: " "show"
"$AS" export "$TMP/long/plan.ap" --placements "$TMP/exported.json" >/dev/null
cmp -s "$TMP/exported.json" "$TMP/long/placements.json" || fail "export --placements differs from plan -o"
ok "plan.ap round trip"

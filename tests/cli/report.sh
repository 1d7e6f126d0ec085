#!/usr/bin/env bash
# report.html and trace.json for every built-in model (small sizes, 2x2 mesh): `plan -o DIR`
# writes both; the page embeds its data as JSON with one row per parameter, the trace is
# Chrome's {"traceEvents": [...]} with one named track per stream; the simulated step is in
# --json and in the text summary; the same plan gives the same bytes.
source "$(dirname "$0")/lib.bash" "$@"

models=$("$AS" plan --help | sed -n 's/.*built-in model: //p' | tr -d ',')
[[ -n $models ]] || fail "no model list in plan --help"
for m in $models; do
  out="$TMP/$m"
  "$AS" plan --model "$m" --layers 2 --batch 2 --seq 64 --mesh 2x2 --mesh-dims dp,tp \
    --time-limit 30 --json -o "$out" >"$TMP/$m.json" 2>"$TMP/$m.err" \
    || { cat "$TMP/$m.err" >&2; fail "plan $m failed"; }
  [[ -s $out/report.html && -s $out/trace.json ]] || fail "$m: no report.html or trace.json"
  python3 - "$out/report.html" "$out/trace.json" "$TMP/$m.json" <<'PY' || fail "$m: report checks failed"
import json, re, sys
html = open(sys.argv[1]).read()
plan = json.load(open(sys.argv[3]))
m = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', html, re.S)
assert m, "no data blob"
d = json.loads(m.group(1))
assert [p[0] for p in d["parameters"]] == [p["name"] for p in plan["parameters"]]
assert abs(d["simulation"]["step_us"] - plan["simulation"]["step_us"]) <= 1e-3 + 1e-9 * plan["simulation"]["step_us"]
# Overlap only hides time: between the compute and the additive objective.
assert plan["simulation"]["compute_us"] * (1 - 1e-9) <= plan["simulation"]["step_us"] <= plan["additive_us"] * (1 + 1e-9)
assert 0 < plan["simulation"]["mfu"] < 1
assert any("svg" in g for g in d["graph"]["groups"]), "no block drawn"
assert not re.search(r'(src|href)="https?:', html), "external resource"
t = json.load(open(sys.argv[2]))
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
tracks = {e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
assert tracks == {"compute", "comm dp", "comm tp"}, tracks
assert x and all(e["dur"] >= 0 and "node" in e["args"] for e in x)
PY
  ok "$m: report.html $(stat -c %s "$out/report.html") bytes, trace.json $(stat -c %s "$out/trace.json") bytes"
done

# Deterministic bytes, and the text summary names the simulated step.
"$AS" plan --model mlp --layers 2 --batch 2 --seq 64 --mesh 2x2 --mesh-dims dp,tp --time-limit 30 \
  -o "$TMP/again" >"$TMP/text.out" 2>/dev/null \
  || fail "plan mlp failed"
cmp -s "$TMP/mlp/report.html" "$TMP/again/report.html" || fail "report.html differs between runs"
cmp -s "$TMP/mlp/trace.json" "$TMP/again/trace.json" || fail "trace.json differs between runs"
expect_contains "$(cat "$TMP/text.out")" "simulated step time:" "plan summary"
ok "deterministic report and trace; simulated step in the summary"

# `autoshard export PLAN.ap --html F --trace F` gives the same bytes as `plan -o`.
if [[ -f $TMP/mlp/plan.ap ]]; then
  "$AS" export "$TMP/mlp/plan.ap" --html "$TMP/export.html" --trace "$TMP/export.json" \
    || fail "export --html --trace failed"
  cmp -s "$TMP/mlp/report.html" "$TMP/export.html" || fail "export --html differs from plan -o"
  cmp -s "$TMP/mlp/trace.json" "$TMP/export.json" || fail "export --trace differs from plan -o"
  ok "export --html/--trace equal plan -o's files"
else
  echo "skipped: plan -o wrote no plan.ap (state files not built in)"
fi

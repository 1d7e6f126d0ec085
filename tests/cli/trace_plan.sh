#!/usr/bin/env bash
# End to end: trace PyTorch models with python/autoshard-trace, then `autoshard plan --graph`
# them on a 2x4 mesh.  Uses $AUTOSHARD_PYTHON, else the test venv build/venv (scripts/venv.sh:
# torch 2.13), else /usr/bin/python3; prints "skipped" and passes when none imports torch
# (ResNet also needs torchvision).
source "$(dirname "$0")/lib.bash" "$@"

PY=""
for cand in "${AUTOSHARD_PYTHON:-}" "$SRC/build/venv/bin/python" /usr/bin/python3; do
  if [[ -n $cand && -x $cand ]] && "$cand" -c 'import torch' 2>/dev/null; then PY=$cand; break; fi
done
if [[ -z $PY ]]; then
  echo "skipped: no python that imports torch (scripts/venv.sh makes build/venv)"
  exit 0
fi

trace() {  # trace NAME FACTORY ARGS... -> $TMP/NAME.graph.json
  local name=$1 factory=$2; shift 2
  (cd "$SRC" && "$PY" python/autoshard-trace "$factory" --name "$name" "$@" \
      -o "$TMP/$name.graph.json") >"$TMP/$name.trace.log" 2>&1 \
    || { cat "$TMP/$name.trace.log" >&2; fail "tracing $name failed"; }
  [[ -s $TMP/$name.graph.json ]] || fail "tracing $name wrote no graph"
  ok "traced $name"
}

plan() {  # plan NAME: plans $TMP/NAME.graph.json, checks the JSON summary and stderr
  local name=$1
  "$AS" plan --graph "$TMP/$name.graph.json" --mesh 2x4 --mesh-dims dp,tp --json \
    >"$TMP/$name.plan.json" 2>"$TMP/$name.plan.err" \
    || { cat "$TMP/$name.plan.err" >&2; fail "plan $name failed"; }
  if grep -q "no sharding rule" "$TMP/$name.plan.err"; then
    cat "$TMP/$name.plan.err" >&2
    fail "plan $name: ops fell back to replication"
  fi
  pycheck "$TMP/$name.plan.json" "
assert j['graph'] == '$name', j['graph']
assert j['has_solution'] and j['status'] in ('optimal', 'feasible'), j['status']
assert j['checked'], 'the independent check did not run or disagreed'
assert j['objective_us'] > 0
assert not [w for w in j['warnings'] if 'no sharding rule' in w], j['warnings']
assert j['parameters'] and all(p['placement'] for p in j['parameters'])
assert j['mesh']['shape'] == [2, 4] and j['mesh']['dim_names'] == ['dp', 'tp']
"
  ok "planned $name"
}

# The example LLaMA, 2 layers and small (the llama2l fixture's configuration).
trace llama2l autoshard.tracer.examples.llama:llama_tiny --batch 2 --seq 64 --dtype bf16
plan llama2l

# Placements round trip: -o DIR, then --preload DIR/placements.json gives the same plan.
"$AS" plan --graph "$TMP/llama2l.graph.json" --mesh 2x4 --mesh-dims dp,tp -o "$TMP/out" --json \
  >"$TMP/first.json" 2>/dev/null || fail "plan -o failed"
[[ -s $TMP/out/placements.json ]] || fail "plan -o wrote no placements.json"
"$AS" plan --graph "$TMP/llama2l.graph.json" --mesh 2x4 --mesh-dims dp,tp \
  --preload "$TMP/out/placements.json" --json >"$TMP/second.json" 2>/dev/null \
  || fail "plan --preload failed"
"$PY" -c "import json,sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
pa = {p['name']: p['placement'] for p in a['parameters']}
pb = {p['name']: p['placement'] for p in b['parameters']}
assert pa == pb, (pa, pb)
assert abs(a['objective_us'] - b['objective_us']) <= 1e-6 * a['objective_us']
" "$TMP/first.json" "$TMP/second.json" || fail "--preload changed the plan"
ok "placements round trip"

if "$PY" -c 'import torchvision' 2>/dev/null; then
  trace resnet18 autoshard.tracer.examples.resnet:resnet18 --batch 2 --arg image_size=64
  plan resnet18
else
  echo "skipped: resnet18 ($PY cannot import torchvision)"
fi
ok trace_plan

#!/usr/bin/env bash
# ctest-label: slow
# `autoshard plan` options on small models: --pin, --no-cluster, --skip-fully-replicated,
# --comm-model, --memory-limit (feasible and infeasible), unknown ops.
source "$(dirname "$0")/lib.bash" "$@"

M=(--model gpt2 --layers 2 --mesh 2x4 --objective additive)  # proven-optimum relations between options
jget() { python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: v=v[int(k)] if isinstance(v,list) else v[k]
print(v)' "$@"; }

"$AS" plan "${M[@]}" --json -o "$TMP/base" >"$TMP/base.json"
[[ $(jget "$TMP/base.json" status) =~ ^(optimal|feasible)$ ]] || fail "base plan has no solution"
base=$(jget "$TMP/base.json" objective_us)

# --pin: the pinned node gets exactly that output placement, and the cost cannot improve.
node=$(python3 -c 'import json,sys
pl=json.load(open(sys.argv[1]))["placements"]
print(next(n for n,e in pl.items() if n.startswith("mm") and e["output"] != "RR"))' "$TMP/base/placements.json")
"$AS" plan "${M[@]}" --pin "$node=RR" --json -o "$TMP/pin" >"$TMP/pin.json"
[[ $(jget "$TMP/pin/placements.json" placements "$node" output) == RR ]] || fail "--pin ignored"
python3 -c "import sys; assert float(sys.argv[1]) >= float(sys.argv[2]) * (1 - 1e-9)" \
  "$(jget "$TMP/pin.json" objective_us)" "$base" || fail "pinning improved the optimum"
expect_error "no node named 'nope'" -- "$AS" plan "${M[@]}" --pin 'nope=RR'
ok "--pin $node=RR"

# --no-cluster solves the full problem: no layer classes, and an optimum no worse than the
# clustered one (tying layers restricts the choices; the clustered optimum is within 1 %).
"$AS" plan "${M[@]}" --no-cluster --json >"$TMP/nc.json"
[[ $(jget "$TMP/nc.json" status) == optimal ]] || fail "--no-cluster not optimal"
python3 -c "import sys; a,b=map(float,sys.argv[1:]); assert a <= b*(1+1e-9) and b <= a*1.01, (a,b)" \
  "$(jget "$TMP/nc.json" objective_us)" "$base" || fail "--no-cluster: optimum out of range"
[[ $(jget "$TMP/nc.json" problem clustered_nodes) == $(jget "$TMP/nc.json" problem nodes) ]] \
  || fail "--no-cluster still clustered"
ok "--no-cluster"

# --skip-fully-replicated: no parameter stays fully replicated if it can be sharded.
"$AS" plan "${M[@]}" --skip-fully-replicated --json >"$TMP/sfr.json"
pycheck "$TMP/sfr.json" "
assert j['status'] == 'optimal', j['status']
assert j['objective_us'] >= $base * (1 - 1e-9)
big = [p for p in j['parameters'] if len(p['shape']) == 2]
assert big and all(p['placement'] != 'RR' for p in big), [p for p in big if p['placement'] == 'RR']
"
ok "--skip-fully-replicated"

# --comm-model dtensor: another cost model, still optimal, different communication time.
"$AS" plan "${M[@]}" --comm-model dtensor --json >"$TMP/dt.json"
[[ $(jget "$TMP/dt.json" status) == optimal ]] || fail "dtensor not optimal"
python3 -c "import sys; a,b=map(float,sys.argv[1:]); assert a != b, (a,b)" \
  "$(jget "$TMP/dt.json" objective_us)" "$base" || fail "--comm-model dtensor gave the nccl objective"
ok "--comm-model dtensor"

# --float8, --compile (mesh/hardware.h KernelOptions): the same job with its linear layers'
# matmuls at the FP8 peak, then also its memory-bound ops fused, costs strictly less each time.
# Sizes where FP8 pays: at seq 512 x batch 2 the operands' casts cost more than the GEMMs save.
K=(--model llama3-8b --layers 2 --seq 2048 --batch 8 --mesh 2x2 --objective additive --json)
"$AS" plan "${K[@]}" >"$TMP/k0.json"
"$AS" plan "${K[@]}" --float8 >"$TMP/k8.json"
"$AS" plan "${K[@]}" --float8 --compile >"$TMP/kc.json"
python3 -c "import sys; a,b,c=map(float,sys.argv[1:]); assert c < b < a, (a,b,c)" \
  "$(jget "$TMP/k0.json" objective_us)" "$(jget "$TMP/k8.json" objective_us)" \
  "$(jget "$TMP/kc.json" objective_us)" || fail "--float8 / --compile did not lower the cost"
ok "--float8, --compile"

# --memory-limit: between the smallest achievable peak and the unconstrained one, the plan
# must shard more, fit, and cost at least as much.
S=(--model gpt2 --layers 2 --mesh 4)
"$AS" plan "${S[@]}" --memory-limit 0 --json >"$TMP/free.json"
free_peak=$(jget "$TMP/free.json" peak_memory_bytes)
free_obj=$(jget "$TMP/free.json" objective_us)
rc=0; "$AS" plan "${S[@]}" --memory-limit 1MiB --json >"$TMP/inf.json" 2>"$TMP/inf.err" || rc=$?
[[ $rc -ne 0 ]] || fail "1 MiB budget did not fail"
min_peak=$(jget "$TMP/inf.json" min_peak_memory_bytes)
(( min_peak < free_peak )) || fail "no room to force sharding: min $min_peak, free $free_peak"
limit=$(( (min_peak + free_peak) / 2 ))
"$AS" plan "${S[@]}" --memory-limit "$limit" --json -o "$TMP/tight" >"$TMP/tight.json"
pycheck "$TMP/tight.json" "
assert j['status'] in ('optimal', 'feasible'), j['status']   # memory-bound solves may stop unproven
assert j['has_solution'] is True and j['checked'] is True
assert j['memory_limit_bytes'] == $limit
assert j['peak_memory_bytes'] <= $limit < $free_peak, (j['peak_memory_bytes'], $limit, $free_peak)
assert j['objective_us'] >= $free_obj * (1 - 1e-9)
"
ok "--memory-limit $limit (free peak $free_peak, min $min_peak)"

# Infeasible budget: non-zero exit, one error line naming the smallest peak, no output files.
expect_error "needs at least" -- "$AS" plan "${S[@]}" --memory-limit 1MiB -o "$TMP/none"
[[ ! -e $TMP/none ]] || fail "infeasible plan created $TMP/none"
grep -q "no plan fits in .*: it needs at least" "$TMP/err.out" || fail "summary lacks the smallest peak"
pycheck "$TMP/inf.json" "
lo, hi = j['min_peak_lower_bound_bytes'], j['min_peak_memory_bytes']
assert 1 << 20 < lo <= hi, (lo, hi)
"
mkdir "$TMP/keep"
expect_error "needs at least" -- "$AS" plan "${S[@]}" --memory-limit 1MiB -o "$TMP/keep"
[[ -z $(ls -A "$TMP/keep") ]] || fail "infeasible plan wrote into $TMP/keep: $(ls -A "$TMP/keep")"
ok "infeasible budget"

# An op without a sharding rule is accepted and planned replicated, with a warning.
cat >"$TMP/custom.graph.json" <<'G'
{"format": "autoshard-graph", "version": 1, "name": "custom",
 "nodes": [
  {"name": "x", "kind": "input", "outputs": [{"shape": [64, 128], "dtype": "bf16"}]},
  {"name": "w", "kind": "parameter", "outputs": [{"shape": [128, 128], "dtype": "bf16"}]},
  {"name": "mm_1", "kind": "op", "op": "mm", "inputs": ["x", "w"], "outputs": [{"shape": [64, 128], "dtype": "bf16"}]},
  {"name": "weird", "kind": "op", "op": "my_custom_op", "inputs": ["mm_1"], "outputs": [{"shape": [64, 128], "dtype": "bf16"}]},
  {"name": "loss", "kind": "op", "op": "sum", "inputs": ["weird"], "outputs": [{"shape": [], "dtype": "f32"}]},
  {"name": "out", "kind": "output", "inputs": ["loss"]}
 ],
 "loss": "loss"}
G
out=$("$AS" plan --graph "$TMP/custom.graph.json" --mesh 4 -o "$TMP/custom" 2>"$TMP/custom.err")
expect_contains "$out" "warning: no sharding rule for op 'my_custom_op'" "plan text"
[[ $(jget "$TMP/custom/placements.json" placements weird output) == R ]] || fail "unknown op not replicated"
"$AS" plan --graph "$TMP/custom.graph.json" --mesh 4 --json >"$TMP/custom.json" 2>"$TMP/custom.err"
grep -q "^autoshard: warning: no sharding rule for op 'my_custom_op'" "$TMP/custom.err" \
  || fail "--json does not warn on stderr"
pycheck "$TMP/custom.json" "assert any('my_custom_op' in w for w in j['warnings']), j['warnings']"
ok "unknown op planned replicated with a warning"

# --recompute (issue 12): the JSON says what each repeated layer does and what it adds.
"$AS" plan "${M[@]}" --recompute full --json >"$TMP/rc.json"
pycheck "$TMP/rc.json" "
assert j['layers'] == [{'layer': 'transformer.h.0', 'recompute': 'full'},
                       {'layer': 'transformer.h.1', 'recompute': 'full'}], j['layers']
assert j['recompute_us'] > 0 and j['objective_us'] >= $base + j['recompute_us'] - 1e-6, j"
if "$AS" plan "${M[@]}" --recompute sometimes 2>"$TMP/rc.err"; then fail "--recompute sometimes accepted"; fi
grep -qx "autoshard: error: --recompute: expected none, selective, selective-op, full, auto or if-needed, got 'sometimes'" "$TMP/rc.err" \
  || fail "--recompute error: $(cat "$TMP/rc.err")"
ok "--recompute full per layer in the JSON; a bad policy is a one-line error"

# The default recomputes only when memory binds (issue 23): on one device, a budget between the
# full-recomputation peak and the keep-everything peak fits by default, not with --recompute
# none, whose infeasible answer names the remedies with the planner's numbers.
R=(--model gpt2 --layers 2 --batch 8 --seq 1024 --mesh 1 --mesh-dims dp)
"$AS" plan "${R[@]}" --memory-limit 0 --json >"$TMP/r_free.json"
pycheck "$TMP/r_free.json" "assert j.get('layers', []) == [] and j.get('recompute_us', 0) == 0, j"
"$AS" plan "${R[@]}" --memory-limit 0 --recompute full --json >"$TMP/r_full.json"
keep_peak=$(jget "$TMP/r_free.json" peak_memory_bytes)
full_peak=$(jget "$TMP/r_full.json" peak_memory_bytes)
(( full_peak < keep_peak )) || fail "full recomputation does not lower the peak: $full_peak vs $keep_peak"
mid=$(( (keep_peak + full_peak) / 2 ))
"$AS" plan "${R[@]}" --memory-limit "$mid" --objective additive --json >"$TMP/r_mid.json"  # additive: proven
pycheck "$TMP/r_mid.json" "
assert j['has_solution'] and j['status'] == 'optimal', j['status']
assert j['peak_memory_bytes'] <= $mid and j['recompute_us'] > 0, j
assert any(l['recompute'] != 'none' for l in j['layers']), j['layers']"
rc=0; "$AS" plan "${R[@]}" --memory-limit "$mid" --recompute none >"$TMP/r_none.out" 2>"$TMP/r_none.err" || rc=$?
[[ $rc -ne 0 ]] || fail "--recompute none fitted below the keep-everything peak"
grep -q -E "^to fit, memory: --memory-limit [0-9.]+(MiB|GiB): a layout peaks at exactly that, and none lower$" "$TMP/r_none.out" \
  || fail "no budget remedy: $(cat "$TMP/r_none.out")"
grep -q -E "^to fit, recompute: --recompute auto \\(or full\\): fully recomputed layers need at least [0-9.]+ (MiB|GiB) per device" \
  "$TMP/r_none.out" || fail "no recompute remedy: $(cat "$TMP/r_none.out")"
grep -q "^to fit, mesh: 2 (dp), 2 devices: " "$TMP/r_none.out" || fail "no mesh remedy: $(cat "$TMP/r_none.out")"
rc=0; "$AS" plan "${R[@]}" --memory-limit "$mid" --recompute none --json >"$TMP/r_none.json" 2>/dev/null || rc=$?
pycheck "$TMP/r_none.json" "
f = j['fit_suggestions']
assert [s.split(':')[0] for s in f] == ['memory', 'recompute', 'mesh'], f"
ok "default recomputes only under a binding budget ($mid B); --recompute none names the remedies"

# --bucket: FSDP's layer buckets (default) in placements.json's schedule and in the simulated
# step; `none` gives every entry its own bucket and a simulated step that pays every latency.
F=(--model llama3-1b --layers 2 --seq 256 --batch 4 --mesh 4 --mesh-dims dp --algo fsdp --json)
"$AS" plan "${F[@]}" -o "$TMP/bl" >"$TMP/bl.json"
"$AS" plan "${F[@]}" --bucket none -o "$TMP/bn" >"$TMP/bn.json"
python3 - "$TMP" <<'PY' || fail "--bucket: buckets missing or not cheaper"
import json, sys
t = sys.argv[1]
layer, none = (json.load(open(f"{t}/{d}/placements.json"))["schedule"] for d in ("bl", "bn"))
assert layer["version"] == 6 and layer["bucketing"] == "layer" and none["bucketing"] == "none"
# the op order the runtime runs: every op planned, once, the same under either bucketing
ops = json.load(open(f"{t}/bl/placements.json"))["placements"]
assert len(layer["order"]) == len(set(layer["order"])) > 0 and set(layer["order"]) <= set(ops)
assert layer["order"] == none["order"]
for key in ("prefetch", "reduce"):
    assert len(layer[key]) == len(none[key]) > 1, (key, len(layer[key]))
    assert len({e["bucket"] for e in none[key]}) == len(none[key]), key
    assert len({e["bucket"] for e in layer[key]}) < len(layer[key]), key
# wait points: a use before its consumer, a gradient reduction at the step's end (null)
assert all(e["wait_before"] == e["edge"].rsplit(":", 1)[0] for e in layer["prefetch"] + layer["issue"])
assert all(e["wait_before"] is None for e in layer["reduce"])
sl, sn = (json.load(open(f"{t}/{d}.json"))["simulation"] for d in ("bl", "bn"))
assert sl["bucketing"] == "layer" and sn["bucketing"] == "none"
assert sl["comm_us"] < sn["comm_us"], (sl["comm_us"], sn["comm_us"])
PY
expect_error "bucket" -- "$AS" plan "${F[@]}" --bucket model
ok "--bucket layer|none"
# The scheduled step's buffers count in the peak and under the limit (planner/schedule_memory.h):
# the fsdp+tp plan's prefetched, bucketed gathers peak above the solved problem; a limit just
# under that peak is met by solving again under a lower one.
S=(--model llama3-8b --mesh 8x8 --mesh-dims dp,tp --algo fsdp+tp)
"$AS" plan "${S[@]}" --memory-limit 0 --json >"$TMP/s0.json"
peak=$(jget "$TMP/s0.json" peak_memory_bytes)
[[ $peak == "$(jget "$TMP/s0.json" simulation peak_memory_bytes)" ]] || fail "peak without the schedule's buffers"
limit=$((peak - peak / 100))
"$AS" plan "${S[@]}" --memory-limit "$limit" --json >"$TMP/s1.json"
python3 - "$TMP/s1.json" "$limit" <<'PY' || fail "the scheduled step is over the memory limit"
import json, sys
j, limit = json.load(open(sys.argv[1])), int(sys.argv[2])
assert j["status"] in ("optimal", "feasible"), j["status"]
assert j["memory_limit_bytes"] == limit, j["memory_limit_bytes"]
assert j["simulation"]["peak_memory_bytes"] <= j["peak_memory_bytes"] <= limit, (j["peak_memory_bytes"], limit)
PY
ok "the schedule's buffers count in the peak and the memory limit"

ok plan_options

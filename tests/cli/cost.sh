#!/usr/bin/env bash
# `autoshard cost`: DTensor's redistribution cost model (../shared/reference/cost-model.md §1).
source "$(dirname "$0")/lib.bash" "$@"

cost() { "$AS" cost --mesh "$1" --shape "$2" --dtype "$3" --from "$4" --to "$5" --comm-model dtensor; }

out=$(cost 8 8192,4096 bf16 'S(0)' R)
[[ $out == "S(0) -> R: 634.375 us" ]] || fail "S(0)->R: $out"
expect_contains "$(cost 8 8192,4096 bf16 P R)" "1262.149 us"
expect_contains "$(cost 8 8192,4096 bf16 'P(sum)' R)" "1262.149 us"
expect_contains "$(cost 8 8192,4096 bf16 P 'S(0)')" "634.375 us"
expect_contains "$(cost 8 8192,4096 bf16 R 'S(0)')" ": 0.000 us"
expect_contains "$(cost 8 8192,4096 bf16 'S(0)' P)" "impossible"
expect_contains "$(cost 4 1024,1024 f32 'S(0)' R)" "41.806 us"
expect_contains "$(cost 4 1024,1024 f32 P R)" "77.012 us"
# The common spellings of the dtype work too.
expect_contains "$(cost 4 1024,1024 fp32 'S(0)' R)" "41.806 us"
expect_contains "$(cost 4 1024,1024 float32 'S(0)' R)" "41.806 us"
ok "text figures"

"$AS" cost --mesh 8 --shape 8192,4096 --dtype bf16 --from 'S(0)' --to R --comm-model dtensor --json >"$TMP/c.json"
pycheck "$TMP/c.json" "
assert j['mesh'] == [8] and j['shape'] == [8192, 4096] and j['dtype'] == 'bf16', j
assert j['from'] == 'S(0)' and j['to'] == 'R' and j['comm_model'] == 'dtensor', j
assert j['bytes'] == 8192 * 4096 * 2, j['bytes']
assert abs(j['time_us'] - 634.375) < 5e-4, j['time_us']
assert j['possible'] is True
"
"$AS" cost --mesh 8 --shape 8192,4096 --dtype bf16 --from 'S(0)' --to P --comm-model dtensor --json >"$TMP/inf.json"
pycheck "$TMP/inf.json" "assert j['time_us'] is None and j['possible'] is False, j"
ok "json"

# 2-D mesh, spec per mesh dim; the default model is nccl and gives a finite, different figure.
out=$("$AS" cost --mesh 2x8 --shape 8192,4096 --from 'S(0)S(1)' --to RR)
expect_contains "$out" "S(0)S(1) -> RR: "
ok cost

# Batch mode: one process prices many cases (the DTensor cross-check uses it).
cat >"$TMP/cases.json" <<'JSON'
[{"mesh": [8], "gpus_per_node": 8, "shape": [8192, 4096], "dtype": "bf16", "from": "S(0)", "to": "R"},
 {"mesh": [8], "shape": [8192, 4096], "dtype": "bf16", "from": "S(0)", "to": "P"}]
JSON
"$AS" cost --cases "$TMP/cases.json" --comm-model dtensor >"$TMP/batch.json"
pycheck "$TMP/batch.json" "assert abs(j[0]['time_us'] - 634.375) < 5e-4 and j[1]['time_us'] is None, j"
echo '[{"mesh": [8], "shape": [4], "dtype": "bf16", "from": "S(0)", "to": "Q"}]' >"$TMP/bad.json"
expect_error "bad.json: /0" -- "$AS" cost --cases "$TMP/bad.json"
expect_error "--shape is required" -- "$AS" cost --from R --to R
ok "batch"

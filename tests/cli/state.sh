#!/usr/bin/env bash
# ctest-label: slow
# State files from `autoshard plan`: -o DIR writes DIR/plan.ap, --save-replay DIR/plan.replay,
# --replay FILE plans from a replay (same optimum), --solution-file / --preload-solution reuse a
# solution without solving and say why when they cannot; bad files fail with one line.
source "$(dirname "$0")/lib.bash" "$@"

objective() { python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["objective_us"]))' "$1"; }

small=(--model gpt2 --layers 2 --batch 2 --seq 64 --mesh 2x2 --mesh-dims dp,tp --memory-limit 0)

# -o DIR with --save-replay: the state and the replay, both in the binary container.
"$AS" plan "${small[@]}" --pin transformer.wte.weight=RS\(0\) --json -o "$TMP/a" --save-replay >"$TMP/a.json"
[[ -s $TMP/a/plan.ap && -s $TMP/a/plan.replay ]] || fail "plan -o --save-replay wrote no plan.ap/plan.replay"
[[ $(head -c 4 "$TMP/a/plan.ap") == ASHD ]] || fail "plan.ap lacks the ASHD magic"
[[ $(head -c 4 "$TMP/a/plan.replay") == ASRP ]] || fail "plan.replay lacks the ASRP magic"
ap_size=$(stat -c %s "$TMP/a/plan.ap"); replay_size=$(stat -c %s "$TMP/a/plan.replay")
(( replay_size * 4 < ap_size )) || fail "the replay ($replay_size bytes) should be far smaller than the state ($ap_size)"
ok "plan.ap ($ap_size bytes) and plan.replay ($replay_size bytes)"

# --replay: regenerates (and says so) and reaches the same optimum, bit for bit.
"$AS" plan --replay "$TMP/a/plan.replay" --json >"$TMP/r.json" 2>"$TMP/r.err"
expect_contains "$(cat "$TMP/r.err")" "regenerated from a replay written by autoshard 0.1.0" "stderr"
[[ $(objective "$TMP/a.json") == $(objective "$TMP/r.json") ]] || fail "replay optimum differs"
pycheck "$TMP/r.json" "assert j['graph'] == 'gpt2', j['graph']; assert j['mesh']['shape'] == [2, 2]"
ok "replay gives the same optimum"

# Solution file: the first run writes it, the second reuses it without solving.
"$AS" plan "${small[@]}" --json --solution-file "$TMP/sol.json" --preload-solution >"$TMP/s1.json"
pycheck "$TMP/sol.json" "assert j['format'] == 'autoshard-solution' and len(j['fingerprint']) == 16"
"$AS" plan "${small[@]}" --json --solution-file "$TMP/sol.json" --preload-solution >"$TMP/s2.json" 2>"$TMP/s2.err"
expect_contains "$(cat "$TMP/s2.err")" "reused the solution in $TMP/sol.json" "stderr"
[[ $(objective "$TMP/s1.json") == $(objective "$TMP/s2.json") ]] || fail "reused solution differs"
pycheck "$TMP/s2.json" "assert not any(k.startswith('solve.') for k in j['phase_seconds']), j['phase_seconds']"
ok "solution file reused without solving"
# Another mesh: ignored with a warning naming what differs.
"$AS" plan --model gpt2 --layers 2 --batch 2 --seq 64 --mesh 4 --mesh-dims dp --memory-limit 0 --json --solution-file "$TMP/sol.json" --preload-solution \
  >"$TMP/s3.json" 2>"$TMP/s3.err"
expect_contains "$(cat "$TMP/s3.err")" "ignored: it solves a different problem (mesh differ)" "stderr"
ok "solution file of another problem ignored"

# Bad files: one-line errors naming the file.
printf 'ASRP\x09\x00\x00\x00' >"$TMP/newer.replay"
head -c 36 /dev/zero >>"$TMP/newer.replay"
expect_error "newer.replay: replay format version 9 is newer than this autoshard supports (1)" -- \
  "$AS" plan --replay "$TMP/newer.replay"
head -c 100 "$TMP/a/plan.replay" >"$TMP/cut.replay"
expect_error "cut.replay: byte 24: truncated" -- "$AS" plan --replay "$TMP/cut.replay"
expect_error "this is an autoshard state file, not a replay file" -- "$AS" plan --replay "$TMP/a/plan.ap"
expect_error "--save-replay: needs -o DIR" -- "$AS" plan "${small[@]}" --save-replay
expect_error "--preload-solution: needs --solution-file" -- "$AS" plan "${small[@]}" --preload-solution

#!/usr/bin/env bash
# `autoshard iopddl PROBLEM TIMEOUT`: the IOPDDL contest interface on the contest's example.
source "$(dirname "$0")/lib.bash" "$@"

EX="$SRC/tests/fixtures/iopddl/example.json"
[[ -f $EX ]] || fail "$EX not found"
"$AS" iopddl "$EX" 5 >"$TMP/out" 2>"$TMP/err"
last=$(tail -n 1 "$TMP/out")
[[ $last == "[0, 0, 2, 1, 0]" ]] || { cat "$TMP/out" >&2; fail "last line: $last"; }
# Every other line is a '#' comment.
if grep -v '^#' "$TMP/out" | head -n -1 | grep -q .; then fail "non-comment lines before the solution"; fi
ok "example.json -> $last"

# A problem file that cannot be read: the contest's "[]" on stdout, the reason on stderr.
printf '{"problem": {"nodes": ' >"$TMP/trunc.json"
rc=0; "$AS" iopddl "$TMP/trunc.json" 1 >"$TMP/out" 2>"$TMP/err" || rc=$?
[[ $rc -ne 0 ]] || fail "truncated problem exited 0"
[[ $(tail -n 1 "$TMP/out") == "[]" ]] || fail "last line is not []"
[[ $(wc -l <"$TMP/err") -eq 1 ]] || { cat "$TMP/err" >&2; fail "expected one stderr line"; }
grep -q "^autoshard: error: .*trunc.json" "$TMP/err" || { cat "$TMP/err" >&2; fail "error does not name the file"; }
expect_error "missing.json" -- "$AS" iopddl "$TMP/missing.json" 1
ok iopddl

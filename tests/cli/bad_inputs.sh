#!/usr/bin/env bash
# The bad-input corpus (tests/bad_inputs/, issue 14): every case file runs through the CLI and
# must print exactly the one-line error of tests/bad_inputs/cases.tsv on stderr, exit with the
# listed non-zero status, and leave nothing behind in the -o directory.
#   bash tests/cli/bad_inputs.sh AUTOSHARD SOURCE_DIR [--print]
# --print writes the table with the messages the binary gives now (to review, not to trust).
source "$(dirname "$0")/lib.bash" "$@"
print=${3:-}
cd "$SRC/tests/bad_inputs"
BASE=(--graph valid.graph.json --mesh 2x2 --mesh-dims dp,tp --time-limit 5)

# command KIND FILE OUT: the CLI call that reads FILE as KIND.
command_for() {
  case $1 in
    graph) echo "plan --graph $2 --mesh 2x2 -o $3" ;;
    preload) echo "plan ${BASE[*]} --preload $2 -o $3" ;;
    hardware) echo "plan ${BASE[*]} --hardware $2 -o $3" ;;
    iopddl) echo "iopddl $2 1" ;;
    show) echo "show $2" ;;
    # A valid graph on a 6-D mesh: the strategy bound (issue 14) must stop it in well under
    # a second, where it used to take minutes and gigabytes.
    mesh6d) echo "plan --graph $2 --mesh 2x2x2x2x2x2 --mesh-dims a,b,c,d,e,f -o $3" ;;
    replay) echo "plan --replay $2 -o $3" ;;
    *) fail "cases.tsv: unknown kind '$1'" ;;
  esac
}

n=0
while IFS=$'\t' read -r file kind want_rc want_msg; do
  [[ -z $file || $file == \#* ]] && continue
  [[ -f $file ]] || fail "cases.tsv: no file $file"
  if [[ $kind == show || $kind == replay ]] && ! "$AS" --help | grep -qw "${kind/replay/plan}"; then
    echo "skip: $file ($kind not in this CLI)"; continue
  fi
  out="$TMP/out-$n"
  rc=0
  # shellcheck disable=SC2046
  "$AS" $(command_for "$kind" "$file" "$out") >"$TMP/stdout" 2>"$TMP/stderr" || rc=$?
  msg=$(cat "$TMP/stderr")
  if [[ $print == --print ]]; then
    printf '%s\t%s\t%s\t%s\n' "$file" "$kind" "$rc" "${msg#autoshard: error: }"
    n=$((n + 1)); continue
  fi
  [[ $rc -ne 0 ]] || fail "$file: exit 0, expected $want_rc"
  [[ $rc -eq $want_rc ]] || fail "$file: exit $rc, expected $want_rc ($msg)"
  [[ $(wc -l <"$TMP/stderr") -eq 1 ]] || { cat "$TMP/stderr" >&2; fail "$file: stderr is not one line"; }
  [[ $msg == "autoshard: error: $want_msg" ]] ||
    fail "$file: message differs
  want: autoshard: error: $want_msg
  got:  $msg"
  if [[ -e $out ]] && [[ -n $(ls -A "$out") ]]; then
    fail "$file: left output behind in $out: $(ls -A "$out" | tr '\n' ' ')"
  fi
  n=$((n + 1))
done <cases.tsv
[[ $print == --print ]] || { [[ $n -ge 40 ]] || fail "only $n cases ran"; ok "$n bad inputs: exact one-line errors, non-zero exits, no output left"; }

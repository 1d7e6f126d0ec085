# Helpers for the CLI tests (sourced; not a test itself: CMake only registers tests/cli/*.sh).
# Usage in a test:  source "$(dirname "$0")/lib.bash" "$@"
set -euo pipefail

AS=${1:?usage: $0 AUTOSHARD_BINARY SOURCE_DIR}
SRC=${2:?usage: $0 AUTOSHARD_BINARY SOURCE_DIR}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/autoshard-cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# expect_contains TEXT NEEDLE [LABEL]
expect_contains() {
  grep -qF -- "$2" <<<"$1" || { printf '%s\n' "$1" | head -40 >&2; fail "${3:-output} lacks '$2'"; }
}

# pyjson FILE 'python expression over j' -- asserts; prints nothing on success.
pycheck() {
  python3 -c "import json,sys
j=json.load(open(sys.argv[1]))
$2" "$1" || fail "python check failed on $1: $2"
}

# expect_error NEEDLE -- CMD...: runs CMD, expects a non-zero exit and exactly one stderr line
# that starts with 'autoshard: error:' and contains NEEDLE.
expect_error() {
  local needle=$1; shift; [[ $1 == -- ]] && shift
  local rc=0
  "$@" >"$TMP/err.out" 2>"$TMP/err.err" || rc=$?
  [[ $rc -ne 0 ]] || fail "expected a non-zero exit: $*"
  local lines; lines=$(wc -l <"$TMP/err.err")
  [[ $lines -eq 1 ]] || { cat "$TMP/err.err" >&2; fail "expected one stderr line, got $lines: $*"; }
  local msg; msg=$(cat "$TMP/err.err")
  [[ $msg == "autoshard: error: "* ]] || fail "stderr does not start with 'autoshard: error:': $msg"
  [[ $msg == *"$needle"* ]] || fail "error lacks '$needle': $msg"
  echo "ok: error ($rc): $msg"
}

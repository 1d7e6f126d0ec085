#!/usr/bin/env bash
# --help of autoshard and of every subcommand: exit 0, usage text naming the key options.
source "$(dirname "$0")/lib.bash" "$@"

out=$("$AS" --help)
for sub in graph cost plan iopddl; do expect_contains "$out" "$sub" "autoshard --help"; done

out=$("$AS" graph --help)
for o in --model --graph --json --batch --seq --layers --dtype; do expect_contains "$out" "$o" "graph --help"; done
out=$("$AS" cost --help)
for o in --mesh --shape --dtype --from --to --comm-model --json; do expect_contains "$out" "$o" "cost --help"; done
out=$("$AS" plan --help)
for o in --model --graph --mesh --mesh-dims --hardware --comm-model --memory-limit --time-limit \
         --skip-fully-replicated --no-cluster --pin --preload --out --json; do
  expect_contains "$out" "$o" "plan --help"
done
out=$("$AS" iopddl --help)
expect_contains "$out" "problem" "iopddl --help"
expect_contains "$out" "timeout" "iopddl --help"

# No subcommand at all: a usage error, non-zero.
if "$AS" >/dev/null 2>&1; then fail "autoshard without a subcommand exited 0"; fi
ok help

#!/usr/bin/env bash
# Sets up (Debian packages when root), builds Release, and runs the main job:
# `autoshard plan` on the built-in default (llama3-8b on a 2x8 H100 mesh, dims dp,tp).
# Extra arguments are passed to `autoshard plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# shellcheck source=scripts/generator.sh
source scripts/generator.sh
use_one_generator build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target autoshard >/dev/null
exec build/autoshard plan "$@"

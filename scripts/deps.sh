#!/usr/bin/env bash
# Installs the Debian packages autoshard needs when they are missing (only when run as root;
# otherwise it lists what is missing and continues, so the build reports what is absent).
# Usage: scripts/deps.sh [--test] [--docs]   (--test adds the packages the test suite needs,
# --docs doxygen for the C++ API reference of scripts/api_docs.sh)
set -euo pipefail
pkgs=(g++ cmake make pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev coinor-libcbc-dev
      zlib1g-dev libzstd-dev libprotobuf-dev protobuf-compiler libgraphviz-dev
      libgtest-dev libgmock-dev libbenchmark-dev libmimalloc-dev python3 python3-venv python3-dev ninja-build)
for arg in "$@"; do
  case $arg in
    # cbc: the MPS export is checked with the stand-alone solver; clang: libFuzzer harnesses;
    # chromium: the report's browser test; ccache: shared between the C++ and wheel builds.
    --test) pkgs+=(coinor-cbc clang libclang-rt-14-dev chromium ccache) ;;
    --docs) pkgs+=(doxygen) ;;
    *) echo "deps: unknown option $arg (--test, --docs)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "deps: missing Debian packages (run as root to install): ${missing[*]}" >&2
  fi
fi

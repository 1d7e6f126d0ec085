#!/usr/bin/env bash
# Installs the Debian packages autoshard needs when they are missing (only when run as root;
# otherwise it lists what is missing and continues, so the build reports what is absent).
# Usage: scripts/deps.sh [--test]   (--test adds the packages the test suite needs)
set -euo pipefail
pkgs=(g++ cmake make pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev coinor-libcbc-dev
      zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(python3 python3-torch python3-torchvision)
fi
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

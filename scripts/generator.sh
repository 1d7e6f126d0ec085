# Sourced by scripts/run.sh and scripts/test.sh: one CMake generator for every build directory.
# Ninja when it is installed (scripts/deps.sh installs it), for the builds and for
# scikit-build-core (which reads CMAKE_GENERATOR), so that `pip install .` can reuse build/.
# A directory an earlier run configured with another generator loses its CMake cache (not its
# venv or outputs): CMake refuses to switch generators in place, and before this, running the
# README's first command (then Makefiles) and then its second broke `pip install .`.
#   use_one_generator DIR...
use_one_generator() {
  command -v ninja >/dev/null || return 0
  export CMAKE_GENERATOR=Ninja
  local dir
  for dir in "$@"; do
    if [[ -f $dir/CMakeCache.txt ]] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$dir/CMakeCache.txt"; then
      rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
  done
}

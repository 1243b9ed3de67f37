#!/usr/bin/env bash
# The two commands of the README, and CI's building blocks.
#   scripts/dev.sh check [flashattn check options]   install what is missing, build, check every backend against ref
#   scripts/dev.sh test                               install what is missing, build, run the test suite
#   scripts/dev.sh test-asan                          the test suite under AddressSanitizer + UBSan
# Environment: BUILD_DIR (default build/release or build/asan), JOBS (default: nproc),
#              FA_CMAKE_ARGS (extra configure arguments, e.g. -DFA_WITH_CUDA=OFF).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
cmd=${1:-}
[ $# -gt 0 ] && shift

need_install() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v cc >/dev/null || missing+=(gcc)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  command -v make >/dev/null || command -v ninja >/dev/null || missing+=(make)
  if [ "$cmd" != check ]; then
    { [ -f /usr/include/cmocka.h ] || pkg-config --exists cmocka 2>/dev/null; } || missing+=(libcmocka-dev)
  fi
  # libgomp ships with gcc on Debian; nothing else is needed.
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "flashattn: please install: ${missing[*]} (and a C11 compiler, CMake >= 3.25, CMocka for the tests)" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then sudo=sudo; else
      echo "flashattn: not root and no sudo; please install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "flashattn: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
build() { # build <dir> <cmake args...>
  local dir=$1
  shift
  # shellcheck disable=SC2086
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" ${FA_CMAKE_ARGS:-} >/dev/null
  cmake --build "$dir" -j "$jobs"
}

case "$cmd" in
  check)
    need_install
    dir=${BUILD_DIR:-build/release}
    build "$dir" -DFA_BUILD_TESTS=OFF
    "$dir/cli/flashattn" check "$@"
    ;;
  test)
    need_install
    dir=${BUILD_DIR:-build/release}
    build "$dir"
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"
    ;;
  test-asan)
    need_install
    dir=${BUILD_DIR:-build/asan}
    # CUDA code cannot run without a GPU and sanitizers do not see into it: leave it out here.
    build "$dir" -DFA_SANITIZE=ON -DFA_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@"
    ;;
  *)
    sed -n '2,8p' "$0" >&2
    exit 2
    ;;
esac

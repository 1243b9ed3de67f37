#!/usr/bin/env bash
# The two commands of the README, and CI's building blocks.
#   scripts/dev.sh check [flashattn check options]  install what is missing, build, check every usable backend
#                      against ref. With no usable GPU here (nvidia-smi -L lists none) the cuda backend is
#                      left out (build/check); FA_CHECK_CUDA=1 builds it anyway (build/release), =0 never.
#   scripts/dev.sh test [ctest options]  install what is missing, build with the tests (the cuda backend too
#                      when nvcc is here, GPU or not), run them (ctest; fails if none ran), then the Python
#                      tests (scripts/python_test.sh, when present)
#   scripts/dev.sh test-asan   the test suite under AddressSanitizer + UBSan (no cuda; build/asan)
#   scripts/dev.sh test-tsan   the test suite under ThreadSanitizer (clang, OpenMP through Archer; build/tsan)
# Environment: BUILD_DIR (default as above), JOBS (default: nproc),
#              FA_CMAKE_ARGS (extra configure arguments, e.g. -DFA_WITH_CUDA=OFF).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
cmd=${1:-}
[ $# -gt 0 ] && shift

usage() {
  awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2
}

# clang, its TSan runtime and libomp's Archer (next to clang, where CMake looks)
tsan_ready() {
  command -v clang >/dev/null || return 1
  echo 'int main(void) { return 0; }' | clang -fsanitize=thread -x c - -o /dev/null 2>/dev/null || return 1
  [ -e "$(dirname "$(readlink -f "$(command -v clang)")")/../lib/libarcher.so" ]
}

need_install() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v cc >/dev/null || missing+=(gcc)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  command -v make >/dev/null || command -v ninja >/dev/null || missing+=(make)
  if [ "$cmd" != check ]; then
    { [ -f /usr/include/cmocka.h ] || pkg-config --exists cmocka 2>/dev/null; } || missing+=(libcmocka-dev)
  fi
  if [ "$cmd" = test-tsan ] && ! tsan_ready; then
    missing+=(clang libclang-rt-dev libomp-dev)
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

gpu_usable() {
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

case "$cmd" in
  check)
    need_install
    with_cuda=${FA_CHECK_CUDA:-}
    if [ -z "$with_cuda" ]; then
      if gpu_usable; then with_cuda=1; else with_cuda=0; fi
    fi
    if [ "$with_cuda" = 1 ]; then
      dir=${BUILD_DIR:-build/release}
      build "$dir" -DFA_BUILD_TESTS=OFF
    else
      dir=${BUILD_DIR:-build/check}
      if [ -z "${FA_CHECK_CUDA:-}" ]; then
        echo "flashattn: no usable GPU here (nvidia-smi -L lists none): building without the cuda backend;" \
          "FA_CHECK_CUDA=1 scripts/dev.sh check builds it (scripts/dev.sh test always compiles it when nvcc is here)"
      fi
      build "$dir" -DFA_BUILD_TESTS=OFF -DFA_WITH_CUDA=OFF
    fi
    "$dir/cli/flashattn" check "$@"
    ;;
  test)
    need_install
    dir=${BUILD_DIR:-build/release}
    t0=$SECONDS
    build "$dir" -DFA_BUILD_TESTS=ON
    t1=$SECONDS
    ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" "$@"
    t2=$SECONDS
    took="build $((t1 - t0)) s, ctest $((t2 - t1)) s"
    if [ -f scripts/python_test.sh ]; then
      bash scripts/python_test.sh "$dir"
      took+=", Python $((SECONDS - t2)) s"
    fi
    echo "flashattn: test passed ($took)"
    ;;
  test-asan)
    need_install
    dir=${BUILD_DIR:-build/asan}
    # CUDA code cannot run without a GPU and sanitizers do not see into it: leave it out here.
    build "$dir" -DFA_SANITIZE=ON -DFA_WITH_CUDA=OFF -DFA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" "$@"
    ;;
  test-tsan)
    need_install
    dir=${BUILD_DIR:-build/tsan}
    # clang: its libomp tells TSan about OpenMP's synchronization through
    # Archer (libomp loads it at start; OMP_TOOL_LIBRARIES names it here to
    # be sure). ignore_noninstrumented_modules: libomp's own memory traffic
    # is not instrumented and is not ours to check (what Archer asks for).
    # The whole suite runs (test_threads: several contexts on threads at once)
    # but backend_ref and fp8_ref: the ref backend computes on the caller's
    # thread alone, so TSan has nothing to find there, and its cases were the
    # stage's longest tests (~450 s of CI's 2 cores); ASan runs them, and the
    # cpu suite under TSan still runs ref as its oracle. The cpu suites run on
    # two ISAs (portable C and the widest here; the others show as skipped):
    # the threads' work and synchronization are the same on every ISA, only
    # the micro-kernels differ, and ASan runs those all.
    CC=clang build "$dir" -DFA_TSAN=ON -DFA_WITH_CUDA=OFF -DFA_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
    archer=$(sed -n 's/^FA_ARCHER_LIBRARY:FILEPATH=//p' "$dir/CMakeCache.txt")
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1
    if [ -n "$archer" ] && [ -e "$archer" ]; then export OMP_TOOL_LIBRARIES=$archer; fi
    FA_TEST_CPU_ISAS=${FA_TEST_CPU_ISAS-generic,best} \
      ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" -E '^(backend_ref|fp8_ref)$' "$@"
    ;;
  *)
    usage
    exit 2
    ;;
esac

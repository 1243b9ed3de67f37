#!/usr/bin/env bash
# Builds the libFuzzer target for the public API (tests/fuzz/fuzz_api.c) in
# build/fuzz and runs it for SECONDS (default 120) from the seed corpus.
# Exits non-zero on a finding (crash, sanitizer report, leak, timeout or
# out-of-memory); the input that caused it is written to build/fuzz/findings/.
#
#   tests/fuzz/run.sh [SECONDS]
#
# Needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev,
# or the libclang-rt-dev of your clang's version) and cmake. Environment:
#   FA_FUZZ_BUILD  build directory (default build/fuzz)
#   FA_FUZZ_JOBS   parallel fuzzing processes (default 1; 2 uses both cores)
#   CC             the clang to use (default clang)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
secs=${1:-120}
build=${FA_FUZZ_BUILD:-build/fuzz}
jobs=${FA_FUZZ_JOBS:-1}
cc=${CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "tests/fuzz/run.sh: $cc not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi
cmake -S . -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFA_FUZZ=ON \
  -DFA_WITH_CUDA=OFF -DFA_WITH_OPENMP=OFF -DFA_BUILD_TESTS=OFF -DFA_BUILD_CLI=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 2; }
nice cmake --build "$build" --target fuzz_api -j "$(nproc)" >/dev/null
# The corpus grows in the build directory; the seeds in the repository stay as they are.
work="$build/corpus"
findings="$build/findings"
mkdir -p "$work" "$findings"
fuzzer="$build/tests/fuzz/fuzz_api"
echo "== fuzz_api for ${secs} s ($(date -u +%FT%TZ), $jobs job(s))"
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  nice "$fuzzer" "$work" tests/fuzz/corpus -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -timeout=20 -max_len=512 -print_final_stats=1 -artifact_prefix="$findings/" \
  $([ "$jobs" -gt 1 ] && echo "-fork=$jobs -ignore_crashes=0") 2>"$build/fuzz.log"
rc=$?
set -e
grep -E "^#[0-9]+[[:space:]]+DONE|^stat::|^Done " "$build/fuzz.log" || true
if [ $rc -ne 0 ]; then
  echo "== fuzz_api FOUND SOMETHING (exit $rc); the last lines of $build/fuzz.log:" >&2
  grep -v "^#" "$build/fuzz.log" | tail -40 >&2
  ls -l "$findings" >&2
  exit 1
fi
echo "== fuzz_api: no finding in ${secs} s"

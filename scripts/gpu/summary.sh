# Sourced by the scripts that run on the GPU machine (in the repository
# root): strict mode, $OUT (default /tmp/fa-out) made, ROOT the repository
# root, $SUMMARY ($OUT/summary.txt) emptied, say, which prints a line and
# appends it to $SUMMARY, extract, which unpacks a build carried from the
# dev machine (scripts/gpu/prebuild.sh), counts, CMocka's verdicts in a
# test program's log, build_check_cuda and sanitize.
# shellcheck shell=bash
set -u -o pipefail
OUT=${OUT:-/tmp/fa-out}
mkdir -p "$OUT"
ROOT=$(pwd)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
counts() {
  echo "$(grep -c '^\[       OK \]' "$1") OK, $(grep -c '^\[  SKIPPED \]' "$1") skipped," \
    "$(grep -c '^\[  FAILED  \] [^0-9]' "$1") failed"
}

# extract TARBALL DIR: the carried build into DIR; its absolute paths name
# the dev machine's checkout, so that path is made to lead here
extract() {
  rm -rf "$ROOT/.gpu-build"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$ROOT" || return 1
  local old
  old=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$ROOT/.gpu-build/CMakeCache.txt")
  rm -rf "${ROOT:?}/$2" && mv "$ROOT/.gpu-build" "$ROOT/$2"
  if [ "$old" != "$ROOT" ] && [ ! -e "$old" ]; then mkdir -p "$(dirname "$old")" && ln -s "$ROOT" "$old"; fi
  # (the pack's own record of its commit: the work tree here is a copy whose git history may be older)
  say "$2: $1 (built from $(head -1 "$ROOT/$2/commit" 2>/dev/null || echo '?'); configured at $old)"
}

# build_check_cuda DIR: scripts/gpu/check_cuda.c linked with DIR's library, as DIR/check_cuda
build_check_cuda() {
  local cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  cc -O2 "$ROOT/scripts/gpu/check_cuda.c" -I "$ROOT/include" -I "$cuda/include" -L "$1" -lflashattn \
    -L "$cuda/lib64" -lcudart -lm -Wl,-rpath,"$1" -o "$1/check_cuda" || { say "check_cuda build failed"; return 1; }
}

# sanitize CHECK_CUDA "TOOLS" CASES...: compute-sanitizer's tools on check_cuda's cases, one line each
# in the summary, the tools' output in $OUT/sanitizer.log
sanitize() {
  local bin=$1 tools=$2 c tool
  shift 2
  for c in "$@"; do
    for tool in $tools; do
      timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" "$c" >>"$OUT/sanitizer.log" 2>&1
      say "$tool $c: exit $?"
    done
  done
}

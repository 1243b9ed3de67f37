#!/bin/sh
# CUDA_COMPILER_LAUNCHER of the cuda backend's object libraries
# (src/cuda/CMakeLists.txt). Runs the compile command it is given (which has
# -Xptxas=-v) and keeps ptxas's report of each object -- registers, spills,
# and warnings such as C7514, wgmma serialized -- in OBJECT.ptxas.log, which
# the ctest entry cuda_wgmma_async (tests/check_ptxas_logs.sh) reads: the
# guard runs on what the build made instead of compiling it again.
# The build output stays as it is without -v: the "ptxas info" lines go to
# the log only (all of them also to stderr with --show, i.e.
# FA_CUDA_PTXAS_VERBOSE=ON); warnings and errors show as always. A failed
# compile leaves no log, so a stale one can never pass for the new object.
show=0
if [ "${1:-}" = --show ]; then
  show=1
  shift
fi
obj=
prev=
for a in "$@"; do
  [ "$prev" = -o ] && obj=$a
  prev=$a
done
[ -n "$obj" ] || exec "$@"
log=$obj.ptxas.log
tmp=$log.tmp.$$
rm -f "$log"
"$@" 2>"$tmp"
rc=$?
if [ $show = 1 ]; then
  cat "$tmp" >&2
else
  grep -v -E '^ptxas info *:|^ +[0-9]+ bytes stack frame' "$tmp" >&2
fi
if [ $rc = 0 ]; then
  mv -f "$tmp" "$log"
  touch "$log" # written before the object: make it as new, the check compares the two
else
  rm -f "$tmp"
fi
exit $rc

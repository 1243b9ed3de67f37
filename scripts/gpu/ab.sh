#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# A/B of a kernel change, both builds made on the dev machine by
# scripts/gpu/prebuild.sh: A carried as .gpu-build-old.tar.xz (the baseline),
# B as .gpu-build.tar.xz (the change). First B's checks, most important
# first (the device tool may cut the command short; $OUT keeps what was
# written): test_backend_cuda as shipped and with FLASHATTN_CUDA_WS_BWD=0,
# the test programs named in $AB_TESTS (e.g. "test_fp8_cuda test_kvcache"),
# then check_cuda (every case against ref, default and deterministic, the
# deterministic repeat bitwise), compute-sanitizer memcheck / racecheck /
# synccheck of check_cuda on $BWD_SAN; then bench/gpu/anchors.py ($AB_PASSES,
# default bwd; "fwd,bwd" both) for A and B in alternating rounds, separate
# processes, the same shapes, and with AB_FP8=1 bench/gpu/fp8.py likewise.
# AB_VARIANTS="0,6" times B's FLASHATTN_CUDA_VARIANT values too (columns fa-v6).
#   carry:   [".gpu-deps", ".gpu-build-old.tar.xz", ".gpu-build.tar.xz"]
#   command: ROUNDS=1 BWD_L=2048,16384 bash scripts/gpu/ab.sh
# BWD_SAN="" skips the sanitizers, BWD_SKIP_SUITE=1 the suites,
# BWD_SKIP_CHECK=1 check_cuda and the sanitizers.
# Results: $OUT/summary.txt and the raw logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

for t in .gpu-build-old.tar.xz .gpu-build.tar.xz; do
  [ -f "$ROOT/$t" ] || { say "missing $t: carry both builds"; exit 1; }
done
extract "$ROOT/.gpu-build-old.tar.xz" build-a || exit 1
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
B=$ROOT/build-gpu
# prebuild.sh's record: commit and a hash of the uncommitted src/include/tests diff
say "A built from: $(tr '\n' ' ' <"$ROOT/build-a/commit" 2>/dev/null || echo unknown)"
say "B built from: $(tr '\n' ' ' <"$B/commit" 2>/dev/null || echo unknown)"
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}

if [ "${BWD_SKIP_SUITE:-0}" != 1 ]; then
  say "== B: test_backend_cuda ($(date -u +%T))"
  timeout 200 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
  say "default exit $?: $(counts "$OUT/suite_cuda.log")"
  FLASHATTN_CUDA_WS_BWD=0 timeout 200 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda_ws0.log" 2>&1
  say "FLASHATTN_CUDA_WS_BWD=0 exit $?: $(counts "$OUT/suite_cuda_ws0.log")"
  for t in ${AB_TESTS:-}; do
    timeout 200 "$B/tests/$t" >"$OUT/suite_$t.log" 2>&1
    say "$t exit $?: $(counts "$OUT/suite_$t.log")"
  done
  grep -hE "^\[  FAILED  \] [^0-9]|err |FAIL" "$OUT"/suite_*.log | sort -u | head -20 | tee -a "$SUMMARY"
fi

if [ "${BWD_SKIP_CHECK:-0}" = 1 ]; then
  BWD_SAN=""
else
  build_check_cuda "$B" || exit 1
  say "== B: check_cuda ($(date -u +%T))"
  timeout 120 "$B/check_cuda" >"$OUT/check.log" 2>&1
  say "check_cuda exit $?: $(tail -1 "$OUT/check.log")"
  grep -E "FAIL|DIFFERS" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
fi
# shellcheck disable=SC2086
sanitize "$B/check_cuda" "memcheck racecheck synccheck" ${BWD_SAN-f16_d64_gqa_causal_blhd bf16_d128_window_100_20}

export PYTHONUNBUFFERED=1
for r in $(seq 1 "${ROUNDS:-1}"); do
  for side in a b; do
    lib=$ROOT/build-$side/libflashattn.so
    [ "$side" = b ] && lib=$B/libflashattn.so
    say "== round $r, side ${side^^} ($(date -u +%T))"
    vars=0
    [ "$side" = b ] && vars=${AB_VARIANTS:-0}
    timeout "${AB_BENCH_S:-240}" python3 bench/gpu/anchors.py --lib "$lib" --out "$OUT" --tag="-$side$r" \
      --variants "$vars" --passes "${AB_PASSES:-bwd}" --reps "${BWD_REPS:-10}" --l "${BWD_L:-2048,16384}" \
      --d "${BWD_D:-64,128}" >"$OUT/anchors-$side-$r.txt" 2>&1
    say "exit $?"
    grep -v "^# wrote" "$OUT/anchors-$side-$r.txt" | tee -a "$SUMMARY"
    if [ "${AB_FP8:-0}" = 1 ]; then
      timeout "${AB_BENCH_S:-240}" python3 bench/gpu/fp8.py --lib "$lib" --d 128 --l "${AB_FP8_L:-4096,16384}" \
        --reps "${BWD_REPS:-10}" --acc-l 0 >"$OUT/fp8-$side-$r.txt" 2>&1
      say "fp8.py exit $?"
      grep -E "^ *[0-9]" "$OUT/fp8-$side-$r.txt" | tee -a "$SUMMARY"
    fi
  done
done
say "== done ($(date -u +%T))"

#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# an A/B of a change to the kernels' per-element path (bias, mask, ALiBi,
# softcap, dropout), two builds made on the dev machine by
# scripts/gpu/prebuild.sh: A carried as .gpu-build-old.tar.xz (the baseline),
# B as .gpu-build.tar.xz (the change). B's checks first: check_cuda (every
# built-in case against the float64 reference), compute-sanitizer memcheck
# and racecheck on the cases with per-element options, and, unless
# OPT_SUITE=0, the shared suite (test_backend_cuda); then
# bench/gpu/options.py times A and B in alternating rounds (ROUNDS), each in
# its own process, with OPT_ARGS.
#   carry:   [".gpu-deps", ".gpu-build-old.tar.xz", ".gpu-build.tar.xz"]
#   command: ROUNDS=2 OPT_ARGS="--d 64,128 --l 2048,4096" bash scripts/gpu/options_ab.sh
# Results: $OUT/summary.txt and the logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

for t in .gpu-build-old.tar.xz .gpu-build.tar.xz; do
  [ -f "$ROOT/$t" ] || { say "missing $t: carry both builds"; exit 1; }
done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$SUMMARY"
extract "$ROOT/.gpu-build-old.tar.xz" build-a || exit 1
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1 # B where its test programs expect their library
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
B=$ROOT/build-gpu
build_check_cuda "$B" || exit 1

say "== B's checks ($(date -u +%T))"
timeout 200 "$B/check_cuda" >"$OUT/check.log" 2>&1
say "check_cuda exit $?: $(tail -1 "$OUT/check.log")"
grep -E "FAIL" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
# shellcheck disable=SC2086
sanitize "$B/check_cuda" "memcheck racecheck" ${OPT_SAN:-bf16_d64_mask_bias_dbias f32_d64_everything bf16_d256_everything}
if [ "${OPT_SUITE:-1}" = 1 ]; then
  timeout 300 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
  say "test_backend_cuda exit $?: $(counts "$OUT/suite_cuda.log")"
fi

export PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in a b; do
    lib=$ROOT/build-$side/libflashattn.so
    [ "$side" = b ] && lib=$B/libflashattn.so
    say "== round $r, side ${side^^} ($(date -u +%T))"
    # shellcheck disable=SC2086
    timeout "${OPT_BENCH_S:-150}" python3 bench/gpu/options.py --lib "$lib" ${OPT_ARGS:-} >"$OUT/options-$side-$r.txt" 2>&1
    say "exit $?"
    grep -vE "^#" "$OUT/options-$side-$r.txt" | tee -a "$SUMMARY"
  done
done
say "== done ($(date -u +%T))"

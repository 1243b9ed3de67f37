#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# the checks and the timing of softcap and ALiBi on the warp-specialized
# kernels (src/cuda/score_arith.cuh), on a build made on the dev machine by
# scripts/gpu/prebuild.sh. Checks: check_cuda (every built-in case against
# the float64 reference), compute-sanitizer memcheck and synccheck on its
# softcap / ALiBi cases, the shared suite (test_backend_cuda) as built and
# with FLASHATTN_CUDA_WS_ARITH=0 (the per-element kernels for these
# options); then bench/gpu/arith.py with ARITH_ARGS (ARITH_BENCH_S seconds at
# most; ARITH_SKIP_CHECKS=1 leaves the checks out).
#   carry:   [".gpu-deps", ".gpu-build.tar.xz"]
#   command: ARITH_ARGS="--d 64,128 --l 2048,8192" bash scripts/gpu/arith.sh
# Results: $OUT/summary.txt and the logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

[ -f "$ROOT/.gpu-build.tar.xz" ] || { say "missing .gpu-build.tar.xz: carry it"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$SUMMARY"
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
B=$ROOT/build-gpu

if [ "${ARITH_SKIP_CHECKS:-0}" != 1 ]; then
  build_check_cuda "$B" || exit 1
  say "== checks ($(date -u +%T))"
  timeout 200 "$B/check_cuda" >"$OUT/check.log" 2>&1
  say "check_cuda exit $?: $(tail -1 "$OUT/check.log")"
  grep -E "FAIL" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
  # shellcheck disable=SC2086
  sanitize "$B/check_cuda" "memcheck synccheck" \
    ${ARITH_SAN:-f16_d128_softcap_window_gqa bf16_d64_alibi_softcap_causal bf16_d256_alibi_softcap_causal}
  timeout 300 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
  say "test_backend_cuda exit $?: $(counts "$OUT/suite_cuda.log")"
  FLASHATTN_CUDA_WS_ARITH=0 timeout 300 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda_elem.log" 2>&1
  say "test_backend_cuda (FLASHATTN_CUDA_WS_ARITH=0) exit $?: $(counts "$OUT/suite_cuda_elem.log")"
  grep -h '^\[  FAILED  \] [^0-9]' "$OUT"/suite_cuda*.log | head -20 | tee -a "$SUMMARY"
fi

say "== bench/gpu/arith.py ${ARITH_ARGS:-} ($(date -u +%T))"
export PYTHONUNBUFFERED=1
# shellcheck disable=SC2086
timeout "${ARITH_BENCH_S:-300}" python3 bench/gpu/arith.py --lib "$B/libflashattn.so" ${ARITH_ARGS:-} \
  >"$OUT/arith.txt" 2>&1
say "exit $?"
tee -a "$SUMMARY" <"$OUT/arith.txt"
say "== done ($(date -u +%T))"

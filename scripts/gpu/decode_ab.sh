#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# an A/B timing of two builds of the decode, both made on the dev machine by
# scripts/gpu/prebuild.sh: A carried as .gpu-build-old.tar.xz (the baseline),
# B as .gpu-build.tar.xz (the change). B's kv-cache tests run first (on the
# tensor-core and CUDA-core kernels, with the fused split merge's bit check
# inside test_kvcache), then bench/gpu/decode.py times A and B in alternating
# rounds (A, B, A, B, ...) in separate processes on the same shapes, so that
# the machine's drift reaches both alike.
#   carry:   [".gpu-deps", ".gpu-build-old.tar.xz", ".gpu-build.tar.xz"]
#   command: DECODE_ARGS="--checks off --reps 10 --inner 10" ROUNDS=2 bash scripts/gpu/decode_ab.sh
# AB_SAME=1: one build (.gpu-build.tar.xz) on both sides, told apart by
# A_ENV / B_ENV (environment assignments for that side's process, e.g.
# B_ENV="FLASHATTN_CUDA_DECODE_FUSED_MERGE=1"); they apply with two builds too.
# Results: $OUT/summary.txt (test verdicts and every round's table) and the
# raw logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

tarballs=(.gpu-build.tar.xz)
[ "${AB_SAME:-0}" = 1 ] || tarballs+=(.gpu-build-old.tar.xz)
for t in "${tarballs[@]}"; do
  [ -f "$ROOT/$t" ] || { say "missing $t: carry both builds (or AB_SAME=1)"; exit 1; }
done
[ "${AB_SAME:-0}" = 1 ] || extract "$ROOT/.gpu-build-old.tar.xz" build-a || exit 1
# B where the carried tests expect their library (their paths lead to build-gpu)
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}

say "== B's kv-cache tests ($(date -u +%T))"
for t in test_kvcache test_online_softmax; do
  timeout 120 "$ROOT/build-gpu/tests/$t" >"$OUT/$t.log" 2>&1
  say "$t exit $?: $(counts "$OUT/$t.log")"
done
FLASHATTN_CUDA_DECODE_MMA=0 timeout 120 "$ROOT/build-gpu/tests/test_kvcache" >"$OUT/test_kvcache_cores.log" 2>&1
say "test_kvcache (FLASHATTN_CUDA_DECODE_MMA=0) exit $?: $(counts "$OUT/test_kvcache_cores.log")"
grep -E "FAILED|differ" "$OUT/test_kvcache.log" | head -10 | tee -a "$SUMMARY"

export PYTHONUNBUFFERED=1
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in a b; do
    lib=$ROOT/build-$side/libflashattn.so
    [ "$side" = b ] || [ "${AB_SAME:-0}" = 1 ] && lib=$ROOT/build-gpu/libflashattn.so
    side_env=${A_ENV:-}
    [ "$side" = b ] && side_env=${B_ENV:-}
    say "== round $r, side ${side^^}: $(basename "$(dirname "$lib")") ${side_env} ($(date -u +%T))"
    # shellcheck disable=SC2086
    env $side_env timeout "${AB_BENCH_S:-200}" python3 bench/gpu/decode.py --lib "$lib" ${DECODE_ARGS:-} \
      >"$OUT/decode-$side-$r.txt" 2>&1
    say "exit $?"
    grep -E "^B=|^ +kernels|copy" "$OUT/decode-$side-$r.txt" | tee -a "$SUMMARY"
  done
done
say "== done ($(date -u +%T))"

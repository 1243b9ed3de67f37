#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# the warp-specialized backward's grid order, A/B in one process, on a build
# carried from the dev machine (scripts/gpu/prebuild.sh). First the shared
# cuda suite with the heads interleaved (FLASHATTN_CUDA_BWD_GROUP=$GROUP_TEST,
# an odd group so that the last group is short) and check_cuda's backward
# cases, then bench/gpu/anchors.py's backward with the variants
# $GROUP_VARIANTS (bgN: N heads interleaved, key tile 0 first; 0: tile-major).
#   carry:   [".gpu-deps", ".gpu-build.tar.xz"]
#   command: bash scripts/gpu/bwd_group.sh
# Then, with DECODE=1, bench/gpu/decode.py's graph table ($DECODE_ARGS) on the
# same build (README's decode tables; an H200 is what they are for).
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$SUMMARY"
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
B=$ROOT/build-gpu
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1

G=${GROUP_TEST:-3}
FLASHATTN_CUDA_BWD_GROUP=$G timeout 200 "$B/tests/test_backend_cuda" >"$OUT/suite-bg$G.log" 2>&1
say "test_backend_cuda (FLASHATTN_CUDA_BWD_GROUP=$G) exit $?: $(counts "$OUT/suite-bg$G.log")"
grep -E '^\[  FAILED  \] [^0-9]' "$OUT/suite-bg$G.log" | head -10 | tee -a "$SUMMARY"

say "== anchors, backward, variants ${GROUP_VARIANTS:=0,bg4,bg8,bg16,bg9999,bg0} ($(date -u +%T))"
# shellcheck disable=SC2086
timeout "${GROUP_BENCH_S:-300}" python3 bench/gpu/anchors.py --lib "$B/libflashattn.so" --out "$OUT" --passes bwd \
  --variants "$GROUP_VARIANTS" --reps 10 --l "${GROUP_L:-2048,4096,16384}" --d "${GROUP_D:-128,64}" \
  ${GROUP_ARGS:-} >"$OUT/anchors-bwd-group.txt" 2>&1
say "anchors exit $?"

if [ "${DECODE:-0}" = 1 ]; then
  say "== decode ($(date -u +%T))"
  for r in 1 2; do
    # shellcheck disable=SC2086
    timeout "${DECODE_S:-150}" python3 bench/gpu/decode.py --lib "$B/libflashattn.so" \
      ${DECODE_ARGS:---checks off --reps 10 --inner 10 --graph} >"$OUT/decode-$r.txt" 2>&1
    say "decode round $r exit $?"
  done
fi
say "== done ($(date -u +%T))"

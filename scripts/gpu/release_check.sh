#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# the closing check of a session's cuda work in one call, on a carried build
# (scripts/gpu/prebuild.sh): the cuda suites, then the README's tables --
# forward and backward against SDPA FLASH / cuDNN and FlashAttention 4 at
# D = 64 and 128, D = 256 against FLASH / cuDNN, the FP8 forward against our
# bf16 one. FA4 must have been staged by an earlier call on the same warm
# machine (scripts/gpu/fa4_install.sh says how); without it the anchors run
# without the FA4 column.
#   call 1, carry [".gpu-wheels-1"]: bash scripts/gpu/fa4_install.sh stage
#   call 2, carry [".gpu-deps", ".gpu-wheels-2", ".gpu-build.tar.xz"]:
#           bash scripts/gpu/release_check.sh
# $OUT gets summary.txt, anchors-fa4.txt, anchors-d256.txt, fp8.txt and the
# suites' logs in one archive (the device tool brings back few files).
# shellcheck source=scripts/gpu/summary.sh
. scripts/gpu/summary.sh

FA4=()
if bash scripts/gpu/fa4_install.sh install >"$OUT/fa4-install.log" 2>&1; then
  FA4=(--fa4)
  export PYTHONPATH=/tmp/fa4:/tmp/fa4/nvidia_cutlass_dsl/dsl_packages
else
  say "FlashAttention 4 not installed (see fa4-install.log): anchors without it"
fi
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
B=$ROOT/build-gpu
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-} PYTHONUNBUFFERED=1
LOGS=$(mktemp -d)
for t in test_backend_cuda test_fp8_cuda test_kvcache test_online_softmax; do
  timeout 200 "$B/tests/$t" >"$LOGS/$t.log" 2>&1
  say "$t exit $?: $(counts "$LOGS/$t.log")"
done
FLASHATTN_CUDA_WS=0 timeout 200 "$B/tests/test_backend_cuda" >"$LOGS/test_backend_cuda_ws0.log" 2>&1
say "test_backend_cuda (FLASHATTN_CUDA_WS=0) exit $?: $(counts "$LOGS/test_backend_cuda_ws0.log")"
grep -hE "^\[  FAILED  \] [^0-9]" "$LOGS"/*.log | sort -u | head -20 | tee -a "$SUMMARY"
tar -czf "$OUT/suite-logs.tgz" -C "$LOGS" .

say "== anchors, D = 64 and 128 ($(date -u +%T))"
timeout "${RC_ANCHORS_S:-330}" python3 bench/gpu/anchors.py --lib "$B/libflashattn.so" "${FA4[@]}" --out "$LOGS" \
  --d 128,64 --l 16384,4096,2048 --reps 10 >"$OUT/anchors-fa4.txt" 2>&1
say "exit $?"
say "== anchors, D = 256 ($(date -u +%T))"
timeout 200 python3 bench/gpu/anchors.py --lib "$B/libflashattn.so" --out "$LOGS" --d 256 --l 2048,4096,16384 \
  --reps 5 >"$OUT/anchors-d256.txt" 2>&1
say "exit $?"
say "== FP8 ($(date -u +%T))"
timeout 150 python3 bench/gpu/fp8.py --lib "$B/libflashattn.so" --d 128,256 --l 4096,16384 --reps 10 --acc-l 0 \
  >"$OUT/fp8.txt" 2>&1
say "exit $?"
say "== done ($(date -u +%T))"

#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# the checks and the timing of the per-element options that the
# warp-specialized kernels take, on a build made on the dev machine by
# scripts/gpu/prebuild.sh, for one or more of
#   arith  softcap and ALiBi (src/cuda/score_arith.cuh; bench/gpu/arith.py;
#          FLASHATTN_CUDA_WS_ARITH=0 the per-element kernels)
#   tile   one bias or mask, with dropout too (src/cuda/score_tile.cuh;
#          bench/gpu/score_tile.py [--dropout P]; FLASHATTN_CUDA_WS_TILE=0 the
#          per-element kernels)
#   lengths  per-sequence lengths (seqlens, packed) on the warp-specialized
#          backward (bench/gpu/varlen.py; FLASHATTN_CUDA_WS_BWD=0 the cp.async
#          backward)
#   drop   dropout (with or without softcap and ALiBi) on the
#          warp-specialized kernels (src/cuda/dropout_tile.cuh;
#          bench/gpu/dropout.py; FLASHATTN_CUDA_WS_DROP=0 the per-element
#          kernels)
#   dbias  dBias of a bias the warp-specialized kernels take, on tensor
#          cores (launch_bwd_wgmma.cuh launch_dbias_wgmma: the wgmma dS
#          kernel, or the summing kernel for a bias broadcast over b / h
#          and / or the rows;
#          bench/gpu/dbias.py; FLASHATTN_CUDA_DBIAS_WGMMA=0 the SIMT kernel)
# Checks, once for all the modes named: check_cuda (every built-in case
# against the float64 reference), the shared suite (test_backend_cuda) as
# built; per mode: compute-sanitizer (memcheck, synccheck; racecheck on one
# case) on that option's check_cuda cases, the suite with the option's
# switch at 0; then each mode's bench with WS_ARGS_<mode>, or WS_ARGS
# (WS_BENCH_S seconds at most each; WS_SKIP_CHECKS=1 leaves the checks out;
# WS_SAN / WS_RACE, or WS_SAN_<mode> / WS_RACE_<mode>, name other
# check_cuda cases for the sanitizers, WS_RACE="" none for racecheck).
# WS_AB_LIB=FILE (a baseline libflashattn.so, or FILE.xz, carried): each
# mode's bench then runs WS_AB_ROUNDS times (default 2) with this build's
# library and with FILE in turn, each in its own process (A/B of a kernel
# change whose baseline differs in one object: link it on the dev machine).
#   carry:   [".gpu-deps", ".gpu-build.tar.xz"]
#   command: WS_ARGS="--d 64,128 --l 2048,8192" bash scripts/gpu/ws_options.sh arith
#            WS_ARGS_drop="--l 2048" WS_ARGS_dbias="--bcast keys" bash scripts/gpu/ws_options.sh drop dbias
# Results: $OUT/summary.txt and the logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

# mode_of MODE: that mode's SWITCH, BENCH, SAN_CASES and RACE_CASES
mode_of() {
  case $1 in
    arith)
      SWITCH=FLASHATTN_CUDA_WS_ARITH BENCH=bench/gpu/arith.py
      SAN_CASES="f16_d128_softcap_window_gqa bf16_d64_alibi_softcap_causal bf16_d256_alibi_softcap_causal"
      RACE_CASES=""
      ;;
    tile)
      SWITCH=FLASHATTN_CUDA_WS_TILE BENCH=bench/gpu/score_tile.py
      SAN_CASES="bf16_d128_bias16_causal_br_gqa f16_d64_mask_window f16_d64_bias16_causal_gqa bf16_d256_bias16_bcast_softcap
        bf16_d128_bias16_dropout_causal_gqa f16_d256_bias16_bcast_dropout_alibi_gqa"
      # the tiles' rings: one case (racecheck is the slow one; its report on the backward's LSE / dsum bulk
      # copies is the known one, bench/results/2026-12-01-h200-ws-bwd.txt)
      RACE_CASES="f16_d64_mask_window"
      ;;
    lengths)
      SWITCH=FLASHATTN_CUDA_WS_BWD BENCH=bench/gpu/varlen.py
      SAN_CASES="f16_d128_varlen_gqa_causal_br bf16_d64_varlen_window_softcap f16_d64_seqlens_mask_gqa"
      # the zeroed rows (generic stores, then wgmma) and the packed dQ reductions
      RACE_CASES="f16_d128_varlen_gqa_causal_br"
      ;;
    drop)
      SWITCH=FLASHATTN_CUDA_WS_DROP BENCH=bench/gpu/dropout.py
      SAN_CASES="bf16_d128_dropout f16_d64_dropout_varlen_gqa f16_d128_dropout_causal_br_gqa
        bf16_d64_dropout_softcap_alibi_window bf16_d256_dropout_causal"
      # the keep bits' shuffles between the products' issue and wait
      RACE_CASES="f16_d128_dropout_causal_br_gqa"
      ;;
    dbias)
      SWITCH=FLASHATTN_CUDA_DBIAS_WGMMA BENCH=bench/gpu/dbias.py
      SAN_CASES="bf16_d128_bias16_dbias_causal_br f16_d256_bias16_dbias_softcap_alibi
        bf16_d128_bias16_bcast_dbias_causal_br f16_d64_bias16_bcast_dbias_varlen_alibi
        f16_d128_bias16_keys_dbias_causal_gqa bf16_d64_bias16_keys_dbias_varlen_softcap"
      # the summing kernel's two stages (refilled behind a block barrier) and its sum over rows
      RACE_CASES="bf16_d64_bias16_keys_dbias_varlen_softcap"
      ;;
    *)
      echo "usage: bash scripts/gpu/ws_options.sh arith|tile|lengths|drop|dbias..." >&2
      exit 2
      ;;
  esac
}
[ $# -gt 0 ] || mode_of ""
for m in "$@"; do mode_of "$m"; done

[ -f "$ROOT/.gpu-build.tar.xz" ] || { say "missing .gpu-build.tar.xz: carry it"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$SUMMARY"
extract "$ROOT/.gpu-build.tar.xz" build-gpu || exit 1
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
B=$ROOT/build-gpu

if [ "${WS_SKIP_CHECKS:-0}" != 1 ]; then
  build_check_cuda "$B" || exit 1
  say "== checks ($(date -u +%T))"
  timeout 200 "$B/check_cuda" >"$OUT/check.log" 2>&1
  say "check_cuda exit $?: $(tail -1 "$OUT/check.log")"
  grep -E "FAIL" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
  timeout 300 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
  say "test_backend_cuda exit $?: $(counts "$OUT/suite_cuda.log")"
  for m in "$@"; do
    mode_of "$m"
    san_var=WS_SAN_$m race_var=WS_RACE_$m
    # shellcheck disable=SC2086
    sanitize "$B/check_cuda" "memcheck synccheck" ${!san_var:-${WS_SAN:-$SAN_CASES}}
    RACE_CASES=${!race_var-${WS_RACE-$RACE_CASES}}
    # shellcheck disable=SC2086
    [ -n "$RACE_CASES" ] && sanitize "$B/check_cuda" racecheck $RACE_CASES
    env "$SWITCH=0" timeout 300 "$B/tests/test_backend_cuda" >"$OUT/suite_cuda_$m.log" 2>&1
    say "test_backend_cuda ($SWITCH=0) exit $?: $(counts "$OUT/suite_cuda_$m.log")"
  done
  grep -h '^\[  FAILED  \] [^0-9]' "$OUT"/suite_cuda*.log | head -20 | tee -a "$SUMMARY"
fi

export PYTHONUNBUFFERED=1
# the libraries each bench runs with: this build's (B), then the baseline (A)
LIBS=("B=$B/libflashattn.so")
ROUNDS=1
if [ -n "${WS_AB_LIB:-}" ]; then
  A=$ROOT/build-a-lib/libflashattn.so
  mkdir -p "$(dirname "$A")"
  case $WS_AB_LIB in
    *.xz) xz -dc "$ROOT/$WS_AB_LIB" >"$A" ;;
    *) cp "$ROOT/$WS_AB_LIB" "$A" ;;
  esac || { say "cannot read WS_AB_LIB $WS_AB_LIB"; exit 1; }
  LIBS+=("A=$A")
  ROUNDS=${WS_AB_ROUNDS:-2}
fi
for m in "$@"; do
  mode_of "$m"
  args_var=WS_ARGS_$m
  args=${!args_var:-${WS_ARGS:-}}
  for ((r = 1; r <= ROUNDS; ++r)); do
    for lib in "${LIBS[@]}"; do
      tag=${lib%%=*} log=$OUT/bench_$m.txt
      [ ${#LIBS[@]} -gt 1 ] && log=$OUT/bench_${m}_${tag}$r.txt
      say "== $BENCH $args [${tag}, round $r] ($(date -u +%T))"
      # shellcheck disable=SC2086
      timeout "${WS_BENCH_S:-300}" python3 "$BENCH" --lib "${lib#*=}" $args >"$log" 2>&1
      say "exit $?"
      tee -a "$SUMMARY" <"$log"
    done
  done
done
say "== done ($(date -u +%T))"

#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# build, the ctest suite (cuda cases must run), the cuda check program,
# compute-sanitizer memcheck and racecheck on a representative subset, and
# the SDPA anchor benchmark. Logs and results go to $OUT (at most 8 files).
#
#   scripts/gpu/run.sh smoke   build + check + suite + one anchor shape
#   scripts/gpu/run.sh full    everything (default)
#   scripts/gpu/run.sh bench   build + anchors only
#   scripts/gpu/run.sh perf    build + check + tile-variant A/B timing + ncu
#   scripts/gpu/run.sh dev     build + check (Hopper and mma.sync forward) +
#                              test_backend_cuda + anchors with $ANCHOR_ARGS
#   scripts/gpu/run.sh bwd     the backward: build, check_cuda and the cuda
#                              suite (default; FLASHATTN_CUDA_WS_BWD=0: the
#                              cp.async wgmma backward; FLASHATTN_CUDA_WGMMA_BWD=0:
#                              mma.sync), memcheck / racecheck / synccheck on
#                              $BWD_SAN, backward anchors ($BWD_VARIANTS, $BWD_L,
#                              $BWD_D); BWD_ONE_SUITE=1 runs the suite once
#   scripts/gpu/run.sh suite   build + ctest without the compile-only tests, then
#                              test_backend_cuda alone (SUITE_DIRECT=0: not) and
#                              (SUITE_PYTEST=1) the Python suite on this build
#   scripts/gpu/run.sh decode  build + the kv-cache and merge tests (test_kvcache,
#                              test_cuda_graph, test_online_softmax, the cuda cases of
#                              tests/python/test_torch_kvcache.py), bench/gpu/decode.py
#                              ($DECODE_ARGS), test_backend_cuda, memcheck of
#                              test_kvcache and test_cuda_graph
#   scripts/gpu/run.sh fp8     build + the FP8 forward: test_fp8_cuda (cuda against
#                              ref, every option: the warp-specialized kernel by
#                              default, also with FLASHATTN_CUDA_FP8_WS=2 and =0,
#                              the cp.async kernel), test_fp8_ref,
#                              bench/gpu/fp8.py ($FP8_ARGS; both kernels side by
#                              side), memcheck and racecheck of test_fp8_cuda (ws;
#                              FP8_SAN_WS="2 0": both; FP8_SAN_VARIANTS="0 5":
#                              those FLASHATTN_CUDA_VARIANTs), ptxas report, then
#                              test_backend_cuda (the shared forward tile code)
#   scripts/gpu/run.sh ws      the warp-specialized (TMA) forward: check_cuda with it
#                              and without (FLASHATTN_CUDA_WS=0), test_backend_cuda,
#                              memcheck / racecheck on the cases it takes, forward
#                              anchors against the cp.async kernel (variant 2;
#                              $WS_VARIANTS, $WS_D), $WS_ARGS appended
#   scripts/gpu/run.sh ncu     build + Nsight Compute on the kernels matching
#                              $NCU_KERNEL (default bwd), variant $NCU_VARIANT
#                              (default 0), shapes $NCU_SHAPES ("D:L ...")
#
# Optionally carry .gpu-build.tar.xz too (scripts/gpu/prebuild.sh makes it here):
# then nothing is compiled on the GPU machine but check_cuda.
#
# Carry .gpu-deps (CMocka headers and library copied from the dev machine:
# the GPU image has no CMocka and no network).
# Make it once on the dev machine (Debian, libcmocka-dev installed), in the
# repository root, then call the device tool's run with carry [".gpu-deps"]:
#   echo /.gpu-deps/ >> .git/info/exclude
#   mkdir -p .gpu-deps/cmocka/include .gpu-deps/cmocka/lib
#   cp /usr/include/cmocka*.h .gpu-deps/cmocka/include/
#   cp -P /usr/lib/x86_64-linux-gnu/libcmocka.so* .gpu-deps/cmocka/lib/
set -u
MODE=${1:-full}
VARIANTS=${VARIANTS:-0} # FLASHATTN_CUDA_VARIANT values to check and time (A/B of tile configurations)
OUT=${OUT:-/tmp/fa-out}
mkdir -p "$OUT"
ROOT=$(pwd)
BUILD=$ROOT/build-gpu
JOBS=$(nproc)
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
stage() { say "== $1 ($(date +%T))"; }
# CMocka's verdict lines in a suite log, counted; the failed cases named
suite_counts() {
  local failed
  failed=$(grep -E '^\[  FAILED  \] [^0-9]' "$1" | sort -u)
  echo "$(grep -c '\[       OK \]' "$1") OK, $(grep -c '\[  SKIPPED \]' "$1") skipped, $(printf '%s' "$failed" | grep -c .) failed"
  printf '%s' "$failed" | head -10
}

stage "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$SUMMARY"
nvcc --version | tail -1 | tee -a "$SUMMARY"

stage "build"
CM=$ROOT/.gpu-deps/cmocka
export LD_LIBRARY_PATH=$CM/lib:${LD_LIBRARY_PATH:-}
TESTS=ON
[ "$MODE" = bench ] || [ "$MODE" = perf ] || [ "$MODE" = ncu ] && TESTS=OFF
ANCHOR_ARGS=${ANCHOR_ARGS:---d 64,128 --l 2048,8192 --passes fwd --variants 0,1,mma --reps 10}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cfg() {
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DFA_BUILD_TESTS=$TESTS -DFA_BUILD_CLI=OFF -DCMOCKA_INCLUDE_DIR="$CM/include" \
    -DCMOCKA_LIBRARY="$CM/lib/libcmocka.so" "$@" >"$OUT/build.log" 2>&1
}
[ -f "$ROOT/.gpu-build.tar.xz" ] &&
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$ROOT/.gpu-build.tar.xz" "$ROOT"
if [ -f "$ROOT/.gpu-build/CMakeCache.txt" ]; then
  # A build made on the dev machine (same nvcc; the GPU host compiles the
  # wgmma kernels slowly), carried as .gpu-build.tar.xz: its absolute paths name
  # the dev checkout, so that path is made to lead here.
  OLD=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$ROOT/.gpu-build/CMakeCache.txt")
  rm -rf "$BUILD" && mv "$ROOT/.gpu-build" "$BUILD"
  if [ "$OLD" != "$ROOT" ]; then
    [ -e "$OLD" ] || { mkdir -p "$(dirname "$OLD")" && ln -s "$ROOT" "$OLD"; }
  fi
  say "carried build (configured at $OLD; made by scripts/gpu/prebuild.sh)"
else
  # the cpu backend belongs to another work stream: build without it if it
  # does not configure yet, so the cuda checks still run
  cfg || { say "configure failed; retrying without the cpu backend"; rm -rf "$BUILD"; cfg -DFA_WITH_CPU=OFF; } ||
    { say "configure failed"; tail -30 "$OUT/build.log"; exit 1; }
  t0=$(date +%s)
  if ! cmake --build "$BUILD" -j"$JOBS" >>"$OUT/build.log" 2>&1; then
    say "build failed"; grep -m20 -B2 -A6 "error" "$OUT/build.log"; exit 1
  fi
  say "build ok in $(($(date +%s) - t0)) s"
fi
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
cc -O2 scripts/gpu/check_cuda.c -I include -I "$CUDA_HOME/include" -L "$BUILD" -lflashattn \
  -L "$CUDA_HOME/lib64" -lcudart -lm -Wl,-rpath,"$BUILD" -o "$BUILD/check_cuda" || { say "check_cuda build failed"; exit 1; }

if [ "$MODE" = suite ]; then
  stage "ctest (cuda_wgmma_async_* excluded: compile-only, slow on this host)"
  (cd "$BUILD" && timeout "${SUITE_CTEST_S:-500}" ctest -j"$JOBS" -E cuda_wgmma_async --output-on-failure >"$OUT/ctest.log" 2>&1)
  say "ctest exit $?"
  grep -E "Test +#|tests passed|Skipped|Failed|\*\*\*" "$OUT/ctest.log" | head -30 | tee -a "$SUMMARY"
  if [ "${SUITE_DIRECT:-1}" = 1 ]; then
    "$BUILD/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$OUT/suite_cuda.log")"
    grep -E "determin" "$OUT/suite_cuda.log" | tee -a "$SUMMARY"
  fi
  if [ "${SUITE_PYTEST:-0}" = 1 ]; then # the Python suite on this build's library, CUDA tensors included
    stage "pytest tests/python"
    FLASHATTN_LIBRARY=$BUILD/libflashattn.so PYTHONPATH=$ROOT/python timeout "${SUITE_PYTEST_S:-300}" \
      python3 -m pytest tests/python -q -rs -p no:cacheprovider >"$OUT/pytest.log" 2>&1
    say "pytest exit $?: $(tail -1 "$OUT/pytest.log")"
    grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20 | tee -a "$SUMMARY"
  fi
  stage "done"
  exit 0
fi

if [ "$MODE" = decode ]; then
  # most important first (the whole command may be cut short by the device
  # tool's limit; $OUT keeps what was written): the kv-cache tests, the
  # benchmark, then (DECODE_SUITE=1) test_backend_cuda and memcheck.
  stage "kv-cache tests"
  for t in test_kvcache test_cuda_graph test_online_softmax; do
    timeout "${DECODE_TEST_S:-60}" "$BUILD/tests/$t" >"$OUT/$t.log" 2>&1
    say "$t exit $?: $(suite_counts "$OUT/$t.log")"
  done
  # the CUDA-core decode kernel on the shapes that take the tensor-core one by default
  FLASHATTN_CUDA_DECODE_MMA=0 timeout "${DECODE_TEST_S:-60}" "$BUILD/tests/test_kvcache" >"$OUT/test_kvcache_cores.log" 2>&1
  say "test_kvcache (FLASHATTN_CUDA_DECODE_MMA=0) exit $?: $(suite_counts "$OUT/test_kvcache_cores.log")"
  grep -E "FAILED|err |differ|status|WRONG|cuda" "$OUT/test_kvcache.log" "$OUT/test_cuda_graph.log" | head -30 |
    tee -a "$SUMMARY"
  stage "pytest: the kv-cache calls on cuda tensors (CUDA graphs included)"
  FLASHATTN_LIBRARY=$BUILD/libflashattn.so PYTHONPATH=$ROOT/python timeout 200 python3 -m pytest \
    tests/python/test_torch_kvcache.py -q -rs -p no:cacheprovider -k cuda >"$OUT/pytest_kvcache.log" 2>&1
  say "pytest exit $?: $(tail -1 "$OUT/pytest_kvcache.log")"
  grep -E "^FAILED|Error" "$OUT/pytest_kvcache.log" | head -10 | tee -a "$SUMMARY"
  stage "decode benchmark"
  export PYTHONUNBUFFERED=1
  # shellcheck disable=SC2086
  timeout "${DECODE_BENCH_S:-240}" python3 bench/gpu/decode.py --lib "$BUILD/libflashattn.so" --out "$OUT" \
    ${DECODE_ARGS:-} 2>&1 | tee "$OUT/decode_run.txt" >>"$SUMMARY"
  if [ "${DECODE_SUITE:-1}" = 1 ]; then
    stage "test_backend_cuda"
    timeout 300 "$BUILD/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$OUT/suite_cuda.log")"
    stage "memcheck test_kvcache"
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/test_kvcache" >"$BUILD/san.log" 2>&1
    say "memcheck test_kvcache exit $?"
    grep -E "ERROR SUMMARY|Invalid" "$BUILD/san.log" | sort | uniq -c | head -10 | tee -a "$SUMMARY"
    timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/tests/test_cuda_graph" >"$BUILD/san2.log" 2>&1
    say "memcheck test_cuda_graph exit $?"
    grep -E "ERROR SUMMARY|Invalid" "$BUILD/san2.log" | sort | uniq -c | head -10 | tee -a "$SUMMARY"
  fi
  stage "done"
  exit 0
fi

if [ "$MODE" = fp8 ]; then
  # most important first (the device tool may cut the command short; $OUT
  # keeps what was written)
  stage "FP8 tests"
  for t in test_fp8_cuda test_fp8_ref; do
    timeout "${FP8_TEST_S:-120}" "$BUILD/tests/$t" >"$OUT/$t.log" 2>&1
    say "$t exit $?: $(suite_counts "$OUT/$t.log")"
  done
  grep -E "FAILED|ERROR|o\[|lse\[|near an e4m3" "$OUT/test_fp8_cuda.log" | head -30 | tee -a "$SUMMARY"
  # the warp-specialized kernel (FLASHATTN_CUDA_FP8_WS=2: as 1, but a call in its scope it cannot take
  # fails instead of falling back; VARIANT=5: its first version, 6: the default with turn-taking,
  # launch_fwd_fp8.cuh; FP8_WS_VARIANTS="0 9 10 11": others); logs in $BUILD
  for v in ${FP8_WS_VARIANTS:-0 5 6}; do
    FLASHATTN_CUDA_FP8_WS=2 FLASHATTN_CUDA_VARIANT=$v timeout "${FP8_TEST_S:-120}" "$BUILD/tests/test_fp8_cuda" \
      >"$BUILD/test_fp8_cuda_ws$v.log" 2>&1
    say "test_fp8_cuda (FLASHATTN_CUDA_FP8_WS=2 VARIANT=$v) exit $?: $(suite_counts "$BUILD/test_fp8_cuda_ws$v.log")"
    grep -E "FAILED|ERROR|o\[|lse\[|near an e4m3" "$BUILD/test_fp8_cuda_ws$v.log" | head -20 | tee -a "$SUMMARY"
  done
  FLASHATTN_CUDA_FP8_WS=0 timeout "${FP8_TEST_S:-120}" "$BUILD/tests/test_fp8_cuda" >"$BUILD/test_fp8_cuda_cp.log" 2>&1
  say "test_fp8_cuda (FLASHATTN_CUDA_FP8_WS=0: the cp.async kernel) exit $?: $(suite_counts "$BUILD/test_fp8_cuda_cp.log")"
  for v in 1 2; do # the D = 128 kernel's other loop orders (FLASHATTN_CUDA_VARIANT, launch_fwd_fp8.cuh)
    FLASHATTN_CUDA_VARIANT=$v timeout "${FP8_TEST_S:-120}" "$BUILD/tests/test_fp8_cuda" >"$OUT/test_fp8_cuda_v$v.log" 2>&1
    say "test_fp8_cuda (FLASHATTN_CUDA_VARIANT=$v) exit $?: $(suite_counts "$OUT/test_fp8_cuda_v$v.log")"
  done
  stage "FP8 benchmark"
  export PYTHONUNBUFFERED=1
  # the accuracy rows use flashattn.torch.fp8_quantize (the package on this build's library)
  # shellcheck disable=SC2086
  FLASHATTN_LIBRARY=$BUILD/libflashattn.so PYTHONPATH=$ROOT/python \
    timeout "${FP8_BENCH_S:-300}" python3 bench/gpu/fp8.py --lib "$BUILD/libflashattn.so" ${FP8_ARGS:-} 2>&1 |
    tee "$OUT/fp8_bench.txt" >>"$SUMMARY"
  stage "compute-sanitizer on test_fp8_cuda"
  # FP8_SAN_VARIANTS: the FLASHATTN_CUDA_VARIANTs of those runs (default 0; e.g. "0 5")
  for ws in ${FP8_SAN_WS:-2}; do # the warp-specialized kernel ("2 0": the cp.async one too, verified clean before)
    for sv in ${FP8_SAN_VARIANTS:-0}; do
      for tool in memcheck racecheck; do
        FLASHATTN_CUDA_FP8_WS=$ws FLASHATTN_CUDA_VARIANT=$sv timeout 200 compute-sanitizer --tool $tool \
          --error-exitcode 9 "$BUILD/tests/test_fp8_cuda" >"$BUILD/san_${tool}_ws${ws}_v$sv.log" 2>&1
        say "$tool test_fp8_cuda (FLASHATTN_CUDA_FP8_WS=$ws VARIANT=$sv) exit $?"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" "$BUILD/san_${tool}_ws${ws}_v$sv.log" | sort |
          uniq -c | head -10 | tee -a "$SUMMARY"
      done
    done
  done
  grep -h -A2 "fwd_fp8_kernel\|fwd_fp8_ws_kernel" "$BUILD"/src/cuda/CMakeFiles/fa_cuda_sm90a.dir/launch_fwd_fp8_*.ptxas.log 2>/dev/null |
    grep -E "Compiling|spill|registers" | sed 's/ptxas info *: //' >"$OUT/fp8_ptxas.txt"
  if [ "${FP8_SUITE:-1}" = 1 ]; then
    stage "test_backend_cuda"
    timeout 300 "$BUILD/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$OUT/suite_cuda.log")"
  fi
  stage "done"
  exit 0
fi

if [ "$MODE" = ws ]; then
  stage "check_cuda (warp-specialized forward, then FLASHATTN_CUDA_WS=0)"
  timeout 180 "$BUILD/check_cuda" >"$OUT/check.log" 2>&1
  say "check_cuda exit $?: $(tail -1 "$OUT/check.log")"
  grep -E "FAIL" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
  FLASHATTN_CUDA_WS=0 timeout 180 "$BUILD/check_cuda" >"$BUILD/check_cp.log" 2>&1
  say "check_cuda (FLASHATTN_CUDA_WS=0) exit $?: $(tail -1 "$BUILD/check_cp.log")"
  if [ "${SKIP_SUITE:-0}" = 0 ]; then
    timeout 300 "$BUILD/tests/test_backend_cuda" >"$OUT/suite_cuda.log" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$OUT/suite_cuda.log")"
  fi
  for c in bf16_d128_causal_L700 f16_d128_L333x517 bf16_d128_mqa_blhd f16_d96_Dv40_L200 f16_d64_window_br_dead \
    bf16_d32_L1000 bf16_d128_seqlens bf16_d64_varlen_causal_br; do
    for tool in memcheck racecheck; do
      timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/check_cuda" "$c" >>"$OUT/sanitizer.log" 2>&1
      say "$tool $c: exit $?"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard" "$OUT/sanitizer.log" | sort | uniq -c | head -10 |
    tee -a "$SUMMARY"
  stage "anchors (forward; fa = warp-specialized, fa-v2 = cp.async pipelined)"
  export PYTHONUNBUFFERED=1
  # shellcheck disable=SC2086
  timeout "${WS_BENCH_S:-300}" python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" \
    --d "${WS_D:-64,128}" --l 2048,4096,8192,16384 --passes fwd --variants "${WS_VARIANTS:-0,2}" --reps 10 \
    ${WS_ARGS:-} 2>&1 | tee "$OUT/anchors.txt"
  stage "done"
  exit 0
fi

if [ "$MODE" = ncu ]; then
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for shape in ${NCU_SHAPES:-128:4096 64:4096}; do
    stage "ncu ${NCU_KERNEL:-bwd} variant ${NCU_VARIANT:-0} D:L=$shape"
    timeout 200 "$NCU" --clock-control none --kernel-name regex:"${NCU_KERNEL:-bwd}" --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
      --section SourceCounters python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --d "${shape%:*}" \
      --l "${shape#*:}" --causal 0 --once --variants "${NCU_VARIANT:-0}" >"$OUT/ncu-${shape/:/-}.txt" 2>&1
    say "ncu exit $?"
  done
  stage "done"
  exit 0
fi

if [ "$MODE" != bench ] && [ "$MODE" != bwd ]; then
  stage "check_cuda (cuda vs ref on multi-tile shapes)"
  timeout 300 "$BUILD/check_cuda" >"$OUT/check.log" 2>&1
  say "check_cuda exit $?"
  grep -E "FAIL|cuda (forward|backward)|ref (forward|backward)|check_cuda:" "$OUT/check.log" | head -40 | tee -a "$SUMMARY"
  if [ "$MODE" = full ] || { [ "$MODE" = dev ] && [ "${SKIP_MMA:-0}" = 0 ]; }; then
    FLASHATTN_CUDA_WGMMA=0 timeout 300 "$BUILD/check_cuda" >"$BUILD/check_mma.log" 2>&1
    say "check_cuda (FLASHATTN_CUDA_WGMMA=0: mma.sync forward) exit $?: $(tail -1 "$BUILD/check_mma.log")"
    grep FAIL "$BUILD/check_mma.log" | head -20 | tee -a "$SUMMARY"
  fi
  for v in $VARIANTS; do
    [ "$v" = 0 ] && continue
    FLASHATTN_CUDA_VARIANT=$v timeout 300 "$BUILD/check_cuda" >"$BUILD/check_v$v.log" 2>&1
    say "check_cuda (FLASHATTN_CUDA_VARIANT=$v) exit $?: $(tail -1 "$BUILD/check_v$v.log")"
    grep FAIL "$BUILD/check_v$v.log" | head -20 | tee -a "$SUMMARY"
    { echo "== FLASHATTN_CUDA_VARIANT=$v"; cat "$BUILD/check_v$v.log"; } >>"$OUT/check.log"
  done

  if [ "$MODE" = dev ] && [ "${SKIP_SUITE:-0}" = 1 ]; then
    say "test_backend_cuda skipped (SKIP_SUITE=1)"
  elif [ "$MODE" = dev ]; then
    SUITE=$BUILD/suite_cuda.log
    timeout 300 "$BUILD/tests/test_backend_cuda" >"$SUITE" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$SUITE")"
    grep -E "FAILED|ERROR|Error|error" "$SUITE" | head -20 | tee -a "$SUMMARY"
    cp "$SUITE" "$OUT/suite_cuda.log"
  elif [ "$TESTS" = ON ] && [ -d "$BUILD/tests" ]; then
    stage "ctest"
    (cd "$BUILD" && timeout 600 ctest -j"$JOBS" --output-on-failure >"$OUT/ctest.log" 2>&1)
    say "ctest exit $?"
    grep -E "tests passed|Skipped|Failed|\*\*\*" "$OUT/ctest.log" | head -30 | tee -a "$SUMMARY"
    # the cuda program on its own: its cases must run, not skip
    SUITE=$BUILD/suite_cuda.log
    "$BUILD/tests/test_backend_cuda" >"$SUITE" 2>&1
    say "test_backend_cuda exit $?: $(suite_counts "$SUITE")"
    { echo "== test_backend_cuda on its own"; cat "$SUITE"; } >>"$OUT/ctest.log"
  fi
fi

if [ "$MODE" = full ] || [ "$MODE" = smoke ] || [ "$MODE" = dev ]; then
  stage "compute-sanitizer"
  SAN=$OUT/sanitizer.log
  : >"$SAN"
  SUBSET_MEM="bf16_d64_varlen_causal_br f32_d64_everything bf16_d256_everything bf16_d128_seqlens"
  SUBSET_RACE="bf16_d128_seqlens f16_d64_gqa_causal_blhd"
  [ "$MODE" != full ] && SUBSET_MEM="bf16_d64_varlen_causal_br" && SUBSET_RACE="bf16_d128_seqlens"
  for c in $SUBSET_MEM; do
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$BUILD/check_cuda" "$c" >>"$SAN" 2>&1
    say "memcheck $c: exit $?"
  done
  for c in $SUBSET_RACE; do
    timeout 300 compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 9 "$BUILD/check_cuda" "$c" >>"$SAN" 2>&1
    say "racecheck $c: exit $?"
  done
  for v in $VARIANTS; do
    [ "$v" = 0 ] && continue
    for tool in memcheck racecheck; do
      FLASHATTN_CUDA_VARIANT=$v timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/check_cuda" \
        bf16_d128_seqlens >>"$SAN" 2>&1
      say "$tool bf16_d128_seqlens (variant $v): exit $?"
    done
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race" "$SAN" | sort | uniq -c | head -20 | tee -a "$SUMMARY"
fi

if [ "$MODE" = bwd ]; then
  stage "backward (Hopper; FLASHATTN_CUDA_WGMMA_BWD=0: mma.sync)"
  timeout 180 "$BUILD/check_cuda" >"$OUT/check.log" 2>&1 # 77 s on a fresh H200 (2026-12-02): 90 cut it once
  rc=$?
  say "check_cuda exit $rc: $(tail -1 "$OUT/check.log")"
  grep -E "FAIL" "$OUT/check.log" | head -20 | tee -a "$SUMMARY"
  # a wrong or hung kernel: stop here rather than spend the device time on the rest
  [ $rc -ne 0 ] && [ -z "${BWD_GO_ON:-}" ] && say "stopped: check_cuda failed" && exit 1
  SUITE=$OUT/suite_cuda.log
  timeout 200 "$BUILD/tests/test_backend_cuda" >"$SUITE" 2>&1
  say "test_backend_cuda (wgmma backward) exit $?: $(suite_counts "$SUITE")"
  if [ "${BWD_ONE_SUITE:-0}" = 0 ]; then # BWD_ONE_SUITE=1: the default kernels' run only
    FLASHATTN_CUDA_WS_BWD=0 timeout 200 "$BUILD/tests/test_backend_cuda" >"$BUILD/suite_wgmma.log" 2>&1
    say "test_backend_cuda (cp.async wgmma backward) exit $?: $(suite_counts "$BUILD/suite_wgmma.log")"
    FLASHATTN_CUDA_WGMMA_BWD=0 timeout 200 "$BUILD/tests/test_backend_cuda" >"$BUILD/suite_mma.log" 2>&1
    say "test_backend_cuda (mma.sync backward) exit $?: $(suite_counts "$BUILD/suite_mma.log")"
  fi
  # the warp-specialized backward's cases (dense, band-only), then the cp.async one's
  for c in ${BWD_SAN:-f16_d128_L333x517 f16_d64_gqa_causal_blhd f16_d96_Dv40_L200 bf16_d128_seqlens}; do
    for tool in memcheck racecheck synccheck; do
      timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/check_cuda" \
        "$c" >>"$OUT/sanitizer.log" 2>&1
      say "$tool $c: exit $?"
    done
  done
  stage "anchors (backward variants ${BWD_VARIANTS:-0,mbwd}: 0 = default, 2 = cp.async wgmma, 6 = ws 3 slots, mbwd = mma.sync)"
  # shellcheck disable=SC2086
  timeout 300 python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" --passes bwd \
    --variants ${BWD_VARIANTS:-0,mbwd} --reps 10 --l ${BWD_L:-2048,4096,16384} --d ${BWD_D:-64,128} 2>&1 |
    tee "$OUT/anchors.txt"
  stage "done"
  exit 0
fi

stage "anchors"
export PYTHONUNBUFFERED=1
if [ "$MODE" = perf ]; then
  timeout 300 python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" --d 64,128 --l 2048,8192 \
    --reps 10 --variants 0,1 2>&1 | tee "$OUT/anchors.txt"
  stage "ncu (D=128, L=4096, non-causal; forward, backward, deterministic backward)"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 240 "$NCU" --clock-control none --kernel-name regex:"fwd_kernel|bwd_dkdv|bwd_dq" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --d 128 --l 4096 --causal 0 --once \
    >"$OUT/ncu.txt" 2>&1
  say "ncu exit $?"
  grep -E "fwd_kernel|bwd_dkdv|bwd_dq|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Stall|Issue Slot|Shared.*Bank|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -80
elif [ "$MODE" = dev ]; then
  # shellcheck disable=SC2086
  timeout 400 python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" $ANCHOR_ARGS 2>&1 |
    tee "$OUT/anchors.txt"
elif [ "$MODE" = smoke ]; then
  timeout 300 python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" --d 64,128 --l 4096 --reps 10 \
    2>&1 | tee "$OUT/anchors.txt"
else
  read -r -d "" -a vs <<<"$VARIANTS" || true # split as the check loop's `for v in $VARIANTS` does
  timeout 540 python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --out "$OUT" \
    --variants "$(IFS=,; echo "${vs[*]}")" 2>&1 | tee "$OUT/anchors.txt"
  if [ "$MODE" = full ]; then
    stage "ncu (Hopper forward and backward kernels, D=64, L=2048, non-causal)"
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    timeout 150 "$NCU" --clock-control none --kernel-name regex:wgmma --launch-count 4 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      python3 bench/gpu/anchors.py --lib "$BUILD/libflashattn.so" --d 64 --l 2048 --causal 0 --once \
      >"$OUT/ncu.txt" 2>&1
    say "ncu exit $?"
  fi
fi
stage "done"

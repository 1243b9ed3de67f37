#!/usr/bin/env bash
# Builds, on the dev machine, what scripts/gpu/run.sh would build on the GPU
# machine (same configuration, in build-gpu/), and copies it without object
# files to .gpu-build.tar.xz (about 3 MiB: the test programs hold the same
# library, which a 64 MiB xz dictionary stores once) for the device tool's
# carry: [".gpu-deps", ".gpu-build.tar.xz"]. Needs .gpu-deps (see run.sh).
#
#   DECODE_TRACE=1 scripts/gpu/prebuild.sh   the same with the decode kernels'
#   per-block timeline compiled in (bench/gpu/decode.py --trace).
#
#   scripts/gpu/prebuild.sh python   instead builds only libflashattn.so (sm_90,
#   no tests) into .gpu-py/ for scripts/gpu/python.sh: carry [".gpu-py"].
#   scripts/gpu/prebuild.sh cpu      instead builds the cpu backend alone (no CUDA:
#   libflashattn.so, the flashattn CLI, the cpu test programs) in build/gpu-cpu and
#   packs them into .gpu-cpu.tar.xz for scripts/gpu/cpu_amx.sh (the host CPU's AMX
#   run): carry [".gpu-deps", ".gpu-cpu.tar.xz"].
set -eu
ROOT=$(pwd)
if [ "${1:-}" = cpu ]; then
  for x in /.gpu-cpu/ /.gpu-cpu.tar.xz; do
    grep -qx "$x" .git/info/exclude 2>/dev/null || echo "$x" >>.git/info/exclude
  done
  CM=$ROOT/.gpu-deps/cmocka
  B=$ROOT/build/gpu-cpu
  cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DFA_WITH_CUDA=OFF -DFA_BUILD_TESTS=ON -DFA_BUILD_CLI=ON \
    -DCMOCKA_INCLUDE_DIR="$CM/include" -DCMOCKA_LIBRARY="$CM/lib/libcmocka.so" >/dev/null
  cmake --build "$B" -j"$(nproc)" >/dev/null
  P=$ROOT/.gpu-cpu
  rm -rf "$P"
  mkdir -p "$P/bin" "$P/lib" "$P/fallback"
  cp -L "$B/libflashattn.so" "$P/lib/libflashattn.so"
  cp "$B/cli/flashattn" "$P/bin/"
  for t in test_cpu_bf16 test_backend_cpu test_dispatch test_kvcache test_threads test_cpu_philox test_bad_input \
    test_online_softmax; do
    [ -x "$B/tests/$t" ] && cp "$B/tests/$t" "$P/bin/"
  done
  # the host may lack libgomp outside torch's wheel: cpu_amx.sh uses this copy only then
  cp -L "$(gcc -print-file-name=libgomp.so.1)" "$P/fallback/" 2>/dev/null || true
  git rev-parse --short HEAD >"$P/commit"
  git status --short --untracked-files=no -- src include tests bench cli >"$P/dirty" || true
  tar -cf - .gpu-cpu | xz -9 -T1 >.gpu-cpu.tar.xz
  rm -rf "$P"
  du -h .gpu-cpu.tar.xz
  exit 0
fi
if [ "${1:-}" = python ]; then
  grep -qx "/.gpu-py/" .git/info/exclude 2>/dev/null || echo "/.gpu-py/" >>.git/info/exclude
  cmake -S "$ROOT" -B "$ROOT/build/gpu-py" -DCMAKE_BUILD_TYPE=Release -DFA_CUDA_ARCHS=90 -DFA_BUILD_TESTS=OFF \
    -DFA_BUILD_CLI=OFF >/dev/null
  cmake --build "$ROOT/build/gpu-py" -j"$(nproc)" >/dev/null
  mkdir -p "$ROOT/.gpu-py"
  cp -L "$ROOT/build/gpu-py/libflashattn.so" "$ROOT/.gpu-py/libflashattn.so"
  du -h "$ROOT/.gpu-py/libflashattn.so"
  exit 0
fi
CM=$ROOT/.gpu-deps/cmocka
MODE=${1:-tests} # tests | notests (as run.sh's bench, perf and ncu modes)
TESTS=ON
[ "$MODE" = notests ] && TESTS=OFF
# DECODE_TRACE=1: the decode kernels' per-block timeline (src/cuda/decode_trace.cuh; a
# benchmark instrument for bench/gpu/decode.py --trace), off otherwise
TRACE=OFF
[ "${DECODE_TRACE:-0}" = 1 ] && TRACE=ON
for x in /.gpu-build/ /.gpu-build.tar.xz; do
  grep -qx "$x" .git/info/exclude 2>/dev/null || echo "$x" >>.git/info/exclude
done
cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFA_CUDA_DECODE_TRACE="$TRACE" -DFA_BUILD_TESTS=$TESTS -DFA_BUILD_CLI=OFF -DCMOCKA_INCLUDE_DIR="$CM/include" \
  -DCMOCKA_LIBRARY="$CM/lib/libcmocka.so" >/dev/null
cmake --build "$ROOT/build-gpu" -j"$(nproc)" >/dev/null
rm -rf "$ROOT/.gpu-build"
cp -a "$ROOT/build-gpu" "$ROOT/.gpu-build"
find "$ROOT/.gpu-build" \( -name '*.o' -o -name '*.a' -o -name '*.d' -o -name '.ninja_*' \) -delete
# what the pack was built from, for an A/B's record (scripts/gpu/ab.sh prints both)
{
  git rev-parse --short HEAD
  git diff HEAD -- src include tests | sha1sum | cut -c1-12
} >"$ROOT/.gpu-build/commit"
tar -cf - .gpu-build | xz -9 -T1 >.gpu-build.tar.xz
rm -rf "$ROOT/.gpu-build"
du -h .gpu-build.tar.xz

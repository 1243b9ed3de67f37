#!/usr/bin/env bash
# Builds, on the dev machine, what scripts/gpu/run.sh would build on the GPU
# machine (same configuration, in build-gpu/), and copies it without object
# files to .gpu-build.tar.xz (about 3 MiB: the test programs hold the same
# library, which a 64 MiB xz dictionary stores once) for the device tool's
# carry: [".gpu-deps", ".gpu-build.tar.xz"]. Needs .gpu-deps (see run.sh).
#
#   scripts/gpu/prebuild.sh python   instead builds only libflashattn.so (sm_90,
#   no tests) into .gpu-py/ for scripts/gpu/python.sh: carry [".gpu-py"].
set -eu
ROOT=$(pwd)
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
for x in /.gpu-build/ /.gpu-build.tar.xz; do
  grep -qx "$x" .git/info/exclude 2>/dev/null || echo "$x" >>.git/info/exclude
done
cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFA_BUILD_TESTS=$TESTS -DFA_BUILD_CLI=OFF -DCMOCKA_INCLUDE_DIR="$CM/include" \
  -DCMOCKA_LIBRARY="$CM/lib/libcmocka.so" >/dev/null
cmake --build "$ROOT/build-gpu" -j"$(nproc)" >/dev/null
rm -rf "$ROOT/.gpu-build"
cp -a "$ROOT/build-gpu" "$ROOT/.gpu-build"
find "$ROOT/.gpu-build" \( -name '*.o' -o -name '*.a' -o -name '*.d' -o -name '.ninja_*' \) -delete
tar -cf - .gpu-build | xz -9 -T1 >.gpu-build.tar.xz
rm -rf "$ROOT/.gpu-build"
du -h .gpu-build.tar.xz

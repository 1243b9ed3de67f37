#!/bin/sh
# ctest cuda_ldgsts_policy: guards against a ptxas 13.0 miscompile of
# cp.async with an L2 cache policy (src/cuda/mma.cuh, cp_async16_policy,
# which the decode kernels' K/V copies use). Where ptxas folds a uniform
# shared-memory offset into such a copy ([R + UR] addressing), the SASS
# reads the copy's cache descriptor from a uniform register that nothing
# writes, and the kernel stops on the GPU with "illegal instruction". No
# correct build of the decode kernels has an LDGSTS with a uniform offset,
# so this disassembles the decode objects the build made and fails on any.
# Needs cuobjdump and nvdisasm (CUDA's, or the nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels: .ci/run installs them; scripts/gpu/sass.sh
# fetches them into .gpu-tools/), not a GPU; skipped (77) without them.
# Arguments: the objects ($<TARGET_OBJECTS:...>; ';' separators split here).
set -u
objs=$(printf '%s\n' "$@" | tr ';' '\n' | grep '/decode_[a-z0-9]*\.cu\.o$')
[ -n "$objs" ] || { echo "FAIL: no decode objects among the arguments"; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
bin=
for d in ${FA_CUDA_TOOLS_BIN:-} "$(dirname "$(command -v cuobjdump 2>/dev/null || echo /none/x)")" \
  "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/x)")" "$root/.gpu-tools/nvidia/cu13/bin" \
  $(python3 -c 'import nvidia, os; print(*[os.path.join(p, "cu13", "bin") for p in nvidia.__path__])' 2>/dev/null); do
  if [ -x "$d/cuobjdump" ] && [ -x "$d/nvdisasm" ]; then
    bin=$d
    break
  fi
done
[ -n "$bin" ] || { echo "SKIP: no cuobjdump + nvdisasm (CUDA's, or the nvidia-cuda-cuobjdump/-nvdisasm wheels)"; exit 77; }
fail=0
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
for o in $objs; do
  PATH=$bin:$PATH "$bin/cuobjdump" -sass "$o" >"$sass" 2>&1 || { echo "FAIL: cuobjdump $o"; fail=1; continue; }
  awk -v obj="$(basename "$o")" '
    /Function : / { fn = $NF; next }
    /LDGSTS/ {
      n++
      if ($0 ~ /\[[^]]*\+UR[0-9]+/) {
        bad++
        line = $0; sub(/^ *\/\*[0-9a-f]+\*\/ */, "", line); sub(/ *;.*$/, "", line)
        if (bad <= 5) print "  " fn ": " line
      }
    }
    END {
      printf "%s: %d LDGSTS, %d with a uniform shared-memory offset\n", obj, n, bad
      exit (bad > 0 || n == 0)
    }' "$sass" || fail=1
done
[ $fail = 0 ] && echo "PASS" || echo "FAIL: see above (src/cuda/mma.cuh, cp_async16_policy)"
exit $fail

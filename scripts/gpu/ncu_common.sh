# Sourced by ncu_ws.sh and ncu_source.sh (in the repository root on the GPU
# machine): summary.sh, the carried build in build-gpu, NCU (Nsight
# Compute's command line), and ncu_job JOB, which sets prog (the program
# ncu runs) and regex (the kernel it profiles) for a job
# kernel-regex:D:L:causal: fp8_ws runs bench/gpu/fp8.py (one timed call, no
# accuracy rows), the others bench/gpu/anchors.py --once (forward,
# backward, deterministic backward).
# shellcheck shell=bash disable=SC2034  # prog, regex and NCU are the sourcing script's
# shellcheck source=scripts/gpu/summary.sh
. scripts/gpu/summary.sh

[ -d build-gpu ] || extract "$ROOT/.gpu-build.tar.xz" build-gpu
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || find /opt/nvidia/nsight-compute -name ncu -type f 2>/dev/null | head -1)
say "== ncu: $NCU ($("$NCU" --version | tail -1)) $(date +%T)"

ncu_job() {
  local kern D L causal
  IFS=: read -r kern D L causal <<<"$1"
  if [ "$kern" = fp8_ws ]; then
    prog=(python3 bench/gpu/fp8.py --lib build-gpu/libflashattn.so --d "$D" --l "$L" --causal "$causal" --reps 1
      --acc-l 0)
    regex=fwd_fp8_ws
  else
    prog=(python3 bench/gpu/anchors.py --lib build-gpu/libflashattn.so --d "$D" --l "$L" --causal "$causal" --once
      --variants 0)
    regex=$kern
  fi
}

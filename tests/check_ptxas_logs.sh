#!/bin/sh
# ctest cuda_wgmma_async: the Hopper kernels are fast only while every wgmma
# stays asynchronous, and ptxas says when it had to serialize them (C7514:
# an accumulator read it could not prove to follow its wait). This reads the
# ptxas reports the build kept next to each object (cmake/nvcc_ptxas_log.sh)
# instead of compiling anything again. Arguments: the objects (CMake passes
# $<TARGET_OBJECTS:...>, whose ';' separators are split here).
# Fails on C7514 / "serialized" in any log; on a missing log, or one older
# than its object; and unless the wgmma forward and backward kernels were
# compiled (so it never passes on empty logs). Reports every kernel that
# spills (reported, not failed: some spill a few bytes by choice; see
# src/cuda/README.md).
set -u
objs=$(printf '%s\n' "$@" | tr ';' '\n' | sed '/^$/d')
[ -n "$objs" ] || { echo "FAIL: no objects given"; exit 1; }
fail=0
need_fwd=1
need_bwd=1
for o in $objs; do
  log=$o.ptxas.log
  # the kernels each Hopper file must have compiled (mangled: fa_cuda::NAME)
  case $(basename "$o") in
    launch_fwd_wgmma_*) want="16fwd_wgmma_kernel 13fwd_ws_kernel" need_fwd=0 ;;
    launch_bwd_wgmma_*) want="16bwd_wgmma_kernel 19bwd_dq_wgmma_kernel 13bwd_ws_kernel 21bwd_wide_wgmma_kernel" need_bwd=0 ;;
    launch_fwd_fp8_*) want="14fwd_fp8_kernel" ;;
    *) want="" ;;
  esac
  if [ ! -f "$log" ]; then
    echo "FAIL: no ptxas log for $o (was it built through cmake/nvcc_ptxas_log.sh?)"
    fail=1
    continue
  fi
  if [ -n "$(find "$o" -newer "$log")" ]; then
    echo "FAIL: $log is older than its object"
    fail=1
  fi
  if grep -n -E 'C7514|serialized' "$log"; then
    echo "FAIL: ptxas serialized wgmma in $(basename "$o")"
    fail=1
  fi
  for k in $want; do
    if ! grep -q "Compiling entry function '_ZN7fa_cuda$k" "$log"; then
      echo "FAIL: $(basename "$log") has no kernel fa_cuda::${k#[0-9][0-9]}"
      fail=1
    fi
  done
  n=$(grep -c "Compiling entry function" "$log")
  echo "$(basename "$o"): $n kernels"
  # spills: "Compiling entry function 'F' for 'sm_X'" ... "N bytes spill stores, M bytes spill loads"
  awk -v obj="$(basename "$o")" '
    /Compiling entry function/ { split($0, a, "'\''"); fn = a[2]; arch = a[4] }
    /bytes spill stores/ { if ($5 + 0 > 0 || $9 + 0 > 0) print "  spills " $5 "/" $9 " bytes (stores/loads), " arch ": " fn }
  ' "$log" | { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }
done
[ $need_fwd = 0 ] || { echo "FAIL: no launch_fwd_wgmma_* object given"; fail=1; }
[ $need_bwd = 0 ] || { echo "FAIL: no launch_bwd_wgmma_* object given"; fail=1; }
[ $fail = 0 ] && echo "no wgmma serialized"
exit $fail

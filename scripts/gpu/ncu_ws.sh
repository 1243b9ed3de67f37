#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, carry [".gpu-deps",
# ".gpu-build.tar.xz"]): Nsight Compute on the warp-specialized kernels
# (forward, backward, FP8 forward) of a carried build, one kernel launch per
# shape, with the sections issue 14 asks about: tensor pipe utilization,
# warp stall reasons, registers, spills (local memory), occupancy.
#
#   NCU_JOBS="fwd_ws:128:4096:0 bwd_ws:128:2048:1 fp8_ws:128:4096:0" \
#     bash scripts/gpu/ncu_ws.sh
#
# A job is kernel-regex:D:L:causal (ncu_common.sh: fp8_ws runs bench/gpu/fp8.py,
# the others bench/gpu/anchors.py --once: forward, backward, deterministic
# backward; --launch-count takes the first NCU_LAUNCHES matching launches). Each job's
# full report is $OUT/ncu-<job>.txt; summary.txt gets the lines read most.
# The gmma pipe's metric names are taken from `ncu --query-metrics` on the
# machine (they differ between Nsight Compute versions).
# shellcheck source=scripts/gpu/ncu_common.sh
. scripts/gpu/ncu_common.sh

"$NCU" --query-metrics >"$OUT/ncu-metrics.txt" 2>&1
# tensor-pipe (gmma) busy cycles where this ncu has the counter (2025.3 has
# not: there the ComputeWorkloadAnalysis line "Tensor is the highest-utilized
# pipeline (N%)" says it; sm__inst_executed_pipe_tensor_op_gmma, which it has,
# counts instruction issue, not pipe time: 4% where the pipe was 65% busy),
# and the issue-stall breakdown, as counters
METRICS=$(grep -oE '^sm__pipe_tensor_op_gmma_cycles_active[a-z_]*' "$OUT/ncu-metrics.txt" | sort -u |
  sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
STALLS=$(grep -oE '^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active' "$OUT/ncu-metrics.txt" |
  sort -u | sed 's/$/.ratio/' | paste -sd, -)
say "tensor metrics: ${METRICS:-none found}"
# the stall counters are asked for whether or not this ncu has the gmma one
# (2025.3 has not, and the stalls were asked for only together with it)
ASK=$(printf '%s\n' "$METRICS" "$STALLS" | grep -v '^$' | paste -sd, -)
DETAILS=()
"$NCU" --help 2>&1 | grep -q -- --print-details && DETAILS=(--print-details all)

for job in ${NCU_JOBS:-fwd_ws:128:4096:0 fwd_ws:64:16384:1 bwd_ws:128:2048:1 fp8_ws:128:4096:0}; do
  log="$OUT/ncu-${job//:/-}.txt"
  ncu_job "$job"
  say "== ncu $job $(date +%T)"
  timeout 240 "$NCU" --clock-control none --kernel-name regex:"$regex" --launch-count "${NCU_LAUNCHES:-1}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
    --section SourceCounters ${ASK:+--metrics "$ASK"} "${DETAILS[@]}" "${prog[@]}" >"$log" 2>&1
  say "ncu exit $?"
  grep -E "^  [a-z_]*kernel|Duration|Registers Per|Local Memory|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|pipe_tensor|highest-utilized pipeline|non-fused FP32|Shared.*Bank|stalled_(barrier|long_scoreboard|short_scoreboard|wait|math|mio|dispatch|membar|sleeping|branch|lg|tex|selected|not_selected|no_instruction|drain|imc|misc)" \
    "$log" | sed 's/  */ /g' | head -60 | tee -a "$SUMMARY"
done
say "== done $(date +%T)"

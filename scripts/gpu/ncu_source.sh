#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, carry [".gpu-deps",
# ".gpu-build.tar.xz"]): where one kernel's warps wait, instruction by
# instruction. Nsight Compute samples the warps' program counters with their
# stall reasons (the SourceCounters section); its source page, exported as
# CSV with the SASS, says which instructions the samples fall on. ncu_ws.sh
# gives a kernel's totals (issue slots, stall reasons per issued
# instruction); this says which loop, which wait, which barrier.
#
#   NCU_JOB=fp8_ws:128:4096:0 bash scripts/gpu/ncu_source.sh
#
# NCU_JOB as ncu_ws.sh's jobs (kernel-regex:D:L:causal, ncu_common.sh).
# Results in $OUT: summary.txt (bench/gpu/ncu_source_summary.py's reading:
# samples by stall reason, by role for warp-specialized kernels, the
# consumers' by opcode, then the NCU_TOP instructions with the most
# samples), source.csv.gz (every SASS line with its counters, for reading on
# the dev machine with the same script); ncu.log and export.log only when a
# step failed. The device tool returns a few files a call: run one job a
# call, or rename summary.txt and source.csv.gz between jobs.
# shellcheck source=scripts/gpu/ncu_common.sh
. scripts/gpu/ncu_common.sh

ncu_job "${NCU_JOB:-fp8_ws:128:4096:0}"
rep=/tmp/ncu-source
rm -f "$rep.ncu-rep"
timeout 300 "$NCU" --clock-control none --kernel-name regex:"$regex" --launch-count 1 --section SourceCounters \
  --section WarpStateStats --import-source no -o "$rep" "${prog[@]}" >"$OUT/ncu.log" 2>&1
say "ncu exit $? ($(date +%T))"
if ! "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass >/tmp/source.csv 2>"$OUT/export.log"; then
  say "source export failed: $(head -3 "$OUT/export.log")"
  "$NCU" --help 2>&1 | grep -iE -A2 "page|print-source" | head -40 >>"$SUMMARY"
  exit 1
fi
gzip -c /tmp/source.csv >"$OUT/source.csv.gz"
rm -f "$OUT/ncu.log" "$OUT/export.log" # kept only when something failed (the device tool returns few files)
python3 bench/gpu/ncu_source_summary.py /tmp/source.csv "${NCU_TOP:-60}" | tee -a "$SUMMARY"
say "== done $(date +%T)"

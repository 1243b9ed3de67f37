#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root),
# on its host CPU (Intel Xeon with AMX-BF16): the cpu backend's amx ISA
# (issue 15), from a build made on the dev machine, nothing compiled here.
#   1. the CPU, the kernel, flashattn info (is amx usable?)
#   2. test_cpu_bf16 (the AMX block kernel against exact products; the bf16
#      forward and backward on amx against ref, on tails), plain and with
#      FLASHATTN_ISA=amx
#   3. the cpu suite: test_backend_cpu (every ISA, amx included), and
#      test_dispatch, test_kvcache, test_threads, test_cpu_philox,
#      test_bad_input under FLASHATTN_ISA=amx
#   4. flashattn info --peak (the tdpbf16ps peak next to vdpbf16ps and FMA)
#   5. flashattn bench: bf16 forward and backward on amx and on avx512 (2 threads),
#      and the amx forward at block_k 128, 256 and 512
#   6. bench/cpu_vs_torch.py --dtypes bfloat16 at 2 and 16 threads (ours on
#      auto = amx, PyTorch's CPU SDPA in the same process); a float32 pass
#      too if CPU_AMX_F32=1; median of CPU_AMX_REPS (default 3) calls each
#   7. tests/python/test_numpy.py's ISA and plan tests on this library
# Results: $OUT/summary.txt (verdicts) and $OUT/cpu-amx-logs.tar.gz (every log).
#
# Make the build here (dev machine, in the repository root; .gpu-deps as in
# run.sh):   scripts/gpu/prebuild.sh cpu      -> .gpu-cpu.tar.xz
# Then the device tool's run with
#   command: bash scripts/gpu/cpu_amx.sh
#   carry:   [".gpu-deps", ".gpu-cpu.tar.xz"]
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"
LOG=$OUT/logs
mkdir -p "$LOG"
stage() { say "== $1 ($(date -u +%T))"; }
suite_counts() { # CMocka's verdicts in a log, each test once (the summary lists skips and failures again)
  local failed
  failed=$(grep -E '^\[  FAILED  \] [^0-9]' "$1" | sort -u)
  echo "$(grep -c '^\[       OK \]' "$1") OK, $(grep -E '^\[  SKIPPED \] [^0-9]' "$1" | sort -u | grep -c .) skipped," \
    "$(printf '%s' "$failed" | grep -c .) failed"
  printf '%s' "$failed" | head -10
}
# run NAME TIMEOUT CMD...: log to $LOG/NAME.txt, say rc and the counts
run() {
  local name=$1 t=$2
  shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$LOG/$name.txt" 2>&1
  local rc=$?
  say "$name: rc $rc, $((SECONDS - t0)) s; $(suite_counts "$LOG/$name.txt" | head -1)"
  suite_counts "$LOG/$name.txt" | tail -n +2 | sed 's/^/    /' | tee -a "$SUMMARY"
  [ $rc -ne 0 ] && tail -5 "$LOG/$name.txt" | sed 's/^/    | /' | tee -a "$SUMMARY"
  return 0
}
finish() {
  tar -czf "$OUT/cpu-amx-logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
  say "== done ($(date -u +%T)); logs in cpu-amx-logs.tar.gz"
}
trap finish EXIT

stage "host"
if [ ! -f "$ROOT/.gpu-cpu.tar.xz" ]; then
  say "no .gpu-cpu.tar.xz: make it with scripts/gpu/prebuild.sh cpu and carry it"
  exit 1
fi
tar -xJf "$ROOT/.gpu-cpu.tar.xz" -C "$ROOT"
P=$ROOT/.gpu-cpu
say "build: commit $(cat "$P/commit")$([ -s "$P/dirty" ] && echo ' + uncommitted changes')"
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
if ldd "$P/bin/flashattn" | grep -q "not found"; then
  export LD_LIBRARY_PATH=$P/fallback:$LD_LIBRARY_PATH
  say "libgomp: the carried copy (the host has none on the default path)"
fi
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs; kernel $(uname -r)"
say "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512_bf16|avx512_fp16)' | tr '\n' ' ')"
"$P/bin/flashattn" info >"$LOG/info.txt" 2>&1
grep -E "instruction sets|cpu backend ISAs|amx|D=" "$LOG/info.txt" | tee -a "$SUMMARY"
if grep -q "amx yes" "$LOG/info.txt"; then say "amx: usable"; else say "amx: NOT usable (its tests will skip)"; fi

stage "test_cpu_bf16"
run test_cpu_bf16 300 "$P/bin/test_cpu_bf16"
FLASHATTN_ISA=amx run test_cpu_bf16.isa-amx 300 "$P/bin/test_cpu_bf16"

stage "cpu suite"
run test_backend_cpu 500 "$P/bin/test_backend_cpu"
grep -E "^\[ +(OK|SKIPPED|FAILED) +\] [^0-9].*/amx$" "$LOG/test_backend_cpu.txt" | sort -u |
  awk '{print $2}' | sort | uniq -c | sed 's/^/    amx variant: /' | tee -a "$SUMMARY"
# FLASHATTN_ISA=amx where amx is usable (elsewhere it is an error by design: plain runs)
ISA_ENV=(env FLASHATTN_ISA=amx)
SUF="isa-amx"
grep -q "amx yes" "$LOG/info.txt" || ISA_ENV=(env) SUF=plain
for t in test_dispatch test_kvcache test_threads test_cpu_philox test_bad_input test_online_softmax; do
  [ -x "$P/bin/$t" ] && run "$t.$SUF" 300 "${ISA_ENV[@]}" "$P/bin/$t"
done

stage "flashattn info --peak"
"$P/bin/flashattn" info --peak >"$LOG/info-peak.txt" 2>&1
sed -n '/peak/,$p' "$LOG/info-peak.txt" | grep -vE "^peak: " | tee -a "$SUMMARY"

stage "flashattn bench: bf16 on amx and avx512, 2 threads"
for isa in amx avx512; do
  for d in 64 128; do
    timeout 200 "$P/bin/flashattn" bench --backend cpu --isa $isa --dtype bf16 --b 1 --heads 8 --l 4096 --d $d \
      --threads 2 --pass fwd,bwd --reps 5 --no-peak --quiet >"$LOG/bench-$isa-d$d.txt" 2>&1
    say "  $isa D=$d rc $?: $(grep -E '^cpu ' "$LOG/bench-$isa-d$d.txt" | awk '{printf "%s %s ms %s GFLOP/s; ", $3, $7, $10}')"
  done
done

# Which key tile suits the amx forward (the score tile in L1 or in L2)? The
# default block_k is the first bench above; a few seconds each.
stage "flashattn bench: amx bf16 forward, block_k 128 / 256 / 512, 2 threads"
for d in 64 128; do
  for bk in 128 256 512; do
    timeout 100 "$P/bin/flashattn" bench --backend cpu --isa amx --dtype bf16 --b 1 --heads 8 --l 4096 --d $d \
      --threads 2 --pass fwd --block-k $bk --reps 5 --no-peak --quiet >"$LOG/bench-amx-d$d-bk$bk.txt" 2>&1
    say "  amx D=$d block_k $bk rc $?: $(grep -E '^cpu ' "$LOG/bench-amx-d$d-bk$bk.txt" | awk '{printf "%s %s ms %s GFLOP/s; ", $3, $7, $10}')"
  done
done

stage "bench/cpu_vs_torch.py (bf16, 2 and 16 threads)"
export FLASHATTN_LIBRARY=$P/lib/libflashattn.so PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1
python3 -c "import flashattn; print('flashattn cpu ISAs', flashattn.cpu_isas())" 2>&1 | tee -a "$SUMMARY"
timeout 420 python3 bench/cpu_vs_torch.py --threads 2,16 --dtypes bfloat16 --reps "${CPU_AMX_REPS:-3}" >"$LOG/cpu_vs_torch-bf16.txt" 2>&1
say "rc $?"
grep -E "^#|^\|" "$LOG/cpu_vs_torch-bf16.txt" | tee -a "$SUMMARY"
if [ "${CPU_AMX_F32:-0}" = 1 ]; then
  timeout 420 python3 bench/cpu_vs_torch.py --threads 2,16 --dtypes float32 --reps "${CPU_AMX_REPS:-3}" >"$LOG/cpu_vs_torch-f32.txt" 2>&1
  grep -E "^\|" "$LOG/cpu_vs_torch-f32.txt" | tee -a "$SUMMARY"
fi

stage "pytest: ISA names and plans"
timeout 120 python3 -m pytest tests/python/test_numpy.py -q -p no:cacheprovider -k "isa or plan" >"$LOG/pytest-isa.txt" 2>&1
say "rc $?: $(tail -1 "$LOG/pytest-isa.txt")"

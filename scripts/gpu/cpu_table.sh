#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root),
# on its host CPU: issue 15's table alone (bench/cpu_vs_torch.py: the cpu
# backend against PyTorch's CPU SDPA in one process), from the cpu build made
# on the dev machine (scripts/gpu/prebuild.sh cpu -> .gpu-cpu.tar.xz), for
# each timing order in ORDERS (turns, blocks; see cpu_vs_torch.py --order)
# and each thread count in THREADS, both dtypes; then, if PASSIVE=1, the
# turns order again with OMP_WAIT_POLICY=PASSIVE (both OpenMP runtimes of the
# process, ours and torch's, then sleep instead of spinning between parallel
# regions). Scripts/gpu/cpu_amx.sh runs the suites as well; this is the
# table only, a few minutes.
#   carry:   [".gpu-cpu.tar.xz"]
#   command: ORDERS=turns,blocks THREADS=2,16 REPS=5 PASSIVE=1 bash scripts/gpu/cpu_table.sh
# Results: $OUT/summary.txt (the host's topology and every table).
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

[ -f "$ROOT/.gpu-cpu.tar.xz" ] || { say "no .gpu-cpu.tar.xz: make it with scripts/gpu/prebuild.sh cpu and carry it"; exit 1; }
tar -xJf "$ROOT/.gpu-cpu.tar.xz" -C "$ROOT"
P=$ROOT/.gpu-cpu
if ldd "$P/lib/libflashattn.so" | grep -q "not found"; then export LD_LIBRARY_PATH=$P/fallback:${LD_LIBRARY_PATH:-}; fi
say "build: commit $(cat "$P/commit")$([ -s "$P/dirty" ] && echo ' + uncommitted changes')"
lscpu | grep -E 'Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|L2|L3' | tee -a "$SUMMARY"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
export FLASHATTN_LIBRARY=$P/lib/libflashattn.so PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1

table() { # NAME, then arguments of cpu_vs_torch.py
  local name=$1
  shift
  say "== $name ($(date -u +%T))"
  timeout 400 python3 bench/cpu_vs_torch.py --threads "${THREADS:-2,16}" --reps "${REPS:-5}" "$@" >"$OUT/$name.txt" 2>&1
  say "rc $?"
  grep -E "^#|^\|" "$OUT/$name.txt" | tee -a "$SUMMARY"
}
IFS=, read -r -a orders <<<"${ORDERS:-turns,blocks}"
for o in "${orders[@]}"; do table "order-$o" --order "$o"; done
if [ "${PASSIVE:-0}" = 1 ]; then OMP_WAIT_POLICY=PASSIVE table "order-turns-passive" --order turns; fi
say "== done ($(date -u +%T))"

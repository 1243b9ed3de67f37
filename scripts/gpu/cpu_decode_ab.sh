#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root),
# on its host CPU: an A/B of the cpu backend's decode between two cpu builds
# made on the dev machine by `scripts/gpu/prebuild.sh cpu` (A carried as
# .gpu-cpu-old.tar.xz, the baseline; B as .gpu-cpu.tar.xz, the change).
# B's kv-cache test first; then `flashattn bench --decode` (GB/s of K/V and
# % of the STREAM triad it measures) for each case of CASES at each thread
# count of THREADS, A and B in alternating rounds (ROUNDS), each call a
# separate process; then bench/cpu_vs_torch.py --decode with B (PyTorch's
# CPU SDPA in the same process).
#   carry:   [".gpu-deps", ".gpu-cpu-old.tar.xz", ".gpu-cpu.tar.xz"]
#   command: ROUNDS=3 THREADS=2,16 bash scripts/gpu/cpu_decode_ab.sh
# Results: $OUT/summary.txt (every run's table lines) and the logs next to it.
# shellcheck source=scripts/gpu/summary.sh
. "$(dirname "${BASH_SOURCE[0]}")/summary.sh"

for t in .gpu-cpu-old.tar.xz .gpu-cpu.tar.xz; do
  [ -f "$ROOT/$t" ] || { say "missing $t: make both with scripts/gpu/prebuild.sh cpu and carry them"; exit 1; }
done
unpack() { # TARBALL DIR
  rm -rf "${ROOT:?}/.gpu-cpu" "${ROOT:?}/$2"
  tar -xJf "$ROOT/$1" -C "$ROOT" && mv "$ROOT/.gpu-cpu" "$ROOT/$2"
  say "$2: $1, commit $(cat "$ROOT/$2/commit")$([ -s "$ROOT/$2/dirty" ] && echo ' + uncommitted changes')"
}
unpack .gpu-cpu-old.tar.xz cpu-a || exit 1
unpack .gpu-cpu.tar.xz cpu-b || exit 1
if ldd "$ROOT/cpu-b/lib/libflashattn.so" | grep -q "not found"; then
  export LD_LIBRARY_PATH=$ROOT/cpu-b/fallback:${LD_LIBRARY_PATH:-}
fi
export LD_LIBRARY_PATH=$ROOT/.gpu-deps/cmocka/lib:${LD_LIBRARY_PATH:-}
lscpu | grep -E 'Model name|^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|L2|L3' | tee -a "$SUMMARY"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

timeout 300 "$ROOT/cpu-b/bin/test_kvcache" >"$OUT/test_kvcache.log" 2>&1
say "test_kvcache (B) exit $?: $(counts "$OUT/test_kvcache.log")"

IFS=, read -r -a threads <<<"${THREADS:-2,16}"
IFS=";" read -r -a cases <<<"${CASES:---dtype bf16 --hkv 8;--dtype f32 --hkv 8;--dtype bf16 --hkv 8 --lq 2}"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for th in "${threads[@]}"; do
    for c in "${cases[@]}"; do
      for side in a b; do
        # shellcheck disable=SC2086
        timeout 120 "$ROOT/cpu-$side/bin/flashattn" bench --decode --threads "$th" --reps 10 $c \
          >"$OUT/bench-$side-$r-$th-${c// /_}.txt" 2>&1
        awk -v s="${side^^}" -v r="$r" -v th="$th" -v c="$c" \
          '$1 ~ /^[0-9]+$/ {printf "round %s %s threads %-2s %-28s Lk %6s  %8s ms  %6s GB/s  %7s of the triad\n", r, s, th, c, $1, $2, $4, $5}' \
          "$OUT/bench-$side-$r-$th-${c// /_}.txt" | tee -a "$SUMMARY"
      done
    done
  done
done

say "== bench/cpu_vs_torch.py --decode, B ($(date -u +%T))"
FLASHATTN_LIBRARY=$ROOT/cpu-b/lib/libflashattn.so PYTHONPATH=$ROOT/python PYTHONUNBUFFERED=1 \
  timeout 300 python3 bench/cpu_vs_torch.py --decode --threads "${THREADS:-2,16}" --reps "${TORCH_REPS:-7}" \
  >"$OUT/cpu_vs_torch-decode.txt" 2>&1
say "rc $?"
grep -E "^#|^\|" "$OUT/cpu_vs_torch-decode.txt" | tee -a "$SUMMARY"
say "== done ($(date -u +%T))"

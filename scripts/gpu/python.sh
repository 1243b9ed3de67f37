#!/usr/bin/env bash
# Runs on the GPU machine (the device tool's `run`, in the repository root):
# the Python package on cuda tensors — the pytest suite (tests/python), the
# Python-overhead benches (python_overhead.py, python_call_parts.py,
# python_hot_path.py) and the GPT training example next to SDPA. Results
# go to $OUT.
#
# Carry .gpu-py: libflashattn.so built here for sm_90 by
#   scripts/gpu/prebuild.sh python
# (the GPU image has torch, numpy, pytest and ml_dtypes; nothing is built there).
#   scripts/gpu/python.sh [all|test|bench|train|ring]
# ring (not in all): context parallel over NCCL on every GPU of the host —
# bench/gpu/ring_check.py (against one GPU), then bench/gpu/ring.py on 1 GPU
# and on all of them (RING_ARGS: extra arguments for ring.py).
set -u -o pipefail
MODE=${1:-all}
OUT=${OUT:-/tmp/fa-out}
mkdir -p "$OUT"
export FLASHATTN_LIBRARY=$PWD/.gpu-py/libflashattn.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
rc=0
echo "== device ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, flashattn; print('torch', torch.__version__); print(flashattn.cuda_device()); print(flashattn.backends())"
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  echo "== pytest tests/python ($(date +%T))"
  python3 -m pytest tests/python -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.txt" | tail -40 || rc=1
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
  echo "== bench/python_overhead.py ($(date +%T))"
  # shellcheck disable=SC2086
  python3 bench/python_overhead.py --device cuda ${BENCH_ARGS:-} 2>&1 | tee "$OUT/overhead.txt" || rc=1
  echo "== bench/python_call_parts.py, OMP_NUM_THREADS=1 ($(date +%T))"
  OMP_NUM_THREADS=1 python3 bench/python_call_parts.py --device cuda 2>&1 | tee "$OUT/call-parts.txt" || rc=1
  for L in 16 128; do # interleaved rounds: forward, forward with grad, forward + backward against the C floors
    echo "== bench/python_hot_path.py --device cuda --L $L ($(date +%T))"
    python3 bench/python_hot_path.py --device cuda --L "$L" 2>&1 | tee "$OUT/hot-path-L$L.txt" || rc=1
  done
fi
if [ "$MODE" = all ] || [ "$MODE" = train ]; then
  echo "== examples/python/train_gpt.py ($(date +%T))"
  python3 examples/python/train_gpt.py --out "$OUT/train.md" 2>&1 | tee "$OUT/train-log.txt" | tail -60 || rc=1
fi
if [ "$MODE" = ring ]; then
  n=$(nvidia-smi -L | wc -l)
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
  echo "== bench/gpu/ring_check.py on $n GPUs ($(date +%T))"
  torchrun --nproc_per_node="$n" bench/gpu/ring_check.py 2>&1 | grep -v "^W1" | tee "$OUT/ring-check.txt" || rc=1
  for w in 1 "$n"; do
    echo "== bench/gpu/ring.py on $w GPU(s) ($(date +%T))"
    # shellcheck disable=SC2086
    plain=""
    [ "$w" = 1 ] && plain=--plain
    torchrun --nproc_per_node="$w" bench/gpu/ring.py --out "$OUT" --torch-cp $plain ${RING_ARGS:-} 2>&1 | grep -v "^W1" |
      tee "$OUT/ring-$w.txt" || rc=1
  done
fi
echo "== done ($(date +%T)) rc=$rc"
exit $rc

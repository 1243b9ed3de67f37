"""Probe: what the backward's scratch memory costs a call when it is mapped
anew each time. Times flashattn's backward per call from an empty queue (as
anchors.py does), and the host time of the call alone, three ways: the
library's scratch pool keeping freed memory (the default,
src/cuda/scratch_pool.cu), FLASHATTN_CUDA_SCRATCH_KEEP=0 (the device's default
pool, which hands memory back at every synchronization: CUDA's release
threshold 0), and that default pool with its threshold raised to UINT64_MAX.

usage: python3 bench/gpu/pool_probe.py --lib build-gpu/libflashattn.so
"""

import argparse
import ctypes as C
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchors import FlashAttn, median_ms, problem_tensors  # noqa: E402
from bwd_profile import kernel_times  # noqa: E402

RELEASE_THRESHOLD = 4  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD


def host_us(fn, reps=20):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    fl = FlashAttn(args.lib)
    cu = C.CDLL("libcuda.so.1")
    dev, pool = C.c_int(), C.c_void_p()
    torch.cuda.synchronize()
    assert cu.cuCtxGetDevice(C.byref(dev)) == 0 and cu.cuDeviceGetDefaultMemPool(C.byref(pool), dev) == 0
    for D, L, causal in ((128, 2048, 0), (64, 2048, 0), (128, 16384, 0)):
        H, B = 2048 // D, max(1, 16384 // L)
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        fwd = fl.forward(q, k, v, o, lse, fl.options(causal))
        fwd()
        # the forward allocates nothing: its host time and what the device runs, for comparison
        ks, span = kernel_times(fwd, 20)
        print(
            f"D={D} L={L} causal={causal} forward: {median_ms(fwd, 10) * 1e3:8.1f} us a call (events), "
            f"host {host_us(fwd):7.1f} us, kernels {sum(ks.values()):8.1f} us ({len(ks)} kinds)"
        )
        f = fl.backward(q, k, v, o, do, lse, dq, dk, dv, fl.options(causal))
        for label, keep, thr in (
            ("library pool", None, 0),
            ("KEEP=0", "0", 0),
            ("KEEP=0, default pool keeps", "0", 2**64 - 1),
        ):
            if keep is None:
                os.environ.pop("FLASHATTN_CUDA_SCRATCH_KEEP", None)
            else:
                os.environ["FLASHATTN_CUDA_SCRATCH_KEEP"] = keep
            val = C.c_uint64(thr)
            assert cu.cuMemPoolSetAttribute(pool, RELEASE_THRESHOLD, C.byref(val)) == 0
            ms = median_ms(f, 10)
            print(
                f"D={D} L={L} causal={causal} {label:>27}: {ms * 1e3:8.1f} us a call (events), host {host_us(f):7.1f} us"
            )
        val = C.c_uint64(0)
        cu.cuMemPoolSetAttribute(pool, RELEASE_THRESHOLD, C.byref(val))
        cu.cuMemPoolTrimTo(pool, C.c_size_t(0))


if __name__ == "__main__":
    main()

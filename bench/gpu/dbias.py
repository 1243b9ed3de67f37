"""dBias on the cuda backend: a bias that asks for its gradient, in one
process with PyTorch SDPA doing the same (attn_mask with requires_grad).
--bcast picks the bias's shape: none [B, H, L, L], b [1, H, L, L] (dBias
summed over the batch), bh [1, 1, L, L] (over the batch and the heads),
keys [B, 1, 1, L] (a key bias: over the heads and the rows).
Backward ms of

  ours    the default: the backward, then dBias on tensor cores
          (src/cuda/launch_bwd_wgmma.cuh launch_dbias_wgmma: the wgmma dS
          kernel storing each element once where no dim is summed, the
          summing kernel dbias_sum_wgmma_kernel.cuh otherwise)
  simt    FLASHATTN_CUDA_DBIAS_WGMMA=0: the SIMT kernel that recomputes every
          dS element from global memory (fewer reps: it is slow)
  nodb    ours without dBias (what dBias costs on top)
  sdpa    SDPA with the bias as attn_mask, requires_grad (the first backend
          that takes it: cuDNN, then the memory-efficient one)

and the largest difference of simt's and SDPA's dBias from ours, relative to
the largest magnitude. Shapes as bench/gpu/anchors.py: bf16, hidden 2048
(H = 2048 / D), B * L = 16384; bias N(0, 1).

usage: python3 bench/gpu/dbias.py --lib build-gpu/libflashattn.so
       [--d 64,128,256] [--l 2048,4096] [--causal 0,1] [--bcast none,b,bh,keys] [--reps 10] [--simt-reps 2]
"""

import argparse
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes as fa  # noqa: E402
from anchors import FlashAttn, median_ms, problem_tensors, relerr, shapes, with_env  # noqa: E402


def sdpa_dbias(q, k, v, bias, do, causal, reps):
    """SDPA's backward with the bias's gradient: (ms, dbias, backend) or (None, None, why)."""
    i = torch.arange(q.shape[2], device="cuda")
    band = (i[None, :] > i[:, None]) if causal else None
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("eff", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                leaves = tuple(x.detach().requires_grad_() for x in (q, k, v, bias))
                m = leaves[3].masked_fill(band, float("-inf")) if causal else leaves[3]
                out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=m)
                grads = torch.autograd.grad(out, leaves, do, retain_graph=True)
                ms = median_ms(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True), reps)
                return ms, grads[3], name
        except RuntimeError as e:
            why = f"{name}: {str(e).splitlines()[0][:50]}"
    return None, None, why


def main():
    # (SDPA warns of every backend it skips while sdpa_dbias looks for one that takes the bias's gradient)
    warnings.filterwarnings("ignore", message=".*(not used because|has been runtime disabled).*")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build-gpu/libflashattn.so")
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--l", default="2048,4096")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--bcast", default="none", help="comma-separated: none, b, bh, keys (the bias's broadcast dims)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--simt-reps", type=int, default=2)
    a = ap.parse_args()

    ours = FlashAttn(a.lib)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, lib {a.lib}")
    print(f"# bf16, hidden 2048, B * L = 16384; backward ms, median of {a.reps} (simt {a.simt_reps})")
    print(
        f"{'D':>4} {'L':>6} c bcast |   ours    simt    nodb    sdpa | simt/ours sdpa/ours | by    | "
        "dBias diff from ours"
    )
    for (D, H, B, L, causal), bcast in ((s, b) for s in shapes(a.d, a.l, a.causal) for b in a.bcast.split(",")):
        q, k, v, do, o, lse, dq, dk, dv = problem_tensors(B, H, L, D)
        gen = torch.Generator(device="cuda").manual_seed(L * 1000 + D)
        bshape = {"none": (B, H, L), "b": (1, H, L), "bh": (1, 1, L), "keys": (B, 1, 1)}[bcast] + (L,)
        bias = torch.randn(*bshape, device="cuda", generator=gen).to(torch.bfloat16)
        opt = ours.options(causal)
        opt.bias = fa.tensor_of(bias, fa.FA_BF16)
        ours.forward(q, k, v, o, lse, opt)()
        db = torch.zeros_like(bias)
        bwd = ours.backward(q, k, v, o, do, lse, dq, dk, dv, opt, dbias=db)
        bwd()
        ms = {"ours": median_ms(bwd, a.reps)}
        bwd()
        torch.cuda.synchronize()
        ref = db.clone()
        ms["simt"] = with_env({"FLASHATTN_CUDA_DBIAS_WGMMA": "0"}, lambda: median_ms(bwd, a.simt_reps))
        diffs = [f"simt {relerr(db, ref):.0e}"]
        ms["nodb"] = median_ms(ours.backward(q, k, v, o, do, lse, dq, dk, dv, opt), a.reps)
        ms["sdpa"], sdb, by = sdpa_dbias(q, k, v, bias, do, causal, a.reps)
        if sdb is not None:
            diffs.append(f"sdpa {relerr(sdb, ref):.0e}")
        else:
            diffs.append(by)
            by = "-"
        cols = " ".join(f"{ms[c]:7.3f}" if ms[c] is not None else f"{'-':>7}" for c in ("ours", "simt", "nodb", "sdpa"))
        vs = f"{ms['sdpa'] / ms['ours']:9.2f}" if ms["sdpa"] is not None else f"{'-':>9}"
        print(
            f"{D:4d} {L:6d} {int(causal)} {bcast:5s} | {cols} | {ms['simt'] / ms['ours']:9.2f} {vs} | {by:5s} | "
            + "; ".join(diffs),
            flush=True,
        )
        del q, k, v, do, o, lse, dq, dk, dv, bias, db, ref, sdb
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

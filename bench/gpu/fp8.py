"""The FP8 (e4m3) forward next to our bf16 forward, in one process (issue 16):
TFLOP/s at D = 64 / 128 / 256, L = 4096 / 8192 / 16384 (16k tokens per
batch, hidden 2048: H = 2048 / D), causal and not, and the ratio; PyTorch's
SDPA on float8_e4m3fn inputs (cuDNN) if this PyTorch takes them (it says
why not otherwise); then the accuracy: RMSE of o against a float64
reference computed from the unquantized inputs, for bf16 and fp8 (inputs
rounded to e4m3 as they are; or scaled per head by fp8_quantize, with and
without the Hadamard rotation of q and k), on N(0, 1) inputs and on
inputs with outlier channels.

--ws 1 (default) times the FP8 forward twice in the same process, the
cp.async kernel (FLASHATTN_CUDA_FP8_WS=0) and the warp-specialized one
(FLASHATTN_CUDA_FP8_WS=2: 1, failing a call it cannot take rather than
falling back; the library reads the switch per call), prints
both, and the largest |difference| of their o (the same rule, so 0 is
expected; D = 256 is outside its scope: the same kernel twice); the
accuracy rows then run the warp-specialized kernel. --ws-variant: its
FLASHATTN_CUDA_VARIANT (launch_fwd_fp8.cuh), or a comma list (e.g. 0,5,6,7)
to time each of them in the same process, a column pair and a difference
each (the accuracy rows: the first).

Timing: CUDA events around each call after warm-up, the median of --reps.
FLOP count: 4 B H L^2 D, halved when causal. The library is called through
ctypes (bench/gpu/fa_ctypes.py), as bench/gpu/anchors.py does.

usage: python3 bench/gpu/fp8.py --lib build/libflashattn.so [--d 64,128,256]
       [--l 4096,8192,16384] [--causal 0,1] [--reps 20] [--acc-l 2048] [--ws 1]
       [--ws-variant 0[,5,...]]
"""

import argparse
import datetime
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa_ctypes as fa  # noqa: E402
from anchors import FlashAttn, median_ms  # noqa: E402

FA_F8_E4M3 = 5  # flashattn.h's fa_dtype


class Lib(FlashAttn):
    def forward8(self, q, k, v, o, lse, causal, code, descales=()):
        """A closure calling fa_forward on [B, H, L, D] tensors (code: q, k, v's
        dtype; o bf16 or f16; descales: (name, f32 tensor) pairs)."""
        opt = self.options(causal)
        for name, t in descales:
            setattr(opt, name, fa.tensor_of(t, fa.FA_F32))
        oc = fa.FA_BF16 if o.dtype == torch.bfloat16 else fa.FA_F16
        ts = [
            fa.tensor_of(q, code),
            fa.tensor_of(k, code),
            fa.tensor_of(v, code),
            fa.tensor_of(o, oc),
            fa.tensor_of(lse, fa.FA_F32),
        ]
        B = fa.C.byref

        def run():
            self._check(
                self.lib.fa_forward(
                    self.ctx, fa.FA_BACKEND_CUDA, B(ts[0]), B(ts[1]), B(ts[2]), B(opt), B(ts[3]), B(ts[4])
                )
            )

        run.keep = (descales, ts, opt)
        return run


def sdpa_fp8(q8, k8, v8, causal):
    """PyTorch's FP8 attention, or the reasons it is not there: newer PyTorch
    has torch.nn.attention.experimental._scaled_dot_product_attention_quantized
    (FlashAttention 3 underneath, activated as the "FA3" flash impl: needs
    FA3's package), else plain SDPA on float8_e4m3fn (cuDNN)."""
    why = []
    try:
        from torch.nn.attention import activate_flash_attention_impl
        from torch.nn.attention.experimental._scaled_dot_product_attention_quantized import (
            _scaled_dot_product_attention_quantized as sdpa_q,
        )

        activate_flash_attention_impl("FA3")
        B, Hkv = k8.shape[0], k8.shape[1]
        one = torch.ones(B, Hkv, device="cuda", dtype=torch.float32)

        def fa3():
            return sdpa_q(q8, k8, v8, is_causal=causal, q_descale=one, k_descale=one, v_descale=one)

        fa3()
        torch.cuda.synchronize()
        return fa3, None
    except Exception as e:  # noqa: BLE001 - reported, whatever it is
        why.append(f"quantized SDPA (FA3): {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    try:
        F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal)
        torch.cuda.synchronize()
        return (lambda: F.scaled_dot_product_attention(q8, k8, v8, is_causal=causal)), None
    except Exception as e:  # noqa: BLE001
        why.append(f"SDPA on float8: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
    return None, "; ".join(why)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--l", default="4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--acc-l", type=int, default=2048, help="sequence length of the accuracy rows (0: none)")
    ap.add_argument("--ws", type=int, default=1, help="1: also time the warp-specialized fp8 kernel")
    ap.add_argument(
        "--ws-variant",
        default="0",
        help="its FLASHATTN_CUDA_VARIANT (0, 3-8: launch_fwd_fp8.cuh), or a comma list, each timed",
    )
    args = ap.parse_args()
    variant0 = os.environ.get("FLASHATTN_CUDA_VARIANT")
    ws_variants = [int(x) for x in args.ws_variant.split(",")]

    def fp8_ws(on, variant=ws_variants[0]):
        """The FP8 kernel the next calls take (read by the library per call);
        --ws-variant only for the warp-specialized one."""
        os.environ["FLASHATTN_CUDA_FP8_WS"] = "2" if on else "0"
        if on:
            os.environ["FLASHATTN_CUDA_VARIANT"] = str(variant)
        elif variant0 is None:
            os.environ.pop("FLASHATTN_CUDA_VARIANT", None)
        else:
            os.environ["FLASHATTN_CUDA_VARIANT"] = variant0

    lib = Lib(args.lib)
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {datetime.date.today()}; "
        f"median of {args.reps} after 3 warm-ups; TFLOP/s (4 B H L^2 D, /2 causal)"
    )
    print(
        f"{'D':>4} {'H':>3} {'B':>3} {'L':>6} {'causal':>6} | {'bf16':>7} {'fp8':>7} {'fp8/bf16':>8} | "
        + (
            (
                f"{'fp8-ws':>7} {'ws/bf16':>8} | "
                if len(ws_variants) == 1
                else "".join(f"{'ws-v' + str(v):>7} {'/bf16':>6} | " for v in ws_variants)
            )
            if args.ws
            else ""
        )
        + f"{'sdpa-fp8':>8} | check fp8 vs bf16 (max |diff|)"
        + ((", ws vs fp8" if len(ws_variants) == 1 else ", ws vs fp8 per variant") if args.ws else "")
    )
    sdpa_why = None
    for D in (int(x) for x in args.d.split(",")):
        H = 2048 // D
        for L in (int(x) for x in args.l.split(",")):
            B = max(1, 16384 // L)
            for causal in (bool(int(x)) for x in args.causal.split(",")):
                torch.manual_seed(0)
                q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
                o = torch.empty_like(q)
                o8 = torch.empty_like(q)
                lse = torch.empty(B, H, L, device="cuda", dtype=torch.float32)
                flops = 4.0 * B * H * L * L * D / (2 if causal else 1)
                f16 = lib.forward8(q, k, v, o, lse, causal, fa.FA_BF16)
                f8 = lib.forward8(q8, k8, v8, o8, lse, causal, FA_F8_E4M3)
                if args.ws:
                    fp8_ws(False)
                t16 = median_ms(f16, args.reps)
                t8 = median_ms(f8, args.reps)
                diff = (o.float() - o8.float()).abs().max().item()
                ws_cols, ws_diff = "", ""
                if args.ws:
                    o8_old = o8.clone()
                    for v in ws_variants:
                        fp8_ws(True, v)
                        o8.fill_(float("nan"))
                        t8w = median_ms(f8, args.reps)
                        ratio = f"{t16 / t8w:8.2f}" if len(ws_variants) == 1 else f"{t16 / t8w:6.2f}"
                        ws_cols += f"{flops / t8w / 1e9:7.1f} {ratio} | "
                        ws_diff += f", {(o8.float() - o8_old.float()).abs().max().item():.3g}"
                    del o8_old
                sd, why = sdpa_fp8(q8, k8, v8, causal)
                if sd is None:
                    sdpa_why = sdpa_why or why
                    ts = "n/a"
                else:
                    ts = f"{flops / median_ms(sd, args.reps) / 1e9:8.1f}"
                print(
                    f"{D:>4} {H:>3} {B:>3} {L:>6} {int(causal):>6} | {flops / t16 / 1e9:7.1f} "
                    f"{flops / t8 / 1e9:7.1f} {t16 / t8:8.2f} | {ws_cols}{ts:>8} | {diff:.3g}{ws_diff}",
                    flush=True,
                )
                del q, k, v, q8, k8, v8, o, o8
    if sdpa_why:
        print(f"# PyTorch SDPA on float8_e4m3fn: {sdpa_why}")

    if args.acc_l <= 0:  # --acc-l 0: the speed rows only
        return
    if args.ws:  # the accuracy rows on the warp-specialized kernel
        fp8_ws(True)
    print(
        f"\n# accuracy: RMSE of o against float64 softmax(q k^T / sqrt(D)) v of the unquantized inputs, "
        f"B=1 H=8 L={args.acc_l}; fp8: e4m3 as is (descale 1); scaled: fp8_quantize's per-head scales; "
        f"+H: and Hadamard-rotated q, k; inputs N(0, 1), and N(0, 1) with 4 channels of q and k x 20 (outliers)"
    )
    print(
        f"{'D':>4} {'causal':>6} {'inputs':>8} | {'bf16':>10} {'fp8':>10} {'scaled':>10} {'scaled+H':>10} | "
        f"{'P exact':>10}"
    )
    from flashattn.torch import fp8_quantize

    for D in (int(x) for x in args.d.split(",")):
        for causal in (bool(int(x)) for x in args.causal.split(",")):
            for outliers in (False, True):
                torch.manual_seed(1)
                L, H = args.acc_l, 8
                x64 = [torch.randn(1, H, L, D, device="cuda", dtype=torch.float64) for _ in range(3)]
                if outliers:
                    x64[0][..., :4] *= 20
                    x64[1][..., :4] *= 20
                ref = F.scaled_dot_product_attention(*x64, is_causal=causal)
                rmse = lambda a: ((a.double() - ref) ** 2).mean().sqrt().item()  # noqa: E731
                lse = torch.empty(1, H, L, device="cuda", dtype=torch.float32)

                def ours(q, k, v, code, descales=()):
                    o = torch.empty(q.shape, device="cuda", dtype=torch.bfloat16)
                    lib.forward8(q, k, v, o, lse, causal, code, descales)()
                    return o

                ob = ours(*(x.to(torch.bfloat16) for x in x64), fa.FA_BF16)
                e4 = [x.to(torch.float8_e4m3fn) for x in x64]
                o8 = ours(*e4, FA_F8_E4M3)
                row = []
                for had in (False, True):
                    q8, k8, v8, qd, kd, vd = fp8_quantize(*x64, layout="bhsd", hadamard=had)
                    ds = (("q_descale", qd), ("k_descale", kd), ("v_descale", vd))
                    row.append(rmse(ours(q8, k8, v8, FA_F8_E4M3, ds)))
                # the inputs rounded to e4m3, P exact: what P's rounding adds to fp8's
                ref8 = F.scaled_dot_product_attention(*(x.to(torch.float64) for x in e4), is_causal=causal)
                name = "outlier" if outliers else "N(0,1)"
                print(
                    f"{D:>4} {int(causal):>6} {name:>8} | {rmse(ob):10.3e} {rmse(o8):10.3e} {row[0]:10.3e} "
                    f"{row[1]:10.3e} | {rmse(ref8):10.3e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()

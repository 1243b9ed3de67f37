"""The torch face (flashattn.torch) against PyTorch's own attention: SDPA's
math kernel in float64 where it can express the case, a float64 eager
reference written here where it cannot (softcap, dropout, rows that see
nothing), for outputs and gradients, on CPU tensors (cpu backend; float64 on
ref) and, where a GPU and the cuda backend are there, on CUDA tensors.
"""

import math
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashattn  # noqa: E402
import flashattn.torch as ft  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and flashattn.backends()["cuda"].available
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no GPU / cuda backend here")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
# per dtype: (dtype, tolerance on max|x - ref| / max(1, max|ref|))
CPU_DTYPES = [(torch.float64, 1e-10), (torch.float32, 2e-4), (torch.bfloat16, 5e-2)]
CUDA_DTYPES = [(torch.float32, 2e-4), (torch.float16, 2e-2), (torch.bfloat16, 5e-2)]


def dtypes_for(device):
    return CPU_DTYPES if device == "cpu" else CUDA_DTYPES


def close(x, ref, tol, what):
    assert not torch.isnan(x).any(), f"{what}: NaN"
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    err = (x - ref).abs().max().item() / max(1.0, ref.abs().max().item())
    assert err <= tol, f"{what}: error {err:.3g} > {tol}"


# ---- a float64 eager reference, written from DESIGN.md ----------------------
def reference(
    q,
    k,
    v,
    *,
    scale=None,
    causal=False,
    bottom_right=False,
    window=None,
    softcap=0.0,
    alibi=None,
    bias=None,
    mask=None,
    keep=None,
    p=0.0,
):
    """q [B,Hq,Lq,D] ... in float64; rows that see nothing give 0."""
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    scale = 1 / math.sqrt(D) if scale is None else scale
    s = scale * q @ k.transpose(-1, -2)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Lq)[:, None] + (Lk - Lq if bottom_right else 0)
    j = torch.arange(Lk)[None]
    if alibi is not None:
        s = s - alibi.double().view(1, Hq, 1, 1) * (i - j).abs()
    if bias is not None:
        s = s + bias
    vis = torch.ones(Lq, Lk, dtype=torch.bool)
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    vis = vis.expand(B, Hq, Lq, Lk)
    if mask is not None:
        vis = vis & mask
    s = s.masked_fill(~vis, -math.inf)
    m = s.amax(-1, keepdim=True).clamp(min=-1e300)  # finite for rows that see nothing
    e = torch.exp(s - m)
    pr = e / e.sum(-1, keepdim=True).clamp(min=1e-300)
    if keep is not None:
        pr = pr * keep / (1 - p)
    return pr @ v


def rand(shape, dtype, device, requires_grad=True, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device).requires_grad_(requires_grad)


def grads(out, inputs, g):
    return torch.autograd.grad(out, inputs, g, allow_unused=True)


# ---- SDPA-compatible function against torch's SDPA (math, float64) ----------
SDPA_CASES = {
    "plain": dict(B=2, Hq=2, Hkv=2, Lq=9, Lk=9, D=16, Dv=16),
    "causal": dict(B=2, Hq=2, Hkv=2, Lq=17, Lk=17, D=16, Dv=16, is_causal=True),
    "causal_lq_lt_lk": dict(B=1, Hq=2, Hkv=2, Lq=5, Lk=13, D=8, Dv=8, is_causal=True),
    "gqa_dv": dict(B=2, Hq=6, Hkv=2, Lq=7, Lk=11, D=16, Dv=8, enable_gqa=True),
    "mqa_causal": dict(B=1, Hq=4, Hkv=1, Lq=12, Lk=12, D=8, Dv=8, enable_gqa=True, is_causal=True),
    "bool_mask_2d": dict(B=2, Hq=2, Hkv=2, Lq=6, Lk=10, D=8, Dv=8, mask="bool", mask_shape=(6, 10)),
    "bool_mask_b1": dict(B=2, Hq=3, Hkv=3, Lq=6, Lk=10, D=8, Dv=8, mask="bool", mask_shape=(2, 1, 6, 10)),
    "float_mask": dict(B=2, Hq=2, Hkv=2, Lq=6, Lk=10, D=8, Dv=8, mask="float", mask_shape=(2, 2, 6, 10)),
    "float_mask_bcast": dict(B=2, Hq=2, Hkv=2, Lq=6, Lk=10, D=8, Dv=8, mask="float", mask_shape=(1, 6, 10)),
    "scale": dict(B=1, Hq=2, Hkv=2, Lq=8, Lk=8, D=8, Dv=8, scale=0.3),
    "d_odd": dict(B=1, Hq=1, Hkv=1, Lq=5, Lk=33, D=13, Dv=7),
}


def make_mask(kind, shape, device, dtype):
    g = torch.Generator().manual_seed(7)
    if kind == "bool":
        m = torch.rand(shape, generator=g) < 0.7
        m[..., 0] = True  # every row sees a key (SDPA's math gives NaN otherwise)
        return m.to(device)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).to(device).requires_grad_(True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_matches_torch(case, device):
    c = SDPA_CASES[case]
    if device == "cuda" and c["D"] % 8:
        with pytest.raises(flashattn.UnsupportedError, match="head"):  # documented: multiples of 8 on cuda
            q = torch.randn(1, 1, 4, c["D"], device=device, dtype=torch.bfloat16)
            ft.scaled_dot_product_attention(q, q, q)
        return
    for dtype, tol in dtypes_for(device):
        q = rand((c["B"], c["Hq"], c["Lq"], c["D"]), dtype, device)
        k = rand((c["B"], c["Hkv"], c["Lk"], c["D"]), dtype, device)
        v = rand((c["B"], c["Hkv"], c["Lk"], c["Dv"]), dtype, device)
        am = make_mask(c["mask"], c["mask_shape"], device, dtype) if "mask" in c else None
        kw = dict(is_causal=c.get("is_causal", False), scale=c.get("scale"), enable_gqa=c.get("enable_gqa", False))
        out = ft.scaled_dot_product_attention(q, k, v, attn_mask=am, **kw)
        assert flashattn.last_backend() == ("ref" if dtype == torch.float64 else device)
        ins = [q, k, v] + ([am] if am is not None and am.requires_grad else [])
        d64 = [x.detach().double().cpu().requires_grad_(x.requires_grad) for x in ins]
        am64 = d64[3] if len(d64) > 3 else (am.cpu() if am is not None else None)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(d64[0], d64[1], d64[2], attn_mask=am64, **kw)
        close(out, ref, tol, f"{case} {dtype} out")
        g = torch.randn_like(ref)
        got = grads(out, ins, g.to(dtype).to(device))
        want = grads(ref, d64, g)
        for name, a, b in zip(("dq", "dk", "dv", "dbias"), got, want):
            close(a, b, tol * 4, f"{case} {dtype} {name}")


# ---- FlashAttention-compatible functions ([B, L, H, D], bottom-right) ------
FA_CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal_lq_lt_lk": dict(causal=True, Lq=5),
    "causal_lq_gt_lk": dict(causal=True, Lq=19),  # the first rows see nothing (bottom-right)
    "window": dict(window_size=(3, 2)),
    "window_causal": dict(window_size=(4, -1), causal=True),
    "softcap": dict(softcap=2.5),
    "alibi": dict(alibi=True, causal=True),
    "gqa": dict(Hq=6, Hkv=3),
    "dv": dict(Dv=8),
    "scale": dict(softmax_scale=0.2),
    # a negative scale: the row maxima of the scaled scores are the minima of the raw ones (the cuda
    # warp-specialized forward folds a positive scale into the exponent and leaves this to another kernel)
    "scale_negative_causal": dict(softmax_scale=-0.3, causal=True),
    # head dims past 128: on the cuda device the bucket-256 backward (dK, dV split by columns)
    "wide_head_causal": dict(D=256, Dv=192, causal=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(FA_CASES))
def test_flash_attn_func(case, device):
    c = dict(B=2, Hq=4, Hkv=2, Lq=11, Lk=13, D=16, Dv=16)
    c.update(FA_CASES[case])
    for dtype, tol in dtypes_for(device):
        q = rand((c["B"], c["Lq"], c["Hq"], c["D"]), dtype, device)
        k = rand((c["B"], c["Lk"], c["Hkv"], c["D"]), dtype, device)
        v = rand((c["B"], c["Lk"], c["Hkv"], c["Dv"]), dtype, device)
        alibi = torch.rand(c["Hq"], dtype=torch.float32, device=device) if c.get("alibi") else None
        kw = dict(
            causal=c.get("causal", False),
            window_size=c.get("window_size", (-1, -1)),
            softcap=c.get("softcap", 0.0),
            softmax_scale=c.get("softmax_scale"),
            alibi_slopes=alibi,
        )
        out, lse, probs = ft.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
        assert probs is None and out.shape == (c["B"], c["Lq"], c["Hq"], c["Dv"]) and out.is_contiguous()
        assert lse.shape == (c["B"], c["Hq"], c["Lq"])
        d64 = [x.detach().double().cpu().transpose(1, 2).requires_grad_(True) for x in (q, k, v)]
        ref = reference(
            *d64,
            scale=kw["softmax_scale"],
            causal=kw["causal"],
            bottom_right=True,
            window=kw["window_size"],
            softcap=kw["softcap"],
            alibi=None if alibi is None else alibi.cpu(),
        )
        close(out.transpose(1, 2), ref, tol, f"{case} {dtype} out")
        g = torch.randn_like(ref)
        got = grads(out, (q, k, v), g.transpose(1, 2).to(dtype).to(device))
        want = grads(ref, d64, g)
        for name, a, b in zip(("dq", "dk", "dv"), got, want):
            close(a.transpose(1, 2), b, tol * 4, f"{case} {dtype} {name}")


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows_are_zero(device):
    """Rows that see nothing: out = 0, lse = -inf, no NaN in any gradient."""
    q, k, v = (rand((1, 8, 2, 8), torch.float32, device) for _ in range(3))
    mask = torch.ones(1, 2, 8, 8, dtype=torch.bool, device=device)
    mask[:, :, 3] = False
    out = ft.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    assert (out[:, :, 3] == 0).all()
    out2, lse = ft.attention(q, k, v, mask=mask, layout="bshd", return_lse=True)
    assert torch.isneginf(lse[:, :, 3]).all() and torch.isfinite(lse[:, :, :3]).all()
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert not any(torch.isnan(x).any() for x in (dq, dk, dv))
    assert (dq[:, 3] == 0).all()
    # causal bottom-right with Lq > Lk: the first Lq - Lk rows see nothing
    out = ft.flash_attn_func(rand((1, 6, 1, 8), torch.float32, device), k[:, :3, :1], v[:, :3, :1], causal=True)
    assert (out[:, :3] == 0).all() and (out[:, 3:] != 0).any()


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_matches_per_sequence(device):
    lens_q, lens_k = [3, 7, 1, 5], [4, 7, 6, 2]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=device)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=device)
    for dtype, tol in dtypes_for(device):
        q = rand((sum(lens_q), 4, 16), dtype, device)
        k = rand((sum(lens_k), 2, 16), dtype, device)
        v = rand((sum(lens_k), 2, 16), dtype, device)
        out, lse, _ = ft.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True, return_attn_probs=True
        )
        assert out.shape == q.shape and lse.shape == (4, sum(lens_q))
        g = torch.randn(out.shape, dtype=torch.float64)
        dq, dk, dv = grads(out, (q, k, v), g.to(dtype).to(device))
        for b in range(4):
            sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            d64 = [
                x.detach()[s].double().cpu().transpose(0, 1)[None].requires_grad_(True)
                for x, s in ((q, sq), (k, sk), (v, sk))
            ]
            ref = reference(*d64, causal=True, bottom_right=True)
            close(out[sq].transpose(0, 1)[None], ref, tol, f"seq {b} {dtype} out")
            want = grads(ref, d64, g[sq].transpose(0, 1)[None])
            for name, a, w, s in zip(("dq", "dk", "dv"), (dq, dk, dv), want, (sq, sk, sk)):
                close(a[s].transpose(0, 1)[None], w, tol * 4, f"seq {b} {dtype} {name}")


@pytest.mark.parametrize("device", DEVICES)
def test_packed_equal_unpacked(device):
    qkv = rand((2, 9, 3, 4, 16), torch.float32, device)
    out = ft.flash_attn_qkvpacked_func(qkv, causal=True)
    (g,) = torch.autograd.grad(out.sum(), qkv)
    q, k, v = (qkv.detach()[:, :, i].clone().requires_grad_(True) for i in range(3))
    ref = ft.flash_attn_func(q, k, v, causal=True)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    dq, dk, dv = torch.autograd.grad(ref.sum(), (q, k, v))
    torch.testing.assert_close(g, torch.stack([dq, dk, dv], 2), rtol=1e-6, atol=1e-6)
    kv = qkv.detach()[:, :, 1:].clone()
    torch.testing.assert_close(ft.flash_attn_kvpacked_func(q, kv, causal=True), ref, rtol=0, atol=0)
    cu = torch.tensor([0, 9, 18], dtype=torch.int32, device=device)
    flat = qkv.detach().reshape(18, 3, 4, 16)
    torch.testing.assert_close(
        ft.flash_attn_varlen_qkvpacked_func(flat, cu, 9, causal=True),
        ref.detach().reshape(18, 4, 16),
        rtol=1e-6,
        atol=1e-6,
    )
    torch.testing.assert_close(
        ft.flash_attn_varlen_kvpacked_func(flat[:, 0], flat[:, 1:], cu, cu, 9, 9, causal=True),
        ref.detach().reshape(18, 4, 16),
        rtol=1e-6,
        atol=1e-6,
    )


# ---- every C option through attention(), against the reference ---------------
OPTION_CASES = {
    "seqlens": dict(seqlens_q=[5, 9], seqlens_k=[11, 3]),
    "window_top_left": dict(window=(2, 1)),
    "bias_grad": dict(bias=(1, 4, 1, 13)),
    "bias_mask_softcap": dict(bias=(2, 1, 9, 13), mask=True, softcap=3.0),
    "dropout": dict(dropout_p=0.3, dropout_seed=12345, dropout_offset=7),
    "dropout_causal_gqa": dict(dropout_p=0.2, dropout_seed=2**63 + 5, causal=True, align="bottom_right", Hkv=1),
    "alibi_top_left": dict(alibi=True, causal=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_attention_options(case, device):
    c = dict(OPTION_CASES[case])
    B, Hq, Hkv, Lq, Lk, D = 2, 4, c.pop("Hkv", 2), 9, 13, 8
    for dtype, tol in dtypes_for(device):
        q, k, v = (
            rand((B, Hq, Lq, D), dtype, device),
            rand((B, Hkv, Lk, D), dtype, device),
            rand((B, Hkv, Lk, D), dtype, device),
        )
        kw, refkw, ins = {}, {}, [q, k, v]
        if "bias" in c:
            bias = rand(c["bias"], dtype, device)
            kw["bias"], refkw["bias"] = bias, None
            ins.append(bias)
        if c.get("mask"):
            mask = torch.rand(B, 1, Lq, Lk, generator=torch.Generator().manual_seed(3)) < 0.6
            kw["mask"] = mask.to(device)
            refkw["mask"] = mask
        if c.get("alibi"):
            kw["alibi_slopes"] = torch.tensor([0.5, 0.25, 0.125, 0.0625], device=device)
            refkw["alibi"] = kw["alibi_slopes"].cpu()
        for name in ("softcap", "causal", "window", "dropout_p", "dropout_seed", "dropout_offset", "align"):
            if name in c:
                kw[name] = c[name]
        if "seqlens_q" in c:
            kw["seqlens_q"] = torch.tensor(c["seqlens_q"], dtype=torch.int32, device=device)
            kw["seqlens_k"] = torch.tensor(c["seqlens_k"], dtype=torch.int32, device=device)
            vis = torch.zeros(B, 1, Lq, Lk, dtype=torch.bool)
            for b in range(B):
                vis[b, :, : c["seqlens_q"][b], : c["seqlens_k"][b]] = True
            refkw["mask"] = vis
        out, lse = ft.attention(q, k, v, return_lse=True, **kw)
        d64 = [x.detach().double().cpu().requires_grad_(True) for x in ins]
        if "bias" in c:
            refkw["bias"] = d64[3]
        if "dropout_p" in c:
            refkw["keep"] = torch.from_numpy(
                flashattn.dropout_keep((B, Hq, Lq, Lk), c["dropout_p"], c["dropout_seed"], c.get("dropout_offset", 0))
            )
            refkw["p"] = c["dropout_p"]
        ref = reference(
            *d64[:3],
            causal=c.get("causal", False),
            bottom_right=c.get("align") == "bottom_right",
            window=c.get("window"),
            softcap=c.get("softcap", 0.0),
            **refkw,
        )
        close(out, ref, tol, f"{case} {dtype} out")
        g = torch.randn_like(ref)
        got = grads(out, ins, g.to(dtype).to(device))
        want = grads(ref, d64, g)
        for name, a, b in zip(("dq", "dk", "dv", "dbias"), got, want):
            close(a, b, tol * 4, f"{case} {dtype} {name}")
        if "seqlens_q" in c:  # padding rows beyond seqlens_q: o = 0, lse = -inf
            assert (out[0, :, 5:] == 0).all() and torch.isneginf(lse[0, :, 5:]).all()


def test_gradcheck_float64_on_ref():
    """torch.autograd.gradcheck in float64 (the ref backend), bias included."""
    q, k, v = (
        rand((1, 2, 5, 4), torch.float64, "cpu"),
        rand((1, 1, 6, 4), torch.float64, "cpu"),
        rand((1, 1, 6, 3), torch.float64, "cpu"),
    )
    bias = rand((1, 2, 1, 6), torch.float64, "cpu")

    def f(q, k, v, bias):
        return ft.attention(q, k, v, bias=bias, causal=True, align="bottom_right", softcap=2.0, alibi_slopes=[0.3, 0.1])

    assert torch.autograd.gradcheck(f, (q, k, v, bias))
    assert flashattn.last_backend() == "ref"
    sd = lambda q, k, v: ft.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    assert torch.autograd.gradcheck(sd, (q, k, v))


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_repeatable(device):
    q, k, v = (rand((1, 16, 2, 16), torch.float32, device) for _ in range(3))
    torch.manual_seed(5)
    a = ft.flash_attn_func(q, k, v, dropout_p=0.25)
    torch.manual_seed(5)
    b = ft.flash_attn_func(q, k, v, dropout_p=0.25)
    c = ft.flash_attn_func(q, k, v, dropout_p=0.25)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)
    assert torch.equal(ft.flash_attn_func(q, k, v, dropout_p=0.0), ft.flash_attn_func(q, k, v))


@needs_cuda
def test_dropout_in_cuda_graph():
    """A seed drawn inside a CUDA graph capture would be replayed (the same mask every step): drawing one
    there raises, naming dropout_seed, and leaves the capture valid; an explicit seed is captured as given,
    the replay equal to the eager call with that seed."""
    q, k, v = (rand((2, 64, 4, 32), torch.bfloat16, "cuda", requires_grad=False) for _ in range(3))
    ft.attention(q, k, v, dropout_p=0.25, dropout_seed=7)  # warm-up outside the capture
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # torch warns that the refused capture is empty
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match="dropout_seed"):
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                ft.flash_attn_func(q, k, v, dropout_p=0.25)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ft.attention(q, k, v, dropout_p=0.25, dropout_seed=7)
    q.copy_(torch.randn_like(q))
    g.replay()
    want = ft.attention(q, k, v, dropout_p=0.25, dropout_seed=7)
    assert torch.equal(out, want) and not torch.equal(out, ft.attention(q, k, v))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [False, True])
def test_positions_pass_through(device, op):
    """attention(q_offset=, k_offset=) through the eager path and the op
    flashattn::fwd / bwd (op=True: torch.ops directly): causal + ALiBi + dropout
    at positions equal the block [qo:, ko:] of one call over the whole sequence
    in o's dropped elements and the ALiBi/causal bias, forward and backward."""
    B, H, Lq, Lk, D, qo, ko = 1, 2, 9, 16, 16, 20, 11  # Lk: P's value head dim below (cuda: a multiple of 8)
    dt = torch.float64 if device == "cpu" else torch.float32
    q, k, v = (rand((B, H, n, D), dt, device).requires_grad_() for n in (Lq, Lk, Lk))
    slopes = torch.tensor([0.25, 0.5], device=device)  # exact in f32 and f64
    pi, pj = torch.arange(Lq, device=device)[:, None] + qo, torch.arange(Lk, device=device)[None, :] + ko
    bias = torch.where(pj <= pi, -slopes[:, None, None] * (pi - pj).abs(), -math.inf)[None].to(dt)
    p, seed = 0.2, 31
    if op:
        rng = torch.tensor([seed, 0], dtype=torch.int64)
        args = (q, k, v, None, None, slopes.float().contiguous(), None, None, None, None, rng, 0.0, 0.0, True, False,
                -1, -1, p, False, "auto", qo, ko)  # fmt: skip
        o = torch.ops.flashattn.fwd(*args)[0]
    else:
        o = ft.attention(q, k, v, causal=True, alibi_slopes=slopes, dropout_p=p, dropout_seed=seed, q_offset=qo,
                         k_offset=ko)  # fmt: skip
    keep = torch.from_numpy(flashattn.dropout_keep((B, H, qo + Lq, ko + Lk), p, seed)[:, :, qo:, ko:]).to(device)
    P = ft.attention(q, k, torch.eye(Lk, dtype=dt, device=device).expand(B, H, Lk, Lk), bias=bias)
    close(o, (P * keep / (1 - p)) @ v, 1e-10 if dt == torch.float64 else 2e-4, "o at positions")
    g = torch.randn_like(o)
    got = torch.autograd.grad(o, (q, k, v), g)
    ref = torch.autograd.grad((P * keep / (1 - p)) @ v, (q, k, v), g)
    for a, b, n in zip(got, ref, "qkv"):
        close(a, b, 1e-9 if dt == torch.float64 else 2e-4, f"d{n} at positions")


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_backward_same_bits(device):
    q, k, v = (rand((2, 33, 4, 16), torch.float32, device) for _ in range(3))
    g = torch.randn(2, 33, 4, 16, device=device)
    runs = [
        torch.autograd.grad(ft.flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v), g)
        for _ in range(2)
    ]
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_compile_fullgraph():
    """A small module using flashattn compiles with fullgraph=True (no graph
    breaks) and gives the eager results, forward and backward."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, x):
            B, L, _ = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, 4, 8).unbind(2)
            y = ft.flash_attn_func(q, k, v, causal=True)
            y = y + ft.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            ).transpose(1, 2)
            return self.proj(y.reshape(B, L, 32))

    torch.manual_seed(0)
    m = Block()
    x = torch.randn(2, 10, 32, requires_grad=True)
    eager = m(x)
    (ge,) = torch.autograd.grad(eager.sum(), x)
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    (gc,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(gc, ge)


def test_opcheck():
    """torch.library.opcheck: schema, fake kernels, autograd registration."""
    q, k, v = (
        rand((1, 2, 5, 8), torch.float32, "cpu"),
        rand((1, 2, 7, 8), torch.float32, "cpu"),
        rand((1, 2, 7, 8), torch.float32, "cpu"),
    )
    bias = rand((1, 2, 5, 7), torch.float32, "cpu")
    args = (q, k, v, None, bias, None, None, None, None, None, None, 0.0, 0.0, True, False, -1, -1, 0.0, False, "auto")
    args += (0, 0)  # q_offset, k_offset
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args)
    o, lse = torch.ops.flashattn.fwd(*args)
    bargs = (torch.randn_like(o), q, k, v, o, lse) + args[3:] + (True,)
    torch.library.opcheck(torch.ops.flashattn.bwd.default, bargs, test_utils=("test_schema", "test_faketensor"))


# ---- bad input: exceptions naming the argument ------------------------------
def test_bad_input_raises():
    q, k, v = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    with pytest.raises(TypeError, match="k"):
        ft.flash_attn_func(q, k.double(), v)
    with pytest.raises(TypeError, match="q.dtype"):
        ft.flash_attn_func(q.int(), k, v)
    with pytest.raises(ValueError, match="shape"):
        ft.flash_attn_func(q, k[:, :, :, :4], v)
    with pytest.raises(ValueError, match="heads"):
        ft.flash_attn_func(torch.randn(1, 4, 3, 8), k, v)
    with pytest.raises(ValueError, match="dropout_p"):
        ft.flash_attn_func(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match="q has shape"):
        ft.flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match="window"):
        ft.flash_attn_func(q, k, v, window_size=3)
    with pytest.raises(ValueError, match="alibi_slopes"):
        ft.flash_attn_func(q, k, v, alibi_slopes=torch.ones(3))
    with pytest.raises(ValueError, match="attn_mask"):
        ft.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, 4, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        ft.scaled_dot_product_attention(torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))
    with pytest.raises(ValueError, match="seqlens_q"):
        ft.attention(q, k, v, seqlens_q=torch.tensor([9], dtype=torch.int32))
    with pytest.raises(ValueError, match="backend"):
        ft.attention(q, k, v, backend="gpu")
    with pytest.raises(NotImplementedError, match="block_table"):
        ft.flash_attn_varlen_func(
            q[0], k[0], v[0], torch.tensor([0, 4]), torch.tensor([0, 4]), 4, 4, block_table=torch.zeros(1, 1)
        )
    with pytest.raises(TypeError, match="cpu backend"):  # FA_ERR_DTYPE
        ft.attention(q.double(), k.double(), v.double(), backend="cpu")
    if not flashattn.backends()["cuda"].available:
        with pytest.raises(flashattn.UnsupportedError):
            ft.attention(q, k, v, backend="cuda")


@pytest.mark.skipif(not HAVE_CUDA, reason="no GPU / cuda backend here")
def test_bad_input_cuda():
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="memory"):
        ft.flash_attn_func(q, q.cpu(), q)
    strided = torch.randn(1, 8, 2, 128, device="cuda", dtype=torch.bfloat16)[..., ::2]
    with pytest.raises(flashattn.FlashAttnError):
        ft.flash_attn_func(strided, q, q)
    with pytest.raises(flashattn.FlashAttnError):
        ft.flash_attn_func(q.double(), q.double(), q.double(), backend="cuda")


@pytest.mark.skipif(not HAVE_CUDA, reason="no GPU / cuda backend here")
def test_cuda_current_stream_and_device():
    """Runs on the current stream: work queued there before the call is seen by it."""
    s = torch.cuda.Stream()
    q = torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16)
    ref = ft.flash_attn_func(q, q, q, causal=True)
    with torch.cuda.stream(s):
        q2 = q * 1  # queued on s
        out = ft.flash_attn_func(q2, q2, q2, causal=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert flashattn.last_backend() == "cuda"


def test_op_path_equals_eager_path():
    """The eager fast path (the ops' kernels through an autograd.Function) and
    the dispatcher path (torch.ops.flashattn.fwd with its registered autograd)
    give the same bits, forward and backward (bias gradient included)."""
    from flashattn.torch import _ops

    q, k, v = (
        rand((1, 3, 6, 8), torch.float32, "cpu"),
        rand((1, 3, 9, 8), torch.float32, "cpu"),
        rand((1, 3, 9, 8), torch.float32, "cpu"),
    )
    bias = rand((1, 3, 6, 9), torch.float32, "cpu")
    g = torch.randn(1, 3, 6, 8)
    eager = ft.attention(q, k, v, bias=bias, causal=True)
    want = torch.autograd.grad(eager, (q, k, v, bias), g)
    args = (q, k, v, None, bias) + (None,) * 6 + (0.0, 0.0, True, False, -1, -1, 0.0, False, "auto", 0, 0)
    o, _ = torch.ops.flashattn.fwd(*args)
    got = torch.autograd.grad(o, (q, k, v, bias), g)
    assert torch.equal(o, eager)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert _ops.fwd is not None


HOT_CASES = {
    # name: (api, q shape, k shape, v shape, kwargs); shapes in the api's layout
    "fa_bshd": ("fa", (2, 5, 4, 8), (2, 7, 4, 8), (2, 7, 4, 8), {}),
    "fa_gqa_causal_dv": ("fa", (1, 6, 4, 8), (1, 9, 2, 8), (1, 9, 2, 16), {"causal": True}),
    "fa_window_softcap": ("fa", (1, 9, 2, 8), (1, 9, 2, 8), (1, 9, 2, 8), {"window_size": (3, 1), "softcap": 5.0}),
    "attention_bhsd_top_left": ("attention", (2, 3, 6, 8), (2, 3, 9, 8), (2, 3, 9, 8), {"causal": True}),
    "attention_bhsd_scale": ("attention", (1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8), {"scale": 0.3}),
    "sdpa_causal": ("sdpa", (1, 4, 7, 8), (1, 4, 7, 8), (1, 4, 7, 8), {"is_causal": True}),
    "sdpa_from_bshd_view": ("sdpa_t", (2, 6, 3, 8), (2, 6, 3, 8), (2, 6, 3, 8), {}),
}


def _hot_call(api, q, k, v, kw):
    if api == "fa":
        return ft.flash_attn_func(q, k, v, **kw)
    if api == "attention":
        return ft.attention(q, k, v, **kw)
    if api == "sdpa":
        return ft.scaled_dot_product_attention(q, k, v, **kw)
    return ft.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw)


def _op_call(api, q, k, v, kw):
    """The same call through the dispatcher (torch.ops.flashattn.fwd)."""
    bshd = api in ("fa", "sdpa_t")
    if bshd:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    causal = kw.get("causal", kw.get("is_causal", False))
    wl, wr = kw.get("window_size", (-1, -1))
    args = (q, k, v) + (None,) * 8 + (kw.get("scale", 0.0), kw.get("softcap", 0.0), causal, api == "fa", wl, wr)
    o, _ = torch.ops.flashattn.fwd(*args, 0.0, False, "auto", 0, 0)
    return o.transpose(1, 2) if api == "fa" else o


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("case", list(HOT_CASES))
def test_hot_path_equals_op_path(case, grad, device, monkeypatch):
    """Calls without tensor options take the hot path (_fast.py: one packed
    C call, no dispatcher); it gives the bits, the output strides and the
    gradients of the op path, and it is really taken."""
    from flashattn.torch import _fast

    api, sq, sk, sv, kw = HOT_CASES[case]
    dtype = torch.float32
    q, k, v = (rand(s, dtype, device, requires_grad=grad) for s in (sq, sk, sv))
    taken = []
    real = _fast.attention
    monkeypatch.setattr(_fast, "attention", lambda *a: _taken(taken, real(*a)))
    hot = _hot_call(api, q, k, v, kw)
    assert taken == [True], "the hot path was not taken"
    op = _op_call(api, q, k, v, kw)
    assert hot.shape == op.shape and hot.stride() == op.stride()
    assert torch.equal(hot, op)
    if grad:
        g = torch.randn_like(op)
        want = torch.autograd.grad(op, (q, k, v), g)
        got = torch.autograd.grad(hot, (q, k, v), g)
        for a, b, n in zip(got, want, "qkv"):
            assert a.stride() == b.stride(), f"d{n} strides"
            assert torch.equal(a, b), f"d{n}"


def _taken(taken, r):
    taken.append(r is not None)
    return r


def _hot_and_op(q, k, v, kw, api="fa", grad_o=None):
    """The hot path's and the op path's outputs (and gradients for grad_o) on
    the same inputs, each checked for bits and strides."""
    from flashattn.torch import _fast

    before = _fast.attention
    taken = []
    _fast.attention = lambda *a: _taken(taken, before(*a))
    try:
        hot = _hot_call(api, q, k, v, kw)
    finally:
        _fast.attention = before
    assert taken == [True], "the hot path was not taken"
    op = _op_call(api, q, k, v, kw)
    assert hot.shape == op.shape and hot.stride() == op.stride(), (hot.stride(), op.stride())
    assert torch.equal(hot, op)
    if grad_o is not None:
        g = grad_o(op)
        want = torch.autograd.grad(op, (q, k, v), g)
        got = torch.autograd.grad(hot, (q, k, v), g)
        for a, b, n in zip(got, want, "qkv"):
            assert a.stride() == b.stride(), f"d{n} strides {a.stride()} vs {b.stride()}"
            assert torch.equal(a, b), f"d{n}"
    return hot


def _layouts(shape, dtype, device, grad):
    """One [B, L, H, D] shape in three memory layouts: contiguous, heads
    outermost (a transposed [B, H, L, D]), and a slice of a wider tensor."""
    B, L, H, D = shape
    yield rand(shape, dtype, device, requires_grad=grad)
    t = rand((B, H, L, D), dtype, device, requires_grad=False).transpose(1, 2)
    yield t.detach().requires_grad_(grad)
    w = rand((B, L, H, 2 * D), dtype, device, requires_grad=False)[..., :D]
    yield w.detach().requires_grad_(grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"])
def test_hot_path_plan_cache_follows_layout(device, grad):
    """The hot path keeps a plan per call signature (_fast.py: shapes,
    strides, dtypes, devices, options): calls of one shape in other strides,
    then back, each get their own layout's bits, output strides and
    gradients, never a stale plan's."""
    shape = (2, 5, 3, 8)
    for _ in range(2):  # the second round hits the cached plans
        for q in _layouts(shape, torch.float32, device, grad):
            for k in _layouts(shape, torch.float32, device, grad):
                v = rand(shape, torch.float32, device, requires_grad=grad)
                _hot_and_op(q, k, v, {"causal": True}, grad_o=torch.randn_like if grad else None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad", [False, True], ids=["nograd", "grad"])
def test_hot_path_plan_cache_follows_dtype_and_options(device, grad):
    """One shape, the same strides: a new dtype or another scalar option is a
    new plan (the options, lse's dtype and the packed dtype all change)."""
    shape = (1, 6, 2, 8)
    # f64 runs on ref (cpu tensors) only: cuda refuses it
    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if device == "cuda" else [torch.float64])
    kws = [{}, {"causal": True}, {"softmax_scale": 0.5}, {"window_size": (2, 0)}, {"softcap": 3.0}, {}]
    for dtype in dtypes + dtypes[:1]:
        for kw in kws:
            q, k, v = (rand(shape, dtype, device, requires_grad=grad) for _ in range(3))
            hot = ft.flash_attn_func(q, k, v, **kw)
            kw_op = {("scale" if n == "softmax_scale" else n): x for n, x in kw.items()}
            op = _op_call("fa", q, k, v, kw_op)
            assert hot.dtype == dtype and torch.equal(hot, op), (dtype, kw)
            if grad:
                g = torch.randn_like(op)
                for a, b in zip(torch.autograd.grad(hot, (q, k, v), g), torch.autograd.grad(op, (q, k, v), g)):
                    assert a.dtype == dtype and a.stride() == b.stride() and torch.equal(a, b), (dtype, kw)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_hot_path_plan_cache_follows_device():
    """The same shapes, strides and dtype on cpu, then cuda, then cpu: each
    call gets its own device's plan (memory kind, allocation device)."""
    shape = (1, 5, 2, 8)
    for device in ("cpu", "cuda", "cpu", "cuda"):
        q, k, v = (rand(shape, torch.float32, device, requires_grad=True) for _ in range(3))
        o = _hot_and_op(q, k, v, {}, grad_o=torch.randn_like)
        assert o.device == q.device
    q = rand(shape, torch.float32, "cpu", requires_grad=False)
    with pytest.raises((ValueError, RuntimeError)):
        ft.flash_attn_func(q, q.cuda(), q)


@pytest.mark.parametrize("device", DEVICES)
def test_hot_path_backward_gradient_layouts(device):
    """The backward plan is keyed on the incoming gradient's strides too:
    a contiguous gradient, a transposed one, and an expanded one (a .sum()'s,
    stride 0: the op path's contiguous copy) give the op path's gradients."""
    shape = (2, 4, 3, 8)
    q, k, v = (rand(shape, torch.float32, device, requires_grad=True) for _ in range(3))
    grads = [
        torch.randn_like,
        lambda o: torch.randn(o.shape[0], o.shape[2], o.shape[1], o.shape[3], device=o.device).transpose(1, 2),
        lambda o: torch.ones((), device=o.device).expand(o.shape),
        torch.randn_like,
    ]
    for g in grads:
        _hot_and_op(q, k, v, {}, grad_o=g)


def test_hot_path_double_backward_refused():
    """create_graph through the hot path's backward: the op path's
    once_differentiable behaviour (first gradients right, a second
    backward refused)."""
    q, k, v = (rand((1, 4, 2, 8), torch.float64, "cpu", requires_grad=True) for _ in range(3))
    o = ft.flash_attn_func(q, k, v)
    (dq,) = torch.autograd.grad(o.sum(), (q,), create_graph=True)
    want = torch.autograd.grad(_op_call("fa", q, k, v, {}).sum(), (q,))[0]
    assert torch.equal(dq, want)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(dq.sum(), (q,))


def test_hot_path_threads():
    """Plans live in each thread's context: threads calling the same
    signatures at once get the bits of a call made alone."""
    import threading

    q, k, v = (rand((1, 16, 2, 8), torch.float32, "cpu", requires_grad=True) for _ in range(3))
    g = torch.randn(1, 16, 2, 8)
    want = ft.flash_attn_func(q, k, v)
    want_g = torch.autograd.grad(want, (q, k, v), g)
    bad = []

    def work():
        for _ in range(50):
            o = ft.flash_attn_func(q, k, v)
            got = torch.autograd.grad(o, (q, k, v), g)
            if not torch.equal(o, want) or not all(torch.equal(a, b) for a, b in zip(got, want_g)):
                bad.append(1)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_hot_path_unhashable_option():
    """A list as window_size (unhashable, so not a cache key) still takes the
    hot path, planned per call, and gives the tuple's bits."""
    q = rand((1, 6, 2, 8), torch.float32, "cpu", requires_grad=False)
    a = ft.flash_attn_func(q, q, q, window_size=[2, 1])
    b = ft.flash_attn_func(q, q, q, window_size=(2, 1))
    assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_hot_path_refuses_and_falls_back(device):
    """What the hot path does not take goes the general way with the same
    checks: a dtype mismatch and a wrong rank raise the library's errors."""
    q = rand((1, 4, 2, 8), torch.float32, device, requires_grad=False)
    with pytest.raises(TypeError, match="dtype"):
        ft.flash_attn_func(q, q.double(), q)
    with pytest.raises(ValueError, match="k has shape"):
        ft.flash_attn_func(q, q[0], q)
    with pytest.raises(ValueError, match="backend"):
        ft.flash_attn_func(q, q, q, backend="gpu")


def test_varlen_new_cu_seqlens_in_the_same_memory():
    """A cu_seqlens of another length at the address of an earlier one (as
    after a free) is read with its own length: the options cache keys on
    the packed count too (it returned the old count, reading past the array)."""
    q = rand((1, 12, 2, 8), torch.float32, "cpu", requires_grad=False)[0]
    buf = torch.tensor([0, 4, 8, 12], dtype=torch.int32)
    ft.flash_attn_varlen_func(q, q, q, buf, buf, 4, 4)
    buf[:2] = torch.tensor([0, 12], dtype=torch.int32)
    one = buf[:2]
    assert one.data_ptr() == buf.data_ptr()
    out = ft.flash_attn_varlen_func(q, q, q, one, one, 12, 12)
    want = ft.attention(q[None], q[None], q[None], layout="bshd")[0]
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)

"""The FP8 (e4m3) forward through Python: numpy (ml_dtypes.float8_e4m3fn,
on ref), torch CPU tensors (ref; the cpu backend refuses) and CUDA tensors
(the cuda backend, Hopper; skipped elsewhere). The rule itself is checked in
C (tests/test_fp8.c); here: the arguments arrive (descales, out_dtype,
layouts, options), results agree with a float64 rendering of the rule, and
refusals are the documented exceptions."""

import numpy as np
import pytest

import flashattn

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def e4m3(x):
    return np.asarray(x, np.float64).astype(E4M3)


def rule(q, k, v, qd, kd, vd, causal=False, block=128):
    """docs/semantics.md's FP8 forward in float64 ([B, H, L, D], GQA by repetition, top-left causal)."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    o = np.zeros((B, Hq, Lq, v.shape[3]))
    lse = np.full((B, Hq, Lq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            kv = h // g
            s = q[b, h] @ k[b, kv].T * (qd[b, kv] * kd[b, kv] / np.sqrt(D))
            if causal:
                s = np.where(np.arange(Lk)[None, :] > np.arange(Lq)[:, None], -np.inf, s)
            for i in range(Lq):
                m, l, acc = -np.inf, 0.0, np.zeros(v.shape[3])
                for j0 in range(0, Lk, block):
                    sb = s[i, j0 : j0 + block]
                    mn = max(m, sb.max())
                    if mn == -np.inf:
                        continue
                    a = np.exp(m - mn)
                    p = 256.0 * np.exp(sb - mn)
                    l = l * a + p.sum()
                    acc = acc * a + e4m3(p).astype(np.float64) @ v[b, kv, j0 : j0 + block]
                    m = mn
                if m > -np.inf:
                    o[b, h, i] = acc * vd[b, kv] / l
                    lse[b, h, i] = m + np.log(l) - 8 * np.log(2)
    return o, lse


def inputs(rng, B=2, Hq=4, Hkv=2, Lq=40, Lk=300, D=64, Dv=64):
    q = e4m3(rng.standard_normal((B, Hq, Lq, D)))
    k = e4m3(rng.standard_normal((B, Hkv, Lk, D)))
    v = e4m3(rng.standard_normal((B, Hkv, Lk, Dv)))
    qd = rng.uniform(0.5, 2, (B, Hkv)).astype(np.float32)
    kd = rng.uniform(0.5, 2, (B, Hkv)).astype(np.float32)
    vd = rng.uniform(0.5, 2, (B, Hkv)).astype(np.float32)
    return q, k, v, qd, kd, vd


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_numpy_ref(causal, layout):
    q, k, v, qd, kd, vd = inputs(np.random.default_rng(1))
    want, want_lse = rule(q, k, v, qd.astype(np.float64), kd.astype(np.float64), vd.astype(np.float64), causal)
    args = (q, k, v) if layout == "bhsd" else tuple(np.swapaxes(x, 1, 2) for x in (q, k, v))
    o, lse = flashattn.attention(*args, layout=layout, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and lse.dtype == np.float32
    if layout == "bshd":
        o = np.swapaxes(o, 1, 2)
    np.testing.assert_allclose(o.astype(np.float64), want, rtol=2**-8, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)


def test_numpy_defaults_f16_and_scalars():
    q, k, v, *_ = inputs(np.random.default_rng(2), B=1, Hq=2, Hkv=1)
    ones = np.ones((1, 1))
    want, _ = rule(q, k, v, ones * 0.5, ones, ones * 2)
    o, _ = flashattn.attention(q, k, v, q_descale=0.5, v_descale=2.0, out_dtype=np.float16)
    assert o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float64), want, rtol=2**-11, atol=1e-6)


def test_numpy_refusals():
    q, k, v, *_ = inputs(np.random.default_rng(3), B=1, Hq=2, Hkv=1, Lk=64)
    with pytest.raises(TypeError, match="no FP8"):
        flashattn.attention(q, k, v, backend="cpu")
    with pytest.raises(ValueError, match="q_descale"):
        flashattn.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), q_descale=2.0)
    with pytest.raises(ValueError, match="dropout"):
        flashattn.attention(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="k_descale"):
        flashattn.attention(q, k, v, k_descale=np.ones((1, 3), np.float32))
    with pytest.raises(TypeError, match="out_dtype"):
        flashattn.attention(q, k, v, out_dtype=np.float32)
    with pytest.raises(TypeError, match="forward only"):
        o, lse = flashattn.attention(q, k, v)
        flashattn.attention_backward(q, k, v, o.astype(E4M3), lse, o.astype(E4M3))


torch = pytest.importorskip("torch")
import flashattn.torch as ft  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and flashattn.backends()["cuda"].available


def _torch_inputs(device, B=2, Lq=70, Lk=300, Hq=4, Hkv=2, D=128):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(B, Lq, Hq, D, generator=g).to(torch.float8_e4m3fn).to(device)
    k = torch.randn(B, Lk, Hkv, D, generator=g).to(torch.float8_e4m3fn).to(device)
    v = torch.randn(B, Lk, Hkv, D, generator=g).to(torch.float8_e4m3fn).to(device)
    qd = torch.rand(B, Hkv, generator=g).add(0.5).to(device)
    return q, k, v, qd


@pytest.mark.parametrize("causal", [False, True])
def test_torch_cpu_ref(causal):
    q, k, v, qd = _torch_inputs("cpu")
    o, lse, _ = ft.flash_attn_func(q, k, v, causal=causal, q_descale=qd, k_descale=2.0, return_attn_probs=True)
    assert o.dtype == torch.bfloat16 and o.shape == (2, 70, 4, 128)
    # the same call through numpy (bottom-right causal as flash_attn_func aligns it, here Lq < Lk)
    qn, kn, vn = (x.transpose(1, 2).view(torch.uint8).numpy().view(E4M3) for x in (q, k, v))
    on, ln = flashattn.attention(qn, kn, vn, causal=causal, align="bottom_right", q_descale=qd.numpy(), k_descale=2.0)
    np.testing.assert_array_equal(o.transpose(1, 2).float().numpy(), on.astype(np.float32))
    np.testing.assert_array_equal(lse.numpy(), ln)


def test_torch_cpu_refusals():
    q, k, v, _ = _torch_inputs("cpu", Lk=64)
    with pytest.raises(TypeError, match="no FP8"):
        ft.flash_attn_func(q, k, v, backend="cpu")
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        ft.attention(q.float(), k.float(), v.float(), q_descale=1.0)
    with pytest.raises(TypeError, match="out_dtype"):
        ft.flash_attn_func(q, k, v, out_dtype=torch.float32)


@pytest.mark.skipif(not HAVE_CUDA, reason="no GPU / cuda backend here")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_torch_cuda_against_ref(causal, out_dtype):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the cuda FP8 forward is sm_90a (Hopper) only")
    q, k, v, qd = _torch_inputs("cuda")
    o = ft.flash_attn_func(q, k, v, causal=causal, q_descale=qd, k_descale=0.5, v_descale=2.0, out_dtype=out_dtype)
    r = ft.flash_attn_func(q.cpu(), k.cpu(), v.cpu(), causal=causal, q_descale=qd.cpu(), k_descale=0.5, v_descale=2.0,
                           out_dtype=out_dtype)  # fmt: skip
    # the C suite's tolerance (tests/test_fp8.c) without its per-element bound from the tensor cores'
    # model: their truncating k32 steps move scores enough to round a few percent of P to the other
    # e4m3 neighbour, each moving an element by up to ~1/8 of that P's share; so compare the bulk
    # tightly and allow a small share out (H200: 0.26-0.42% of elements; a P / V layout bug moves
    # most of them: the C suite's rejects_bugs)
    err = (o.cpu().float() - r.float()).abs()
    tol = 2**-7 * r.float().abs() + 2e-3
    assert (err > tol).float().mean() < 1e-2
    assert err.max() < 0.1


def test_quantize_and_hadamard():
    """fp8_quantize: per-(sequence, kv head) scales to e4m3's 448, and the
    Hadamard rotation of q and k, which leaves scores alone and on inputs
    with outlier channels cuts the error of the FP8 forward (ref here)."""
    g = torch.Generator().manual_seed(7)
    B, L, Hq, Hkv, D = 1, 256, 4, 2, 64
    q, k, v = (torch.randn(B, L, h, D, generator=g, dtype=torch.float64) for h in (Hq, Hkv, Hkv))
    q8, k8, v8, qd, kd, vd = ft.fp8_quantize(q, k, v)
    assert q8.dtype == torch.float8_e4m3fn and qd.shape == (B, Hkv) and qd.dtype == torch.float32
    # dequantized within e4m3's half ulp (2^-4 relative) plus the subnormal step of the scale
    back = k8.double() * kd[:, None, :, None].double()
    assert ((back - k).abs() <= 2**-4 * k.abs() + 2**-9 * kd.max().item()).all()
    assert k8.float().abs().amax().item() == 448.0
    q[..., :4] *= 20
    k[..., :4] *= 20
    want = ft.flash_attn_func(q, k, v, causal=True, backend="ref")
    err = []
    for had in (False, True):
        q8, k8, v8, qd, kd, vd = ft.fp8_quantize(q, k, v, hadamard=had)
        o = ft.flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
        err.append((o.double() - want).pow(2).mean().sqrt().item())
    assert err[1] < 0.5 * err[0], err
    with pytest.raises(NotImplementedError, match="power of 2"):
        ft.fp8_quantize(q[..., :48], k[..., :48], v[..., :48], hadamard=True)

"""flashattn.torch.flash_attn_with_kvcache and flashattn.torch.merge_states against a float64
reference written here (from docs/semantics.md's KV-cache section and FlashAttention's docstring):
contiguous and paged caches (shuffled pages), 0 / 1 / several appended tokens, GQA, causal, window,
softcap, ALiBi, rotary (both styles), split counts, the cache contents after the append (bit-exact),
torch.compile of a decode step (the cache mutation through the op), bad input, and CUDA tensors
(on cuda tensors where a GPU is).
"""

import math

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import flashattn.torch as ft  # noqa: E402

HAVE_CUDA = torch.cuda.is_available() and flashattn.backends()["cuda"].available
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no GPU / cuda backend here")


def randn(shape, dtype=torch.float32, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def close(x, ref, tol, what):
    x, ref = x.double(), ref.double()
    assert x.shape == ref.shape, f"{what}: shape {tuple(x.shape)} != {tuple(ref.shape)}"
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(x), fin), f"{what}: finite entries differ"
    if fin.any():
        err = (x[fin] - ref[fin]).abs().max().item() / max(1.0, ref[fin].abs().max().item())
        assert err <= tol, f"{what}: error {err:.3g} > {tol}"
    assert torch.equal(x[~fin], ref[~fin]), f"{what}: infinite entries differ"


# ---- the float64 reference ----------------------------------------------------
def rotate(x, cos, sin, pos, interleaved):
    """RoPE of x [B, L, H, D] (float64 result) at positions pos [B, L] with tables [R, rot / 2]."""
    x = x.double()
    rot = 2 * cos.shape[1]
    c, s = cos.double()[pos][:, :, None], sin.double()[pos][:, :, None]
    r = x[..., :rot]
    x1, x2 = (r[..., 0::2], r[..., 1::2]) if interleaved else (r[..., : rot // 2], r[..., rot // 2 :])
    y1, y2 = x1 * c - x2 * s, x1 * s + x2 * c
    y = torch.stack((y1, y2), -1).flatten(-2) if interleaved else torch.cat((y1, y2), -1)
    return torch.cat((y, x[..., rot:]), -1)


def reference(q, k_cache, v_cache, seqlens, k=None, v=None, block_table=None, *, scale=None, causal=False,
              window=(-1, -1), softcap=0.0, alibi=None, cos=None, sin=None, interleaved=True):  # fmt: skip
    """(out [B, Lq, Hq, Dv] float64, lse [B, Hq, Lq] float64, k_cache, v_cache after the append).

    Key j of sequence b is cache row (b, j), or (block_table[b, j // page_size], j % page_size)
    paged; k, v are written at seqlens[b] + t (rotated there first, rounded to the cache dtype once);
    query row i sits at seqlens[b] + i (its rotary position) and sees key j when the window / causal
    band, aligned bottom-right, says so."""
    kc, vc = k_cache.clone(), v_cache.clone()
    B, Lq, Hq, D = q.shape
    Hkv, ps = kc.shape[2], kc.shape[1]
    L_new = 0 if k is None else k.shape[1]
    seqlens = [int(n) for n in seqlens]
    at = (lambda b, j: (b, j)) if block_table is None else (lambda b, j: (int(block_table[b, j // ps]), j % ps))
    q64 = q.double()
    if cos is not None:
        base = torch.tensor(seqlens)[:, None]
        k = rotate(k, cos, sin, base + torch.arange(L_new), interleaved).to(k.dtype)
        q64 = rotate(q, cos, sin, base + torch.arange(Lq), interleaved)
    for b in range(B):
        for t in range(L_new):
            kc[at(b, seqlens[b] + t)] = k[b, t]
            vc[at(b, seqlens[b] + t)] = v[b, t]
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.zeros(B, Lq, Hq, vc.shape[3], dtype=torch.float64)
    lse = torch.full((B, Hq, Lq), -math.inf, dtype=torch.float64)
    left, right = window
    if causal:
        right = 0
    for b in range(B):
        lk = seqlens[b] + L_new
        if lk == 0:
            continue
        K = torch.stack([kc[at(b, j)] for j in range(lk)]).double()  # [lk, Hkv, D]
        V = torch.stack([vc[at(b, j)] for j in range(lk)]).double()
        i = torch.arange(Lq)[:, None] + lk - Lq
        j = torch.arange(lk)[None]
        vis = torch.ones(Lq, lk, dtype=torch.bool)
        if left >= 0:
            vis &= j >= i - left
        if right >= 0:
            vis &= j <= i + right
        for h in range(Hq):
            g = h // (Hq // Hkv)
            s = scale * q64[b, :, h] @ K[:, g].T
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            if alibi is not None:
                s = s - float(alibi[h]) * (i - j).abs().double()
            s = s.masked_fill(~vis, -math.inf)
            for r in range(Lq):
                if vis[r].any():
                    lse[b, h, r] = torch.logsumexp(s[r], 0)
                    out[b, r, h] = torch.softmax(s[r], 0) @ V[:, g]
    return out, lse, kc, vc


# ---- a decode problem -----------------------------------------------------------
def problem(B=2, Hq=4, Hkv=2, Lq=1, L_new=1, D=16, Dv=16, cap=40, page=0, seqlens=(5, 23), dtype=torch.float32):
    """q, caches (contiguous [B, cap, Hkv, D], or paged: pages of `page` rows, shuffled, two spare),
    block_table, k, v, cache_seqlens."""
    q = randn((B, Lq, Hq, D), dtype)
    if page:
        per = -(-cap // page)
        npages = B * per + 2
        block_table = torch.randperm(npages, generator=torch.Generator().manual_seed(3))[: B * per]
        block_table = block_table.view(B, per).to(torch.int32)
        shape = (npages, page, Hkv)
    else:
        block_table = None
        shape = (B, cap, Hkv)
    kc, vc = randn((*shape, D), dtype), randn((*shape, Dv), dtype)
    k = randn((B, L_new, Hkv, D), dtype) if L_new else None
    v = randn((B, L_new, Hkv, Dv), dtype) if L_new else None
    return q, kc, vc, block_table, k, v, torch.tensor(seqlens[:B], dtype=torch.int32)


CASES = {
    "plain": dict(),
    "gqa_causal": dict(Hq=6, Hkv=2, opts=dict(causal=True)),
    "mqa_dv": dict(Hq=4, Hkv=1, Dv=8),
    "chunk_causal": dict(Lq=4, L_new=4, opts=dict(causal=True)),
    "chunk_noncausal": dict(Lq=3, L_new=3),
    "queries_gt_new": dict(Lq=5, L_new=2, opts=dict(causal=True)),
    "window": dict(Lq=3, L_new=3, opts=dict(window=(4, 0))),
    "window_causal": dict(Lq=2, L_new=2, opts=dict(causal=True, window=(6, -1))),
    "softcap_scale": dict(opts=dict(softcap=2.0, scale=0.4)),
    "alibi": dict(Lq=2, L_new=2, opts=dict(causal=True, alibi=True)),
    "rotary_gptj": dict(Lq=3, L_new=3, opts=dict(causal=True, rotary=8, interleaved=True)),
    "rotary_neox": dict(Lq=1, L_new=1, opts=dict(rotary=16, interleaved=False)),
    "rotary_neox_chunk": dict(Lq=2, L_new=2, opts=dict(causal=True, rotary=10, interleaved=False)),
    "empty_and_full": dict(L_new=0, seqlens=(0, 40)),
}


def run_case(case, paged, append, dtype=torch.float32, backend="auto", splits=(0, 1, 3), tol=2e-4):
    spec = dict(CASES[case])
    opts = dict(spec.pop("opts", {}))
    if append is not None:
        spec["L_new"] = append
    q, kc, vc, bt, k, v, seqlens = problem(page=7 if paged else 0, dtype=dtype, **spec)
    Hq, D = q.shape[2], q.shape[3]
    alibi = torch.linspace(0.1, 0.8, Hq) if opts.pop("alibi", False) else None
    rot = opts.pop("rotary", 0)
    interleaved = opts.pop("interleaved", True)
    cos = sin = None
    if rot:
        ang = torch.arange(64, dtype=torch.float64)[:, None] * 0.37 ** torch.arange(rot // 2, dtype=torch.float64)
        cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    ro, rl, rk, rv = reference(q, kc, vc, seqlens, k, v, bt, alibi=alibi, cos=cos, sin=sin, interleaved=interleaved,
                               **opts)  # fmt: skip
    kw = dict(causal=opts.get("causal", False), window_size=opts.get("window", (-1, -1)),
              softcap=opts.get("softcap", 0.0), softmax_scale=opts.get("scale"), alibi_slopes=alibi,
              rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved, backend=backend)  # fmt: skip
    first = None
    for n in splits:
        k2, v2 = kc.clone(), vc.clone()
        out, lse = ft.flash_attn_with_kvcache(
            q, k2, v2, k, v, cache_seqlens=seqlens, block_table=bt, num_splits=n, return_softmax_lse=True, **kw
        )
        assert out.dtype == q.dtype and out.shape == ro.shape
        assert lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
        close(out, ro, tol, f"out (num_splits={n})")
        close(lse, rl, tol, f"lse (num_splits={n})")
        assert torch.equal(k2, rk), f"k_cache after the append (num_splits={n})"
        assert torch.equal(v2, rv), f"v_cache after the append (num_splits={n})"
        if first is None:
            first = out, lse
        else:  # another split count: the same up to rounding
            close(out, first[0], tol, f"out, num_splits={n} against {splits[0]}")
            close(lse, first[1], tol, f"lse, num_splits={n} against {splits[0]}")


# cases that fix their own new tokens run once; the others append 0, 1 and 3 tokens
APPENDS = [(c, a) for c in CASES for a in ([None] if "L_new" in CASES[c] else [0, 1, 3])]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case,append", APPENDS, ids=[c if a is None else f"{c}-append{a}" for c, a in APPENDS])
def test_kvcache_matches_reference(case, append, paged):
    run_case(case, paged, append)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case", ["gqa_causal", "chunk_causal", "rotary_gptj", "alibi"])
def test_kvcache_float64_on_ref(case, paged):
    run_case(case, paged, None, dtype=torch.float64, backend="ref", splits=(0, 2), tol=1e-10)


@pytest.mark.parametrize("case", ["gqa_causal", "rotary_neox_chunk"])
def test_kvcache_bfloat16(case):
    run_case(case, True, None, dtype=torch.bfloat16, backend="cpu", splits=(0, 1, 4), tol=5e-2)


def test_kvcache_long_cache_many_splits():
    """Splits over hundreds of keys (page boundaries inside and at the end of a sequence)."""
    q, kc, vc, bt, k, v, seqlens = problem(B=3, Hq=8, Hkv=2, cap=600, page=16, seqlens=(0, 255, 599), L_new=1)
    ro, rl, rk, rv = reference(q, kc, vc, seqlens, k, v, bt, causal=True)
    for n in (0, 1, 2, 7, 64):
        k2, v2 = kc.clone(), vc.clone()
        out, lse = ft.flash_attn_with_kvcache(
            q, k2, v2, k, v, cache_seqlens=seqlens, block_table=bt, causal=True, num_splits=n, return_softmax_lse=True
        )
        close(out, ro, 2e-4, f"out (num_splits={n})")
        close(lse, rl, 2e-4, f"lse (num_splits={n})")
        assert torch.equal(k2, rk) and torch.equal(v2, rv)


def test_kvcache_seqlens_forms():
    """cache_seqlens as an int, a list, an int64 tensor, or None (the whole capacity)."""
    q, kc, vc, _, k, v, _ = problem(seqlens=(9, 9))
    want = ft.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, cache_seqlens=torch.tensor([9, 9]).int())
    for form in (9, [9, 9], torch.tensor([9, 9])):
        got = ft.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, cache_seqlens=form)
        assert torch.equal(got, want), form
    ro, _, _, _ = reference(q, kc, vc, [40, 40])
    close(ft.flash_attn_with_kvcache(q, kc, vc), ro, 2e-4, "cache_seqlens=None")


def test_cache_batch_idx():
    """cache_batch_idx [B]: sequence b lives in cache row cache_batch_idx[b] (of more rows than B)."""
    q, kc, vc, _, k, v, seqlens = problem(B=2, cap=20, seqlens=(4, 11))
    big_k, big_v = randn((5, 20, 2, 16)), randn((5, 20, 2, 16))
    idx = torch.tensor([3, 1], dtype=torch.int32)
    big_k[idx.long()], big_v[idx.long()] = kc, vc
    ro, rl, rk, rv = reference(q, kc, vc, seqlens, k, v, causal=True)
    before_k, before_v = big_k.clone(), big_v.clone()
    out = ft.flash_attn_with_kvcache(q, big_k, big_v, k, v, cache_seqlens=seqlens, cache_batch_idx=idx, causal=True)
    close(out, ro, 2e-4, "out")
    assert torch.equal(big_k[idx.long()], rk) and torch.equal(big_v[idx.long()], rv)
    others = torch.tensor([0, 2, 4])
    assert torch.equal(big_k[others], before_k[others]) and torch.equal(big_v[others], before_v[others])
    # no cache_batch_idx and more cache rows than B: sequence b uses row b, as in FlashAttention
    big_k[:2], big_v[:2] = kc, vc
    before_k = big_k.clone()
    out = ft.flash_attn_with_kvcache(q, big_k, big_v, k, v, cache_seqlens=seqlens, causal=True)
    close(out, ro, 2e-4, "out, cache rows > B")
    assert torch.equal(big_k[:2], rk) and torch.equal(big_v[:2], rv) and torch.equal(big_k[2:], before_k[2:])


def test_shared_prefix_pages():
    """Two sequences reading the same prefix pages (no append), through one block table."""
    q, kc, vc, bt, _, _, _ = problem(cap=32, page=8, L_new=0)
    bt = bt.clone()
    bt[1, :2] = bt[0, :2]
    seqlens = torch.tensor([16, 30], dtype=torch.int32)
    ro, rl, _, _ = reference(q, kc, vc, seqlens, block_table=bt)
    out, lse = ft.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=bt, return_softmax_lse=True)
    close(out, ro, 2e-4, "out")
    close(lse, rl, 2e-4, "lse")


def test_no_gradients():
    """No autograd, as FlashAttention: outputs never require grad (eager and op paths alike)."""
    q, kc, vc, _, k, v, seqlens = problem()
    q.requires_grad_(True)
    k.requires_grad_(True)
    out = ft.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens)
    assert not out.requires_grad
    out2, _ = torch.ops.flashattn.fwd_kvcache(
        q.detach(),
        kc,
        vc,
        None,
        None,
        seqlens + 1,
        None,
        None,
        None,
        None,
        0.0,
        0.0,
        False,
        -1,
        -1,
        True,
        0,
        True,
        "auto",
    )
    assert torch.equal(out2, out)
    o, lse = ft.merge_states([out.transpose(1, 2).requires_grad_(True)], [torch.zeros(2, 4, 1)])
    assert not o.requires_grad


# ---- torch.compile, opcheck ---------------------------------------------------------
def test_compile_decode_step_fullgraph():
    """A decode step (projections, rotary, append, attention, output projection) compiles with
    fullgraph=True; the cache writes go through the op's declared mutation: two compiled steps give
    the eager steps' outputs and caches, bit for bit."""
    torch.manual_seed(0)
    B, Hq, Hkv, D, cap = 2, 4, 2, 8, 24

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(32, Hq * D)
            self.kv = torch.nn.Linear(32, 2 * Hkv * D)
            self.o = torch.nn.Linear(Hq * D, 32)

        def forward(self, x, k_cache, v_cache, seqlens, cos, sin):
            q = self.q(x).view(B, 1, Hq, D)
            k, v = self.kv(x).view(B, 1, 2, Hkv, D).unbind(2)
            y = ft.flash_attn_with_kvcache(
                q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=seqlens, causal=True, rotary_interleaved=False
            )
            return self.o(y.reshape(B, 1, Hq * D)) + k_cache.sum() * 0

    m = Step()
    ang = torch.arange(cap)[:, None] * 0.5 ** torch.arange(D // 2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    kc, vc = torch.randn(B, cap, Hkv, D), torch.randn(B, cap, Hkv, D)
    xs = [torch.randn(B, 1, 32) for _ in range(2)]
    caches = {}
    for name, fn in (("eager", m), ("compiled", torch.compile(m, fullgraph=True, backend="aot_eager"))):
        torch._dynamo.reset()
        k2, v2 = kc.clone(), vc.clone()
        seqlens = torch.tensor([3, 10], dtype=torch.int32)
        outs = []
        with torch.no_grad():
            for x in xs:
                outs.append(fn(x, k2, v2, seqlens, cos, sin))
                seqlens = seqlens + 1
        caches[name] = (outs, k2, v2)
    (oe, ke, ve), (oc, kc2, vc2) = caches["eager"], caches["compiled"]
    assert not torch.equal(ke, kc), "the eager steps wrote into the cache"
    assert torch.equal(kc2, ke) and torch.equal(vc2, ve), "the compiled steps wrote the same cache"
    for a, b in zip(oc, oe):
        torch.testing.assert_close(a, b)


def test_compile_merge_states_fullgraph():
    o1, o2 = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    l1, l2 = torch.randn(1, 2, 3), torch.randn(1, 2, 3)

    def f(a, b, la, lb):
        o, lse = ft.merge_states([a * 1, b], [la, lb])
        return o + 1, lse

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(o1, o2, l1, l2)
    want = f(o1, o2, l1, l2)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_opcheck():
    q, kc, vc, bt, k, v, seqlens = problem(page=8)
    args = (q, kc, vc, k, v, seqlens, bt, None, None, None, 0.0, 0.0, True, -1, -1, True, 0, True, "auto")
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default, args)
    parts = ([randn((1, 2, 3, 4)), randn((1, 2, 3, 4))], [randn((1, 2, 3)), randn((1, 2, 3))], "auto")
    torch.library.opcheck(torch.ops.flashattn.merge_states.default, parts)


# ---- merge_states ----------------------------------------------------------------------
def test_merge_states_worked_example():
    """The seeds' blocks [1, 2] and [3] with V = [10, 20, 40]: o = 32.405."""
    e = math.e
    o1 = torch.full((1, 1, 1, 1), (10 * e + 20 * e * e) / (e + e * e), dtype=torch.float64)
    l1 = torch.full((1, 1, 1), math.log(e + e * e), dtype=torch.float64)
    o2, l2 = torch.full((1, 1, 1, 1), 40.0, dtype=torch.float64), torch.full((1, 1, 1), 3.0, dtype=torch.float64)
    o, lse = ft.merge_states([o1, o2], [l1, l2])
    assert abs(o.item() - 32.405) < 1e-3 and lse.dtype == torch.float64
    assert abs(lse.item() - math.log(e + e * e + e**3)) < 1e-12
    o, lse = ft.merge_states([torch.ones(1, 1, 2, 3)] * 2, [torch.full((1, 1, 2), -math.inf)] * 2)
    assert (o == 0).all() and torch.isneginf(lse).all() and lse.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merge_states_of_split_keys(dtype):
    """Attention over keys cut into three disjoint sets, merged, equals attention over all of them."""
    q, k, v = randn((2, 4, 5, 16)), randn((2, 2, 30, 16)), randn((2, 2, 30, 8))
    want, want_lse = ft.attention(q.double(), k.double(), v.double(), return_lse=True)
    parts = [
        ft.attention(q, k[:, :, s], v[:, :, s], return_lse=True) for s in (slice(0, 7), slice(7, 20), slice(20, 30))
    ]
    o, lse = ft.merge_states([p[0].to(dtype) for p in parts], [p[1] for p in parts])
    assert o.dtype == dtype and o.shape == want.shape
    close(o, want, 2e-4 if dtype == torch.float32 else 5e-2, "o")
    close(lse, want_lse, 2e-4, "lse")


# ---- bad input: exceptions naming the argument ------------------------------------------
def test_bad_input_raises():
    q, kc, vc, bt, k, v, seqlens = problem(page=8)
    qc, kcc, vcc, _, _, _, _ = problem()

    def call(**kw):
        base = dict(q=q, k_cache=kc, v_cache=vc, k=k, v=v, cache_seqlens=seqlens, block_table=bt)
        base.update(kw)
        return ft.flash_attn_with_kvcache(**base)

    with pytest.raises(ValueError, match="q has shape"):
        call(q=q[0])
    with pytest.raises(ValueError, match="k_cache has shape"):
        call(k_cache=kc[0])
    with pytest.raises(TypeError, match="k_cache"):
        call(k_cache=kc.double())
    with pytest.raises(TypeError, match="q.dtype"):
        call(q=q.int())
    with pytest.raises(ValueError, match="k and v"):
        call(v=None)
    with pytest.raises(ValueError, match="cache_seqlens"):
        call(cache_seqlens=torch.tensor([1, 2, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match="heads"):
        call(q=randn((2, 1, 3, 16)))
    with pytest.raises(ValueError, match="block_table"):
        call(block_table=bt[:1])
    with pytest.raises(ValueError, match="block_table"):
        bad = bt.clone()
        bad[0, 0] = 1000
        call(block_table=bad)
    with pytest.raises(flashattn.UnsupportedError, match="cache_leftpad"):
        call(cache_leftpad=torch.zeros(2, dtype=torch.int32))
    with pytest.raises(flashattn.UnsupportedError, match="cache_batch_idx"):
        call(cache_batch_idx=torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="cache_batch_idx"):
        call(block_table=None, k_cache=kcc, v_cache=vcc, cache_batch_idx=torch.tensor([0], dtype=torch.int32))
    cos = torch.ones(64, 4)
    with pytest.raises(ValueError, match="rotary_cos"):
        call(rotary_cos=cos)
    with pytest.raises(ValueError, match="rotary_sin"):
        call(rotary_cos=cos, rotary_sin=torch.ones(64, 3), causal=True)
    with pytest.raises(ValueError, match="rotary"):
        call(rotary_cos=cos, rotary_sin=cos, k=None, v=None)
    with pytest.raises(ValueError, match="rotary_len"):  # positions past the table
        call(rotary_cos=cos[:10], rotary_sin=cos[:10])
    with pytest.raises(flashattn.UnsupportedError, match="rotary_cos"):  # FlashAttention's q position rule
        call(q=randn((2, 2, 4, 16)), k=randn((2, 2, 2, 16)), v=randn((2, 2, 2, 16)), rotary_cos=cos, rotary_sin=cos)
    with pytest.raises(ValueError, match="window_size"):
        call(window_size=3)
    with pytest.raises(ValueError, match="alibi_slopes"):
        call(alibi_slopes=torch.ones(3))
    with pytest.raises(ValueError, match="num_splits"):
        call(num_splits=-1)
    with pytest.raises(ValueError, match="backend"):
        call(backend="gpu")
    with pytest.raises(TypeError, match="cpu backend"):  # float64 runs on ref only
        call(q=q.double(), k_cache=kc.double(), v_cache=vc.double(), k=k.double(), v=v.double(), backend="cpu")
    with pytest.raises(ValueError, match="o_parts"):
        ft.merge_states([randn((1, 1, 2, 3))], [])
    with pytest.raises(ValueError, match="lse_parts"):
        ft.merge_states([randn((1, 1, 2, 3))], [randn((1, 1, 2, 3))])
    with pytest.raises(ValueError, match="lse_parts"):
        ft.merge_states([randn((1, 1, 2, 3))], [randn((1, 1, 5))])


def test_failed_call_leaves_cache_untouched():
    """Past the capacity: an error naming cache_seqlens, nothing written."""
    q, kc, vc, bt, k, v, _ = problem(page=8, L_new=3)
    k0, v0 = kc.clone(), vc.clone()
    with pytest.raises(ValueError, match="cache_seqlens"):
        ft.flash_attn_with_kvcache(
            q, kc, vc, k, v, cache_seqlens=torch.tensor([5, 39], dtype=torch.int32), block_table=bt
        )
    assert torch.equal(kc, k0) and torch.equal(vc, v0)


# ---- CUDA tensors: the cuda decode kernels against the same reference ------------------
@needs_cuda
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-4), (torch.bfloat16, 5e-2)], ids=["f32", "bf16"])
def test_cuda_matches_reference(paged, dtype, tol):
    host = problem(page=16 if paged else 0, L_new=2, Lq=2, dtype=dtype)
    q, kc, vc, bt, k, v, seqlens = (None if t is None else t.cuda() for t in host)
    for splits in (0, 1, 3):
        kcs, vcs = kc.clone(), vc.clone()
        out, lse = ft.flash_attn_with_kvcache(q, kcs, vcs, k, v, cache_seqlens=seqlens, block_table=bt, causal=True,
                                             num_splits=splits, return_softmax_lse=True, backend="cuda")  # fmt: skip
        assert flashattn.last_backend() == "cuda"
        r_out, r_lse, r_kc, r_vc = reference(host[0], host[1], host[2], host[6], host[4], host[5], host[3],
                                             causal=True)  # fmt: skip
        close(out.cpu(), r_out, tol, f"out splits {splits}")
        close(lse.cpu(), r_lse, 1e-4, f"lse splits {splits}")
        assert torch.equal(kcs.cpu(), r_kc) and torch.equal(vcs.cpu(), r_vc), "cache after the append"


@needs_cuda
def test_cuda_merge_states():
    o = [randn((1, 2, 3, 8)).cuda(), randn((1, 2, 3, 8)).cuda()]
    lse = [randn((1, 2, 3)).cuda(), randn((1, 2, 3)).cuda()]
    got_o, got_l = ft.merge_states(o, lse)
    want_o, want_l = ft.merge_states([x.cpu() for x in o], [x.cpu() for x in lse])
    close(got_o.cpu(), want_o, 1e-5, "o")
    close(got_l.cpu(), want_l, 1e-5, "lse")


@needs_cuda
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the refused capture below holds nothing
@pytest.mark.parametrize("page", [0, 16], ids=["contiguous", "paged16"])
def test_cuda_graph_decode_steps(page):
    """A decode step (append one token, attend) captured once with torch.cuda.graph and replayed as
    a server does, q / k / v / cache_seqlens changed in place between replays: each replay gives the
    bits of an eager call on the same inputs (its own copy of the cache), the appends included. A
    checked call (device_checks=True, the default) reads cache_seqlens back: inside a capture it
    raises, naming the switch, and leaves the capture valid."""
    q, kc, vc, bt, k, v, seqlens = (None if t is None else t.cuda() for t in problem(B=2, Hq=8, Hkv=2, D=64, Dv=64,
                                                                                    cap=256, page=page,
                                                                                    seqlens=(40, 170),
                                                                                    dtype=torch.bfloat16))  # fmt: skip
    kc_e, vc_e = kc.clone(), vc.clone()
    kw = dict(cache_seqlens=seqlens, block_table=bt, causal=True, return_softmax_lse=True, device_checks=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch's advice: warm up off the capture
        ft.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, **kw)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out_g, lse_g = ft.flash_attn_with_kvcache(q, kc, vc, k, v, **kw)
    gen = torch.Generator().manual_seed(11)
    for step in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn(t.shape, generator=gen).to(t.dtype))
        g.replay()
        out_e, lse_e = ft.flash_attn_with_kvcache(q, kc_e, vc_e, k, v, **kw)
        assert torch.equal(out_g, out_e) and torch.equal(lse_g, lse_e), f"step {step}"
        seqlens.add_(1 + step)
    assert torch.equal(kc, kc_e) and torch.equal(vc, vc_e)
    g2 = torch.cuda.CUDAGraph()
    with pytest.raises(NotImplementedError, match="device_checks"):
        with torch.cuda.graph(g2):
            ft.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=bt)
    torch.cuda.synchronize()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("page", [0, 16], ids=["contiguous", "paged16"])
def test_device_checks_off_same_result(device, page):
    """device_checks=False (no read-back of cache_seqlens / block_table on cuda) gives the checked
    call's bits with good values; on CPU tensors the switch changes nothing: a bad length still raises."""
    host = problem(page=page, cap=48)
    q, kc, vc, bt, k, v, seqlens = (None if t is None else t.to(device) for t in host)
    kc2, vc2 = kc.clone(), vc.clone()
    kw = dict(cache_seqlens=seqlens, block_table=bt, causal=True, num_splits=3)
    want = ft.flash_attn_with_kvcache(q, kc, vc, k, v, **kw)
    got = ft.flash_attn_with_kvcache(q, kc2, vc2, k, v, device_checks=False, **kw)
    assert torch.equal(got, want) and torch.equal(kc2, kc) and torch.equal(vc2, vc)
    if device == "cpu":
        with pytest.raises(ValueError, match="cache_seqlens"):
            ft.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens + 10**6, block_table=bt, device_checks=False)


# ---- the hot path (_fast_kvcache.py) ------------------------------------------------------------
HOT = {  # problem() arguments, call keywords
    "decode_gqa": (dict(Hq=8, Hkv=2), dict(causal=True)),
    "paged_append": (dict(page=16, cap=48), dict(causal=True, num_splits=3)),
    "chunk_window_softcap": (dict(Lq=3, L_new=3), dict(causal=True, window_size=(6, 0), softcap=4.0)),
    "no_append_scale_lse": (dict(L_new=0), dict(softmax_scale=0.3, return_softmax_lse=True)),
    "extra_cache_rows": (dict(B=2), dict(causal=True, extra_rows=3)),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("case", list(HOT))
def test_hot_path_equals_general_path(case, device, monkeypatch):
    """A decode step with tensor lengths and no rotary / ALiBi / cache_batch_idx takes the hot path
    (one packed C call, planned per signature); it gives the general path's bits, lse and cache
    writes, and it is really taken (then again from its plan)."""
    from flashattn.torch import _fast_kvcache

    pkw, kw = HOT[case]
    kw = dict(kw)
    extra = kw.pop("extra_rows", 0)
    q, kc, vc, bt, k, v, seqlens = (None if t is None else t.to(device) for t in problem(**pkw))
    if extra:  # a contiguous cache with more rows than sequences: sequence b uses row b
        kc = torch.cat([kc, torch.zeros_like(kc[:1]).expand(extra, -1, -1, -1)])
        vc = torch.cat([vc, torch.zeros_like(vc[:1]).expand(extra, -1, -1, -1)])
    kc2, vc2 = kc.clone(), vc.clone()
    taken = []
    real = _fast_kvcache.flash_attn_with_kvcache
    monkeypatch.setattr(_fast_kvcache, "flash_attn_with_kvcache", lambda *a: taken.append(real(*a)) or taken[-1])
    hot = [ft.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=bt, **kw) for _ in range(2)]
    assert len(taken) == 2 and all(r is not None for r in taken), "the hot path was not taken"
    monkeypatch.setattr(_fast_kvcache, "flash_attn_with_kvcache", lambda *a: None)  # the general path only
    general = [ft.flash_attn_with_kvcache(q, kc2, vc2, k, v, cache_seqlens=seqlens, block_table=bt, **kw)
               for _ in range(2)]  # fmt: skip
    for h, g in zip(hot, general):
        h, g = (h, g) if isinstance(h, tuple) else ((h,), (g,))
        for a, b in zip(h, g):
            assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            assert torch.equal(a, b)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


def test_hot_path_declines_what_it_does_not_take(monkeypatch):
    """Lengths as an int or int64, a block table in int64, rotary tables, k without v: not the hot
    path's; they go the general way, which converts or raises as before."""
    from flashattn.torch import _fast_kvcache

    q, kc, vc, bt, k, v, seqlens = problem(page=16, cap=48)
    declined = []
    real = _fast_kvcache.flash_attn_with_kvcache
    monkeypatch.setattr(_fast_kvcache, "flash_attn_with_kvcache", lambda *a: declined.append(real(*a)) or declined[-1])
    want = ft.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, cache_seqlens=seqlens, block_table=bt)
    for kw in (dict(cache_seqlens=seqlens.long(), block_table=bt), dict(cache_seqlens=seqlens, block_table=bt.long())):
        got = ft.flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, v, **kw)
        assert torch.equal(got, want)
    assert declined[0] is not None and declined[1] is None and declined[2] is None
    q2, kc2, vc2, _, k2, v2, _ = problem()
    ft.flash_attn_with_kvcache(q2, kc2, vc2, k2, v2, cache_seqlens=5)
    assert declined[3] is None
    with pytest.raises(ValueError, match="k and v go together"):
        ft.flash_attn_with_kvcache(q2, kc2, vc2, k2, None, cache_seqlens=torch.tensor([5, 5], dtype=torch.int32))
    assert declined[4] is None
    with pytest.raises(ValueError, match="cache_seqlens"):  # a bad value: C's error, through the hot path
        ft.flash_attn_with_kvcache(q2, kc2, vc2, cache_seqlens=torch.tensor([5, 10**6], dtype=torch.int32))

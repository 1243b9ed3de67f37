"""The numpy layer (flashattn.attention, attention_backward, dropout_keep,
backends, cpu_plan, ...) against a float64 numpy reference of its own
(reference.py), over a table of cases covering every option, on ref and cpu
in every dtype they take.

Shapes stay small (L <= 33, D <= 32, B*H <= 8): the whole file runs in
seconds. The C suite (tests/cases.c) holds the backends to ref; this file
holds the Python layer's mapping of names, layouts, views and options onto
the C call to the same meaning.
"""

import dataclasses
import math

import numpy as np
import pytest

import flashattn as fa
import reference
from conftest import TOL, as_view, assert_close, np_dtype, rounded, to64

# (backend asked for, dtype, backend expected to run)
COMBOS = [
    ("ref", "float64", "ref"),
    ("cpu", "float32", "cpu"),
    ("cpu", "float16", "cpu"),
    ("cpu", "bfloat16", "cpu"),
    ("auto", "float32", "cpu"),
    ("auto", "float64", "ref"),
]
COMBO_IDS = [f"{b}-{d}" for b, d, _ in COMBOS]


@dataclasses.dataclass
class Case:
    name: str
    B: int = 2
    Hq: int = 2
    Hkv: int = 2
    Lq: int = 17
    Lk: int = 17
    D: int = 16
    Dv: int = 16
    causal: bool = False
    align: str = "top_left"
    window: tuple = None
    scale: float = None
    softcap: float = 0.0
    alibi: bool = False
    # bias / mask: the numpy shape as letters over the logical [B, Hq, Lq, Lk]
    # ("BHQK", "1HQK", "QK", "H1K", "K", ...); fewer than 4 letters = fewer dims
    bias: str = None
    bias_view: str = "contig"  # or "bcast0": np.broadcast_to the full shape (stride 0)
    bias_dtype: str = None  # None: q's dtype
    mask: str = None
    mask_view: str = "contig"
    mask_keep: float = 0.7
    mask_dead_rows: bool = False
    seqlens_q: tuple = None
    seqlens_k: tuple = None
    cu_q: tuple = None  # packed layout: B = number of sequences, Lq/Lk ignored
    cu_k: tuple = None
    cu_spare: tuple = (0, 0)  # rows of q, k past the last packed sequence
    dropout: tuple = None  # (p, seed, offset)
    layout: str = "bhsd"
    view: str = "contig"  # q, k, v, do, o, lse: conftest.as_view
    mag: float = 1.0


S = dict(B=2, Hq=2, Hkv=2)
CASES = [
    # shapes
    Case("basic"),
    Case("L1", B=1, Hq=1, Hkv=1, Lq=1, Lk=1, D=8, Dv=8),
    Case("Lq7_Lk33", Lq=7, Lk=33),
    Case("Lq33_Lk9_gqa", B=1, Hq=2, Hkv=1, Lq=33, Lk=9, D=8, Dv=8),
    Case("D24_Dv32", Lq=17, Lk=33, D=24, Dv=32),
    Case("D7_Dv5", Lq=17, Lk=7, D=7, Dv=5),
    Case("D1", Lq=9, Lk=9, D=1, Dv=1),
    Case("gqa", B=2, Hq=4, Hkv=2, Lq=17, Lk=33),
    Case("mqa_causal_Dv8", B=1, Hq=6, Hkv=1, Lq=33, Lk=33, Dv=8, causal=True),
    Case("scale_custom", scale=0.3),
    Case("large_scores", Lq=17, Lk=33, mag=30.0),
    # causal, both alignments, Lq != Lk both ways
    Case("causal_square", Lq=33, Lk=33, causal=True),
    Case("causal_tl_q_gt_k", Lq=33, Lk=17, causal=True),
    Case("causal_tl_q_lt_k", Lq=17, Lk=33, causal=True),
    Case("causal_br_q_gt_k_dead_rows", Lq=33, Lk=17, causal=True, align="bottom_right"),
    Case("causal_br_decode_Lq1", Lq=1, Lk=33, causal=True, align="bottom_right"),
    # windows
    Case("window_left", Lq=33, Lk=33, window=(5, -1)),
    Case("window_right", Lq=33, Lk=33, window=(-1, 3)),
    Case("window_both_br", Lq=17, Lk=33, window=(4, 2), align="bottom_right"),
    Case("window_causal", Lq=33, Lk=33, causal=True, window=(6, -1)),
    Case("window_diagonal_only", window=(0, 0)),
    Case("window_br_dead_rows", Lq=20, Lk=7, D=8, Dv=8, window=(1, 1), align="bottom_right"),
    # score transforms
    Case("softcap", Lq=33, Lk=33, softcap=5.0, mag=2.0),
    Case("alibi", B=2, Hq=4, Hkv=4, Lq=33, Lk=33, alibi=True),
    Case("alibi_causal_br_gqa", B=1, Hq=4, Hkv=2, Lq=17, Lk=33, alibi=True, causal=True, align="bottom_right"),
    Case("softcap_alibi_bias", B=1, Hq=4, Hkv=2, Lq=17, Lk=33, softcap=3.0, mag=1.5, alibi=True, bias="BHQK"),
    # bias and its gradient, broadcast shapes
    Case("bias_full", Lq=17, Lk=33, bias="BHQK"),
    Case("bias_1HQK", B=2, Hq=2, Hkv=1, bias="1HQK"),
    Case("bias_B11K", Lq=17, Lk=33, bias="B11K"),
    Case("bias_2d_QK_causal", Lq=33, Lk=17, bias="QK", causal=True),
    Case("bias_3d_H1K", Hq=4, Hkv=2, bias="H1K"),
    Case("bias_1d_K", bias="K"),
    Case("bias_stride0_view", Hq=4, Hkv=1, bias="11QK", bias_view="bcast0"),
    Case("bias_f32_any_dtype", bias="BHQK", bias_dtype="float32"),
    Case("bias_stepped_view", Lq=17, Lk=33, bias="BHQK", bias_view="stepped"),
    # boolean masks
    Case("mask_full_dead_rows", Lq=17, Lk=33, mask="BHQK", mask_dead_rows=True),
    Case("mask_bcast_heads", Hq=4, Hkv=2, mask="B1QK"),
    Case("mask_key_padding_1d", Lq=17, Lk=33, mask="K"),
    Case("mask_2d_causal_window", Lq=33, Lk=33, mask="QK", mask_keep=0.5, causal=True, window=(8, -1)),
    Case("mask_stride0_view_dead_rows", Lq=17, Lk=33, mask="11QK", mask_view="bcast0", mask_dead_rows=True),
    Case("mask_all_false", Lq=7, Lk=17, D=8, Dv=8, mask="BHQK", mask_keep=0.0),
    Case("mask_reversed_view", Lq=17, Lk=17, mask="BHQK", mask_view="reversed"),
    # padding
    Case("seqlens_q_zero_len", B=3, Hq=2, Hkv=2, seqlens_q=(17, 5, 0)),
    Case("seqlens_k_zero_len", B=3, Hq=2, Hkv=2, seqlens_k=(9, 0, 17)),
    Case(
        "seqlens_both_causal_br",
        B=3,
        Hq=2,
        Hkv=1,
        seqlens_q=(3, 17, 1),
        seqlens_k=(17, 4, 9),
        causal=True,
        align="bottom_right",
    ),
    Case("seqlens_k_zero_bias", seqlens_k=(0, 5), Lq=7, Lk=7, D=8, Dv=8, bias="BHQK"),
    # packed variable length
    Case("varlen_zero_len", B=4, cu_q=(0, 5, 5, 22, 23), cu_k=(0, 7, 19, 19, 31)),
    Case(
        "varlen_causal_br_gqa_bshd",
        B=3,
        Hq=2,
        Hkv=1,
        cu_q=(0, 9, 10, 25),
        cu_k=(0, 7, 20, 33),
        causal=True,
        align="bottom_right",
        layout="bshd",
    ),
    Case(
        "varlen_mask_bias_dropout",
        B=3,
        Hq=2,
        Hkv=1,
        D=8,
        cu_q=(0, 9, 10, 25),
        cu_k=(0, 7, 20, 33),
        mask="B1QK",
        bias="BHQK",
        dropout=(0.2, 99, 0),
    ),
    Case(
        "varlen_window_stepped",
        B=2,
        D=8,
        Dv=8,
        cu_q=(0, 17, 18),
        cu_k=(0, 1, 26),
        window=(9, 0),
        view="stepped",
    ),
    Case(
        "varlen_rows_past_last_sequence",
        B=2,
        Hq=2,
        Hkv=1,
        cu_q=(0, 6, 13),
        cu_k=(0, 9, 20),
        cu_spare=(4, 5),
        bias="BHQK",
        dropout=(0.1, 3, 0),
        layout="bshd",
    ),
    # dropout
    Case("dropout", Lq=33, Lk=33, dropout=(0.1, 1234, 0)),
    Case("dropout_heavy_causal_gqa", B=2, Hq=4, Hkv=2, Lq=17, Lk=33, causal=True, dropout=(0.6, 42, 0)),
    Case("dropout_seed64_offset", Lq=7, Lk=33, D=8, Dv=8, dropout=(0.3, 0x0123456789ABCDEF, 7)),
    # layouts and views (no copies: test_views_are_not_copied)
    Case("layout_bshd_gqa", Hq=4, Hkv=2, Lq=17, Lk=33, layout="bshd"),
    Case("layout_bshd_causal_br", Lq=33, Lk=17, D=8, Dv=8, causal=True, align="bottom_right", layout="bshd"),
    Case("view_transposed", Lq=17, Lk=33, view="transposed"),
    Case("view_stepped_Dv8", Lq=17, Lk=33, Dv=8, view="stepped", causal=True),
    Case("view_reversed", Hq=4, Hkv=2, view="reversed"),
    Case("view_stepped_bshd", layout="bshd", view="stepped", Hq=4, Hkv=1),
    # everything at once
    Case(
        "everything",
        B=2,
        Hq=4,
        Hkv=2,
        Lq=17,
        Lk=33,
        D=16,
        Dv=24,
        layout="bshd",
        view="stepped",
        seqlens_q=(17, 9),
        seqlens_k=(7, 33),
        causal=True,
        align="bottom_right",
        window=(20, -1),
        mask="B1QK",
        bias="1HQK",
        alibi=True,
        softcap=4.0,
        dropout=(0.25, 7, 3),
    ),
    Case(
        "everything_varlen",
        B=3,
        Hq=2,
        Hkv=1,
        D=8,
        Dv=16,
        cu_q=(0, 9, 10, 25),
        cu_k=(0, 7, 20, 33),
        view="reversed",
        causal=True,
        mask="BHQK",
        mask_dead_rows=True,
        bias="1Q1",
        alibi=True,
        softcap=6.0,
        dropout=(0.15, 5, 0),
    ),
]


# ---- problems ----------------------------------------------------------------


class Problem:
    pass


def _user(x, case):
    """A logical [B, H, L, D] array in the case's layout and memory view."""
    if case.layout == "bshd":
        x = x.transpose(0, 2, 1, 3)
    return as_view(x, case.view)


def _bhsd(x, layout):
    return x.transpose(0, 2, 1, 3) if layout == "bshd" else x


def _pattern_shape(pattern, logical):
    dims = dict(zip("BHQK", logical))
    return tuple(1 if c == "1" else dims[c] for c in pattern)


def make_problem(case, dtype, rng):
    """Inputs for the library (rounded to dtype, in the case's layout and
    views) and the same values in float64 [B, H, L, D] for the reference."""
    P = Problem()
    if case.cu_q is not None:
        B, Lq, Lk = 1, case.cu_q[-1] + case.cu_spare[0], case.cu_k[-1] + case.cu_spare[1]
    else:
        B, Lq, Lk = case.B, case.Lq, case.Lk
    shapes = dict(
        q=(B, case.Hq, Lq, case.D),
        k=(B, case.Hkv, Lk, case.D),
        v=(B, case.Hkv, Lk, case.Dv),
        do=(B, case.Hq, Lq, case.Dv),
    )
    mags = dict(q=math.sqrt(case.mag), k=math.sqrt(case.mag), v=1.0, do=1.0)
    for n, shp in shapes.items():
        x = rounded(rng.standard_normal(shp) * mags[n], dtype)
        setattr(P, n + "64", to64(x))
        setattr(P, n, _user(x, case))

    opts, ref = {}, {}
    for n in ("causal", "align", "window", "scale", "softcap"):
        val = getattr(case, n)
        if val not in (None, False, 0.0) or n == "align":
            opts[n] = ref[n] = val
    if case.seqlens_q is not None:
        opts["seqlens_q"] = ref["seqlens_q"] = np.array(case.seqlens_q, np.int32)
    if case.seqlens_k is not None:
        opts["seqlens_k"] = ref["seqlens_k"] = np.array(case.seqlens_k, np.int32)
    if case.cu_q is not None:
        opts["cu_seqlens_q"] = ref["cu_seqlens_q"] = np.array(case.cu_q, np.int32)
        opts["cu_seqlens_k"] = ref["cu_seqlens_k"] = np.array(case.cu_k, np.int32)
    logical = reference.logical_batch(
        P.q64, P.k64, **{n: ref.get(n) for n in ("seqlens_q", "seqlens_k", "cu_seqlens_q", "cu_seqlens_k")}
    )
    P.logical = logical
    if case.alibi:
        slopes = (2.0 ** (-8.0 * (np.arange(case.Hq) + 1) / case.Hq)).astype(np.float32)
        opts["alibi_slopes"] = ref["alibi_slopes"] = slopes
    if case.bias is not None:
        bdt = np_dtype(case.bias_dtype) if case.bias_dtype else dtype
        b = rounded(rng.standard_normal(_pattern_shape(case.bias, logical)), bdt)
        ref["bias"] = to64(b)
        if case.bias_view == "bcast0":
            b = np.broadcast_to(b, logical)
            ref["bias"] = np.broadcast_to(ref["bias"], logical)
        else:
            b = as_view(b, case.bias_view)
        opts["bias"] = b
    if case.mask is not None:
        shp = _pattern_shape(case.mask, logical)
        m = rng.random(shp) < case.mask_keep
        if case.mask_dead_rows:
            assert case.mask[-2] == "Q"
            m[..., rng.choice(shp[-2], size=min(3, shp[-2]), replace=False), :] = False
        if case.mask_view == "bcast0":
            m = np.broadcast_to(m, logical)
        else:
            m = as_view(m, case.mask_view)
        opts["mask"] = ref["mask"] = m
    if case.dropout is not None:
        p, seed, offset = case.dropout
        opts.update(dropout_p=p, dropout_seed=seed, dropout_offset=offset)
        ref["dropout_p"] = p
        ref["keep"] = fa.dropout_keep(logical, p, seed, offset)
    P.opts, P.ref = opts, ref
    return P


def _tolerances(dtname, lse):
    tol = TOL[dtname]
    # tests/README.md: the tiled backward recomputes P from an f32 lse
    fin = np.isfinite(lse)
    lmax = float(np.abs(lse[fin]).max()) if fin.any() else 0.0
    gtol = tol + (4 * lmax * 2.0**-24 if lse.dtype == np.float32 else 0.0)
    return tol, gtol


def _check_exact(name, got, ref_mask):
    """Where ref_mask: exactly 0 (rows that see nothing, keys no row sees)."""
    sel = got[np.broadcast_to(ref_mask, got.shape)]
    assert (sel == 0).all(), f"{name}: {np.count_nonzero(sel)} elements should be exactly 0"


# ---- forward and backward over the table ---------------------------------------


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward(case, combo, rng):
    backend, dtname, ran = combo
    dtype = np_dtype(dtname)
    P = make_problem(case, dtype, rng)
    before = [np.copy(x) for x in (P.q, P.k, P.v)]
    o, lse = fa.attention(P.q, P.k, P.v, layout=case.layout, backend=backend, **P.opts)
    assert fa.last_backend() == ran
    for x, b in zip((P.q, P.k, P.v), before):
        np.testing.assert_array_equal(x, b)  # inputs untouched
    assert o.dtype == dtype
    assert lse.dtype == (np.float64 if dtname == "float64" else np.float32)
    o = _bhsd(o, case.layout)
    assert o.shape == P.q64.shape[:3] + (case.Dv,)
    assert lse.shape == P.q64.shape[:3]

    R = reference.attention(P.q64, P.k64, P.v64, **P.ref)
    tol, _ = _tolerances(dtname, lse)
    dead = R["row_dead"]
    assert_close(o, R["o"], tol, "o")
    assert_close(lse, R["lse"], tol, "lse", ~dead)
    # rows that see nothing: o = 0 exactly, lse = -inf, never NaN
    _check_exact("o (dead rows)", o, dead[..., None])
    assert (lse[dead] == -np.inf).all(), "lse of a row that sees nothing must be -inf"


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backward(case, combo, rng):
    backend, dtname, ran = combo
    dtype = np_dtype(dtname)
    P = make_problem(case, dtype, rng)
    o, lse = fa.attention(P.q, P.k, P.v, layout=case.layout, backend=backend, **P.opts)
    # o, lse and do in the case's views too
    o_in = as_view(o, case.view)
    lse_in = as_view(lse, case.view)
    grads = fa.attention_backward(P.q, P.k, P.v, o_in, lse_in, P.do, layout=case.layout, backend=backend, **P.opts)
    assert fa.last_backend() == ran
    assert len(grads) == (4 if case.bias else 3)
    dq, dk, dv = (_bhsd(g, case.layout) for g in grads[:3])
    for g, x in zip(grads[:3], (P.q, P.k, P.v)):
        assert g.dtype == dtype and g.shape == x.shape

    R = reference.attention(P.q64, P.k64, P.v64, P.do64, **P.ref)
    _, gtol = _tolerances(dtname, lse)
    assert_close(dq, R["dq"], gtol, "dq")
    assert_close(dk, R["dk"], gtol, "dk")
    assert_close(dv, R["dv"], gtol, "dv")
    _check_exact("dq (dead rows)", dq, R["row_dead"][..., None])
    _check_exact("dk (unseen keys)", dk, ~R["key_seen"][..., None])
    _check_exact("dv (unseen keys)", dv, ~R["key_seen"][..., None])
    if case.bias:
        dbias = grads[3]
        bias = P.opts["bias"]
        assert dbias.shape == bias.shape and dbias.dtype == bias.dtype
        # dbias has the bias's dtype, which may be coarser than q's
        assert_close(dbias, R["dbias"], max(gtol, TOL[np.dtype(dbias.dtype).name]), "dbias")


# ---- the reference itself ---------------------------------------------------------


def test_reference_matches_textbook_softmax(rng):
    """With no options the reference is softmax(QK^T / sqrt(D)) V, written out."""
    q, k, v = (rng.standard_normal((2, 3, n, 5)) for n in (4, 6, 6))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(5)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    R = reference.attention(q, k, v)
    np.testing.assert_allclose(R["o"], p @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(R["lse"], np.log(np.exp(s).sum(-1)), rtol=1e-12)


def test_reference_backward_is_the_gradient(rng):
    """reference.attention's dq, dk, dv, dbias against central differences of
    its own forward, with softcap, ALiBi, bias (broadcast), mask, GQA, dropout."""
    B, Hq, Hkv, Lq, Lk, D, Dv = 1, 2, 1, 4, 5, 3, 2
    q, k, v = (
        rng.standard_normal((B, Hq, Lq, D)),
        rng.standard_normal((B, Hkv, Lk, D)),
        rng.standard_normal((B, Hkv, Lk, Dv)),
    )
    do = rng.standard_normal((B, Hq, Lq, Dv))
    bias = rng.standard_normal((Hq, 1, Lk))
    mask = rng.random((Lq, Lk)) < 0.8
    mask[1] = False  # a row that sees nothing
    opts = dict(
        softcap=2.0,
        alibi_slopes=np.array([0.5, 0.25]),
        mask=mask,
        causal=True,
        align="bottom_right",
        dropout_p=0.3,
        keep=fa.dropout_keep((B, Hq, Lq, Lk), 0.3, 11),
    )
    R = reference.attention(q, k, v, do, bias=bias, **opts)

    def loss(q, k, v, bias):
        return float(np.sum(reference.attention(q, k, v, bias=bias, **opts)["o"] * do))

    args = dict(q=q, k=k, v=v, bias=bias)
    h = 1e-6
    for name, x in args.items():
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            xp, xm = x.copy(), x.copy()
            xp[idx] += h
            xm[idx] -= h
            num[idx] = (loss(**{**args, name: xp}) - loss(**{**args, name: xm})) / (2 * h)
        want = R["d" + name]
        np.testing.assert_allclose(want, num, rtol=1e-5, atol=1e-7, err_msg=f"d{name}")


# ---- views are described to C, not copied --------------------------------------------


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("view", ["transposed", "stepped", "reversed"])
def test_views_are_not_copied(view, layout, monkeypatch, rng):
    """The fa_tensor handed to C points at the caller's view with its strides."""
    shapes = [(2, 2, 9, 8), (2, 2, 7, 8), (2, 2, 7, 4)]  # [B, H, L, D]
    if layout == "bshd":
        shapes = [(B, L, H, D) for B, H, L, D in shapes]
    q, k, v = (as_view(rng.standard_normal(s).astype(np.float32), view) for s in shapes)
    mask = np.broadcast_to(rng.random((9, 7)) < 0.8, (2, 2, 9, 7))
    bias = as_view(rng.standard_normal((2, 1, 9, 7)).astype(np.float32), view)
    seen = {}
    real = fa._capi.forward

    def spy(ctx, backend, tq, tk, tv, opt, to, tl):
        seen.update(q=tq, k=tk, v=tv, mask=opt.mask, bias=opt.bias)
        return real(ctx, backend, tq, tk, tv, opt, to, tl)

    monkeypatch.setattr(fa._capi, "forward", spy)
    o, lse = fa.attention(q, k, v, layout=layout, mask=mask, bias=bias, backend="cpu")
    perm = (0, 2, 1, 3) if layout == "bshd" else (0, 1, 2, 3)
    for name, a, p in (
        ("q", q, perm),
        ("k", k, perm),
        ("v", v, perm),
        ("mask", mask, None),
        ("bias", bias, None),
    ):
        t = seen[name]
        p = p or (0, 1, 2, 3)
        assert t.data == a.ctypes.data, f"{name} was copied"
        assert list(t.stride) == [a.strides[d] // a.itemsize for d in p], name
        assert list(t.shape) == [a.shape[d] for d in p], name
    assert not np.isnan(o).any()  # the NaN in the gaps of "stepped" buffers were never read


# ---- options that must change nothing, or nothing beyond rounding ----------------------


def _problem(rng, dtype=np.float32, B=2, Hq=4, Hkv=2, Lq=33, Lk=29, D=16, Dv=24):
    q = rng.standard_normal((B, Hq, Lq, D)).astype(dtype)
    k = rng.standard_normal((B, Hkv, Lk, D)).astype(dtype)
    v = rng.standard_normal((B, Hkv, Lk, Dv)).astype(dtype)
    do = rng.standard_normal((B, Hq, Lq, Dv)).astype(dtype)
    opts = dict(
        causal=True,
        align="bottom_right",
        window=(12, -1),
        bias=rng.standard_normal((1, Hq, Lq, Lk)).astype(dtype),
        dropout_p=0.2,
        dropout_seed=3,
        softcap=5.0,
        alibi_slopes=np.linspace(0.1, 0.4, Hq),
    )
    return q, k, v, do, opts


def _bits(arrays):
    return [np.asarray(a).tobytes() for a in arrays]


def test_deterministic_backward_same_bits_twice(rng):
    q, k, v, do, opts = _problem(rng)
    o, lse = fa.attention(q, k, v, backend="cpu", **opts)
    first = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", deterministic=True, **opts)
    again = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", deterministic=True, **opts)
    assert _bits(first) == _bits(again)


def test_deterministic_backward_same_bits_any_thread_count(rng):
    q, k, v, do, opts = _problem(rng)
    o, lse = fa.attention(q, k, v, backend="cpu", **opts)
    one = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", deterministic=True, threads=1, **opts)
    two = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", deterministic=True, threads=2, **opts)
    assert _bits(one) == _bits(two)


def _ref_of(q, k, v, do, opts):
    ropts = {n: x for n, x in opts.items() if not n.startswith("dropout_")}
    keep = fa.dropout_keep(
        (q.shape[0], q.shape[1], q.shape[2], k.shape[2]),
        opts["dropout_p"],
        opts["dropout_seed"],
        opts.get("dropout_offset", 0),
    )
    return reference.attention(to64(q), to64(k), to64(v), to64(do), dropout_p=opts["dropout_p"], keep=keep, **ropts)


@pytest.mark.parametrize("blocks", [(0, 0), (1, 1), (3, 5), (16, 32), (256, 512)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_block_sizes_change_nothing_beyond_rounding(blocks, rng):
    q, k, v, do, opts = _problem(np.random.default_rng(5))
    block_q, block_k = blocks
    o, lse = fa.attention(q, k, v, backend="cpu", block_q=block_q, block_k=block_k, **opts)
    dq, dk, dv, db = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", block_q=block_q, block_k=block_k, **opts)
    R = _ref_of(q, k, v, do, opts)
    tol = TOL["float32"]
    for name, got in dict(o=o, dq=dq, dk=dk, dv=dv, dbias=db).items():
        assert_close(got, R[name], tol, name)
    # and against the default tiling
    o0, _ = fa.attention(q, k, v, backend="cpu", **opts)
    assert_close(o, o0, tol, "o vs default blocks")


@pytest.mark.parametrize("isa", fa.cpu_isas())
def test_every_cpu_isa(isa, rng):
    q, k, v, do, opts = _problem(rng)
    o, lse = fa.attention(q, k, v, backend="cpu", isa=isa, **opts)
    assert fa.last_backend() == "cpu"
    grads = fa.attention_backward(q, k, v, o, lse, do, backend="cpu", isa=isa, **opts)
    R = _ref_of(q, k, v, do, opts)
    for name, got in zip(("o", "dq", "dk", "dv", "dbias"), (o,) + grads):
        assert_close(got, R[name], TOL["float32"], f"{name} ({isa})")
    assert fa.cpu_plan(16, 24, isa=isa).isa == isa
    # the thread's context goes back to the default ISA on the next call
    o2, _ = fa.attention(q, k, v, backend="cpu", **opts)
    assert_close(o2, R["o"], TOL["float32"], "o (isa auto after isa=...)")


def test_isa_this_cpu_lacks_is_refused(rng):
    missing = [n for n in ("generic", "avx2", "avx512", "avx512bf16", "amx") if n not in fa.cpu_isas()]
    if not missing:
        pytest.skip("this CPU has every ISA the cpu backend knows")
    q, k, v, _, _ = _problem(rng)
    with pytest.raises(fa.FlashAttnError):
        fa.attention(q, k, v, backend="cpu", isa=missing[0])


# ---- dropout_keep ----------------------------------------------------------------


def test_dropout_keep_shape_and_dtype():
    keep = fa.dropout_keep((2, 3, 5, 7), 0.3, seed=1, offset=2)
    assert keep.shape == (2, 3, 5, 7) and keep.dtype == np.bool_
    assert fa.dropout_keep((1, 1, 4, 4), 0.0).all()  # p = 0 drops nothing


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9])
def test_dropout_keep_fraction(p):
    keep = fa.dropout_keep((2, 4, 64, 64), p, seed=123)
    n = keep.size
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(keep.mean() - (1 - p)) < 6 * sigma
    # no structure along any axis: every row and column keeps about 1-p too
    assert abs(keep.mean(axis=(0, 1, 2)) - (1 - p)).max() < 6 * math.sqrt(p * (1 - p) / 512)


def test_dropout_keep_is_a_function_of_seed_offset_and_position():
    a = fa.dropout_keep((2, 3, 9, 11), 0.5, seed=7, offset=1)
    np.testing.assert_array_equal(a, fa.dropout_keep((2, 3, 9, 11), 0.5, seed=7, offset=1))
    # element (b, h, i, j) does not depend on Lq, Lk (only on the head count)
    np.testing.assert_array_equal(a[:, :, :4, :5], fa.dropout_keep((2, 3, 4, 5), 0.5, seed=7, offset=1))
    np.testing.assert_array_equal(a[:1], fa.dropout_keep((1, 3, 9, 11), 0.5, seed=7, offset=1))
    for other in (dict(seed=8, offset=1), dict(seed=7, offset=2), dict(seed=7 + 2**32, offset=1)):
        assert (a != fa.dropout_keep((2, 3, 9, 11), 0.5, **other)).mean() > 0.3, other
    # heads and batches get different masks
    assert (a[0, 0] != a[0, 1]).any() and (a[0, 0] != a[1, 0]).any()
    # a larger p drops a superset (one threshold compare of the same random word)
    b = fa.dropout_keep((2, 3, 9, 11), 0.7, seed=7, offset=1)
    assert not (b & ~a).any()


@pytest.mark.parametrize("backend,dtype", [("ref", np.float64), ("cpu", np.float32)])
def test_dropout_keep_is_the_mask_attention_uses(backend, dtype, rng):
    """With V = identity, o[i, j] = P[i, j] * keep[i, j] / (1 - p): the kept
    elements are exactly the non-zero ones, and each is P / (1 - p)."""
    B, Hq, Hkv, Lq, Lk = 2, 4, 1, 9, 16
    p, seed, offset = 0.4, 2024, 5
    q = rng.standard_normal((B, Hq, Lq, 8)).astype(dtype) * 0.5
    k = rng.standard_normal((B, Hkv, Lk, 8)).astype(dtype) * 0.5
    v = np.broadcast_to(np.eye(Lk, dtype=dtype), (B, Hkv, Lk, Lk))
    o, _ = fa.attention(q, k, v, backend=backend, dropout_p=p, dropout_seed=seed, dropout_offset=offset)
    P, _ = fa.attention(q, k, v, backend=backend)
    keep = fa.dropout_keep((B, Hq, Lq, Lk), p, seed, offset)
    np.testing.assert_array_equal(o != 0, keep)
    np.testing.assert_allclose(o, np.where(keep, P / (1 - p), 0), rtol=10 * TOL[np.dtype(dtype).name], atol=0)


@pytest.mark.parametrize("backend,dtype", [("ref", np.float64), ("cpu", np.float32)])
def test_positions_are_a_block_of_the_whole_sequence(backend, dtype, rng):
    """q_offset / k_offset (fa_options'): a call over rows [qo, qo + Lq) and keys
    [ko, ko + Lk) of a longer sequence. Its dropout keep bits are the block
    [qo:, ko:] of the whole sequence's mask (dropout_keep), and causal + ALiBi
    act on positions: the same as offsets 0 with that block's ALiBi and causal
    mask given as a bias. Forward and backward (options pass through both)."""
    B, H, Lq, Lk, D, qo, ko = 1, 2, 7, 13, 8, 21, 10
    q, k, v, do = (rng.standard_normal((B, H, n, D)).astype(dtype) for n in (Lq, Lk, Lk, Lq))
    p, seed = 0.3, 99
    V = np.broadcast_to(np.eye(Lk, dtype=dtype), (B, H, Lk, Lk))
    o, _ = fa.attention(q, k, V, backend=backend, dropout_p=p, dropout_seed=seed, q_offset=qo, k_offset=ko)
    whole = fa.dropout_keep((B, H, qo + Lq, ko + Lk), p, seed)
    np.testing.assert_array_equal(o != 0, whole[:, :, qo:, ko:])
    slopes = np.array([0.25, 0.5], np.float32)
    pi, pj = np.arange(Lq)[:, None] + qo, np.arange(Lk)[None, :] + ko
    bias = np.where(pj <= pi, -slopes[:, None, None] * np.abs(pi - pj), -np.inf)[None].astype(dtype)
    kw = dict(backend=backend, causal=True, alibi_slopes=slopes, q_offset=qo, k_offset=ko)
    got = fa.attention(q, k, v, **kw)
    want = fa.attention(q, k, v, backend=backend, bias=bias)
    assert np.isinf(bias).any() and np.isfinite(bias).any()
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=10 * TOL[np.dtype(dtype).name], atol=10 * TOL[np.dtype(dtype).name])
    dgot = fa.attention_backward(q, k, v, got[0], got[1], do, **kw)
    dwant = fa.attention_backward(q, k, v, want[0], want[1], do, backend=backend, bias=bias)
    for x, y in zip(dgot[:3], dwant[:3]):
        np.testing.assert_allclose(x, y, rtol=10 * TOL[np.dtype(dtype).name], atol=10 * TOL[np.dtype(dtype).name])
    with pytest.raises(fa.FlashAttnValueError, match="q_offset"):
        fa.attention(q, k, v, backend=backend, q_offset=-1)
    with pytest.raises(fa.FlashAttnValueError, match="k_offset"):
        fa.attention(q, k, v, backend=backend, k_offset=2**61)


def test_dropout_keep_bad_arguments():
    for call, word in (
        (lambda: fa.dropout_keep((1, 1, 2, 2), 1.0), "p"),
        (lambda: fa.dropout_keep((1, 1, 2, 2), -0.1), "p"),
        (lambda: fa.dropout_keep((1, 1, 2), 0.1), "shape"),
        (lambda: fa.dropout_keep((1, 0, 2, 2), 0.1), "H"),
        (lambda: fa.dropout_keep((1, 1, 2, 2), 0.1, seed=-1), "seed"),
        (lambda: fa.dropout_keep((1, 1, 2, 2), 0.1, offset=2**32), "offset"),
    ):
        with pytest.raises(fa.FlashAttnValueError, match=word):
            call()


# ---- what is here: backends, ISAs, plans, dispatch -------------------------------------


def test_backends():
    bs = fa.backends()
    assert set(bs) == {"ref", "cpu", "cuda"}
    for name, b in bs.items():
        assert b.name == name and isinstance(b.available, bool) and isinstance(b.reason, str)
        if not b.available:
            assert b.reason, f"{name} is unavailable without a reason"
    assert bs["ref"].available and bs["cpu"].available


def test_cpu_isas():
    isas = fa.cpu_isas()
    order = ["amx", "avx512bf16", "avx512", "avx2", "generic"]
    assert isas and set(isas) <= set(order)
    assert isas[-1] == "generic"  # best first; the portable path is always there
    assert isas == sorted(isas, key=order.index)


def test_cpu_plan():
    plan = fa.cpu_plan(64)
    isas = fa.cpu_isas()
    # auto takes avx512bf16 only where its bf16 products measure faster than f32's FMAs
    assert plan.isa == isas[0] or (isas[0] == "avx512bf16" and plan.isa == "avx512")
    assert plan.block_q > 0 and plan.block_k > 0
    assert plan.working_set_bytes > 0 and plan.l1d_bytes > 0 and plan.l2_bytes > 0
    asked = fa.cpu_plan(64, 32, block_q=16, block_k=32)
    assert (asked.block_q, asked.block_k) == (16, 32)
    # per dtype: the same tiles; bf16 on avx512bf16 keeps a smaller working set (bf16 tiles and pairs)
    for isa in fa.cpu_isas():
        f32, bf16 = fa.cpu_plan(128, isa=isa), fa.cpu_plan(128, isa=isa, dtype="bfloat16")
        assert (bf16.isa, bf16.block_q, bf16.block_k) == (f32.isa, f32.block_q, f32.block_k)
        if isa in ("avx512bf16", "amx"):
            assert bf16.working_set_bytes < f32.working_set_bytes
        else:
            assert bf16.working_set_bytes == f32.working_set_bytes
    with pytest.raises(TypeError, match="dtype"):
        fa.cpu_plan(64, dtype="int8")
    with pytest.raises(fa.FlashAttnValueError, match="isa"):
        fa.cpu_plan(64, isa="sse9")
    with pytest.raises(fa.FlashAttnValueError, match="D"):
        fa.cpu_plan(0)


def test_last_backend_and_dispatch_report(rng):
    q, k, v = (rng.standard_normal((1, 2, 5, 8)) for _ in range(3))
    fa.attention(q, k, v)
    assert fa.last_backend() == "ref"  # float64: only ref takes it
    report = fa.dispatch_report()
    assert "ref: chosen" in report and "cpu: passed over" in report
    fa.attention(*(x.astype(np.float32) for x in (q, k, v)))
    assert fa.last_backend() == "cpu"
    fa.attention(q, k, v, backend="ref")
    assert fa.last_backend() == "ref" and "ref" in fa.dispatch_report()


def test_threads_have_their_own_context(rng):
    """One C context per Python thread: calls on two threads at once (ctypes
    drops the GIL) give the serial results, and last_backend() is per thread."""
    import concurrent.futures

    q, k, v, _, opts = _problem(rng)
    work = {"ref": [x.astype(np.float64) for x in (q, k, v)], "cpu": [q, k, v]}
    serial = {b: fa.attention(*a, backend=b, threads=1, **opts)[0] for b, a in work.items()}

    def run(backend):
        for _ in range(5):
            o, _ = fa.attention(*work[backend], backend=backend, threads=1, **opts)
            if fa.last_backend() != backend or not np.array_equal(o, serial[backend]):
                return False
        return True

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        assert all(pool.map(run, ["ref", "cpu", "ref", "cpu"]))


def test_library_path():
    assert "flashattn" in fa.library_path()


# ---- rows with nothing visible --------------------------------------------------------


@pytest.mark.parametrize("backend,dtype", [("ref", np.float64), ("cpu", np.float32), ("cpu", np.float16)])
def test_fully_masked_rows(backend, dtype, rng):
    """o = 0 exactly, lse = -inf, every gradient through the row 0, no NaN:
    rows masked out by the mask, past seqlens_q, with seqlens_k = 0, and
    above a bottom-right causal diagonal."""
    B, H, Lq, Lk, D = 3, 2, 9, 6, 8
    q, k, v, do = (
        rng.standard_normal(s).astype(dtype) * 3 for s in ((B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D), (B, H, Lq, D))
    )
    mask = np.ones((B, 1, Lq, Lk), bool)
    mask[0, :, 2] = False
    opts = dict(mask=mask, seqlens_q=[9, 5, 9], seqlens_k=[6, 6, 0], causal=True, align="bottom_right")
    o, lse = fa.attention(q, k, v, backend=backend, **opts)
    dq, dk, dv = fa.attention_backward(q, k, v, o, lse, do, backend=backend, **opts)
    dead = np.zeros((B, H, Lq), bool)
    dead[0, :, 2] = True  # the mask
    dead[0, :, :3] = True  # bottom-right: row i sees j <= i + Lk - Lq = i - 3
    dead[1, :, :] = True  # seqlens_q 5 < Lk 6: row i sees j <= i + 1 - so live rows; rows >= 5 are padding
    dead[1, :, :5] = False
    dead[2] = True  # no keys
    for x in (o, lse, dq, dk, dv):
        assert not np.isnan(x).any()
    assert (o[dead] == 0).all() and (lse[dead] == -np.inf).all() and (dq[dead] == 0).all()
    assert np.isfinite(lse[~dead]).all()
    assert (dk[2] == 0).all() and (dv[2] == 0).all()


# ---- bad input ---------------------------------------------------------------------


def _qkv(dtype=np.float32, B=1, Hq=2, Hkv=2, Lq=5, Lk=7, D=8, Dv=8):
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((B, Hq, Lq, D)).astype(dtype),
        rng.standard_normal((B, Hkv, Lk, D)).astype(dtype),
        rng.standard_normal((B, Hkv, Lk, Dv)).astype(dtype),
    )


def _bwd(**kw):
    q, k, v = _qkv(np.float32)
    o, lse = fa.attention(q, k, v)
    args = dict(q=q, k=k, v=v, o=o, lse=lse, do=o.copy())
    opts = {n: kw.pop(n) for n in list(kw) if n not in args}
    args.update(kw)
    return fa.attention_backward(**args, **opts)


def _fwd(dtype=np.float32, shapes=None, **opts):
    q, k, v = _qkv(dtype, **(shapes or {}))
    return fa.attention(q, k, v, **opts)


BAD = [
    # (id, call, exception, words the message must contain)
    ("dtype_mix", lambda: fa.attention(*_qkv()[:1], *_qkv(np.float16)[1:]), TypeError, "k"),
    ("dtype_mix_v", lambda: fa.attention(*_qkv()[:2], _qkv(np.float64)[2]), TypeError, "v"),
    ("dtype_int", lambda: fa.attention(_qkv()[0].astype(np.int32), *_qkv()[1:]), TypeError, "q"),
    ("f64_on_cpu", lambda: _fwd(np.float64, backend="cpu"), TypeError, "f64"),
    ("not_ndarray", lambda: fa.attention(_qkv()[0].tolist(), *_qkv()[1:]), TypeError, "q"),
    ("not_ndarray_v", lambda: fa.attention(*_qkv()[:2], 3.0), TypeError, "v"),
    ("ndim", lambda: fa.attention(_qkv()[0][0], *_qkv()[1:]), ValueError, "q"),
    ("shape_D", lambda: fa.attention(_qkv()[0], _qkv(D=4)[1], _qkv()[2]), ValueError, "k"),
    ("shape_Lk_v", lambda: fa.attention(*_qkv()[:2], _qkv(Lk=6)[2]), ValueError, "v"),
    ("shape_B", lambda: fa.attention(_qkv(B=2)[0], *_qkv()[1:]), ValueError, "k"),
    ("heads", lambda: fa.attention(_qkv(Hq=3)[0], *_qkv()[1:]), ValueError, "heads"),
    ("dropout_1", lambda: _fwd(dropout_p=1.0), ValueError, "dropout_p"),
    ("dropout_neg", lambda: _fwd(dropout_p=-0.5), ValueError, "dropout_p"),
    ("dropout_seed", lambda: _fwd(dropout_p=0.1, dropout_seed=2**64), ValueError, "dropout_seed"),
    ("dropout_offset", lambda: _fwd(dropout_p=0.1, dropout_offset=-1), ValueError, "dropout_offset"),
    ("layout", lambda: _fwd(layout="bhds"), ValueError, "layout"),
    ("align", lambda: _fwd(causal=True, align="top"), ValueError, "align"),
    ("backend", lambda: _fwd(backend="gpu"), ValueError, "backend"),
    ("isa", lambda: _fwd(isa="neon"), ValueError, "isa"),
    ("window_int", lambda: _fwd(window=3), ValueError, "window"),
    ("window_triple", lambda: _fwd(window=(1, 2, 3)), ValueError, "window"),
    ("seqlens_q_range", lambda: _fwd(seqlens_q=[6]), ValueError, "seqlens_q"),
    ("seqlens_k_negative", lambda: _fwd(seqlens_k=[-1]), ValueError, "seqlens_k"),
    ("seqlens_q_length", lambda: _fwd(seqlens_q=[5, 5]), ValueError, "seqlens_q"),
    ("cu_seqlens_range", lambda: _fwd(cu_seqlens_q=[0, 5], cu_seqlens_k=[0, 8]), ValueError, "cu_seqlens_k"),
    ("cu_seqlens_one", lambda: _fwd(cu_seqlens_q=[0, 5]), ValueError, "cu_seqlens_k"),
    (
        "cu_seqlens_counts",
        lambda: _fwd(cu_seqlens_q=[0, 2, 5], cu_seqlens_k=[0, 7]),
        ValueError,
        "cu_seqlens",
    ),
    (
        "cu_and_seqlens",
        lambda: _fwd(cu_seqlens_q=[0, 5], cu_seqlens_k=[0, 7], seqlens_q=[5]),
        ValueError,
        "seqlens",
    ),
    (
        "cu_decreasing",
        lambda: _fwd(cu_seqlens_q=[0, 4, 3], cu_seqlens_k=[0, 3, 7]),
        ValueError,
        "cu_seqlens_q",
    ),
    ("alibi_length", lambda: _fwd(alibi_slopes=[0.5]), ValueError, "alibi_slopes"),
    ("mask_dtype", lambda: _fwd(mask=np.ones((5, 7))), TypeError, "mask"),
    ("mask_shape", lambda: _fwd(mask=np.ones((5, 6), bool)), ValueError, "mask"),
    ("mask_5d", lambda: _fwd(mask=np.ones((1, 1, 1, 5, 7), bool)), ValueError, "mask"),
    ("mask_list", lambda: _fwd(mask=[[True] * 7] * 5), TypeError, "mask"),
    ("bias_shape", lambda: _fwd(bias=np.ones((3, 7), np.float32)), ValueError, "bias"),
    ("bias_dtype", lambda: _fwd(bias=np.ones((5, 7), np.int64)), TypeError, "bias"),
    ("softcap", lambda: _fwd(softcap=-1.0), ValueError, "softcap"),
    ("scale_nan", lambda: _fwd(scale=float("nan")), ValueError, "scale"),
    ("block_q", lambda: _fwd(backend="cpu", block_q=-1), ValueError, "block_q"),
    ("threads", lambda: _fwd(threads=-2), ValueError, "threads"),
    ("bwd_lse_shape", lambda: _bwd(lse=np.zeros((1, 2, 4), np.float32)), ValueError, "lse"),
    ("bwd_lse_ndim", lambda: _bwd(lse=np.zeros((1, 2, 5, 1), np.float32)), ValueError, "lse"),
    ("bwd_do_shape", lambda: _bwd(do=np.zeros((1, 1, 5, 8), np.float32)), ValueError, "do"),
    ("bwd_o_dtype", lambda: _bwd(o=np.zeros((1, 2, 5, 8), np.float16)), TypeError, "o"),
    ("bwd_not_ndarray", lambda: _bwd(do=None), TypeError, "do"),
]


@pytest.mark.parametrize("call,exc,word", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(call, exc, word):
    with pytest.raises(fa.FlashAttnError) as info:
        call()
    e = info.value
    assert isinstance(e, exc), f"{type(e).__name__} is not a {exc.__name__}: {e}"
    assert word in str(e), f"the message does not name {word!r}: {e}"
    assert e.status.startswith("FA_")


def test_bad_input_names_the_status_of_c():
    with pytest.raises(fa.FlashAttnValueError) as info:
        _fwd(dropout_p=1.0)
    assert info.value.status == "FA_ERR_DROPOUT"
    with pytest.raises(fa.FlashAttnTypeError) as info:
        _fwd(np.float64, backend="cpu")
    assert info.value.status == "FA_ERR_DTYPE"


def test_cuda_on_host_arrays():
    """backend="cuda" never falls back: without the cuda backend (or GPU) it is
    UnsupportedError; with one, numpy's host memory is refused as such."""
    with pytest.raises(fa.FlashAttnError) as info:
        _fwd(backend="cuda")
    if not fa.backends()["cuda"].available:
        assert isinstance(info.value, fa.UnsupportedError)
        assert "cuda" in str(info.value)
    else:
        assert info.value.status == "FA_ERR_MEMORY_SPACE"

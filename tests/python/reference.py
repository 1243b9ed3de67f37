"""A float64 numpy reference of attention, forward and backward, written
from DESIGN.md's formulas (not from the C code): the pytest suite's oracle
for the numpy layer.

Everything is [B, H, L, D] (the "bhsd" layout) and float64. One sequence at
a time, eager: S and P are materialized as the textbook writes them.

    s = scale * q_i . k_j
    s = softcap * tanh(s / softcap)            (softcap > 0)
    s += -alibi_slope[h] * |diag(i) - j|       (alibi_slopes)
    s += bias[b, h, i, j]                      (bias)
    visible(i, j) = i < Lq_b and j < Lk_b and window/causal band and mask[b, h, i, j]
    P = softmax over visible j (rows that see nothing: P = 0, o = 0, lse = -inf)
    o = (P * keep / (1 - p)) V

The dropout keep-mask is an input ([B, Hq, Lq, Lk] bool, e.g. from
flashattn.dropout_keep): the Philox rule itself is tested in C.
"""

import numpy as np


def _bcast4(a, logical):
    """mask / bias with numpy broadcasting to the logical [B, Hq, Lq, Lk]."""
    if a is None:
        return None
    a = np.asarray(a)
    return np.broadcast_to(a.reshape((1,) * (4 - a.ndim) + a.shape), logical)


def _band(Lq, Lk, causal, align, window):
    """visible(i, j) of the causal/window rule for one sequence of lengths Lq, Lk,
    and diag(i) (also the ALiBi distance's origin)."""
    i = np.arange(Lq)[:, None]
    j = np.arange(Lk)[None, :]
    diag = i + (Lk - Lq if align == "bottom_right" else 0)
    left, right = -1, -1
    if window is not None and (window[0] >= 0 or window[1] >= 0):
        left, right = window
    if causal:
        right = 0  # causal = window (left -1, right 0); with a window, the window's left edge stays
    vis = np.ones((Lq, Lk), bool)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis, diag, j


def _sequences(B, Lq, Lk, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k):
    """(b_logical, b_tensor, q rows, k rows) per sequence."""
    if cu_seqlens_q is not None:
        cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
        return [(b, 0, slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])) for b in range(len(cq) - 1)]
    sq = np.full(B, Lq) if seqlens_q is None else np.asarray(seqlens_q)
    sk = np.full(B, Lk) if seqlens_k is None else np.asarray(seqlens_k)
    return [(b, b, slice(0, sq[b]), slice(0, sk[b])) for b in range(B)]


def logical_batch(q, k, seqlens_q=None, seqlens_k=None, cu_seqlens_q=None, cu_seqlens_k=None):
    """The [B, Hq, Lq, Lk] that masks, biases and dropout index (the longest
    sequence's lengths in the packed layout)."""
    B, Hq, Lq, _ = q.shape
    Lk = k.shape[2]
    if cu_seqlens_q is not None:
        cq, ck = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
        return (len(cq) - 1, Hq, int(np.diff(cq).max()), int(np.diff(ck).max()))
    return (B, Hq, Lq, Lk)


def attention(
    q,
    k,
    v,
    do=None,
    *,
    scale=None,
    softcap=0.0,
    causal=False,
    align="top_left",
    window=None,
    alibi_slopes=None,
    bias=None,
    mask=None,
    seqlens_q=None,
    seqlens_k=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    dropout_p=0.0,
    keep=None,
):
    """Returns a dict: o, lse, row_dead [B, Hq, Lq] (rows with nothing
    visible: padding past seqlens_q, rows past the last packed sequence
    included), key_seen [B, Hkv, Lk]; with do also dq, dk, dv and dbias
    (bias's shape, summed where it broadcasts)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk, Dv = k.shape[1], k.shape[2], v.shape[3]
    assert Hq % Hkv == 0
    g = Hq // Hkv
    scale = 1.0 / np.sqrt(D) if not scale else float(scale)
    logical = logical_batch(q, k, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k)
    M = _bcast4(mask, logical)
    Bi = None if bias is None else _bcast4(np.asarray(bias, np.float64), logical)
    if dropout_p > 0:
        assert keep is not None and keep.shape == logical
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float64)

    o = np.zeros((B, Hq, Lq, Dv))
    lse = np.full((B, Hq, Lq), -np.inf)
    row_dead = np.ones((B, Hq, Lq), bool)  # rows in no sequence see nothing
    key_seen = np.zeros((B, Hkv, Lk), bool)
    grads = do is not None
    if grads:
        do = np.asarray(do, np.float64)
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        dS_all = np.zeros(logical)

    kv_of = np.arange(Hq) // g
    for b, bt, rq, rk in _sequences(B, Lq, Lk, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k):
        qb = q[bt, :, rq]  # [Hq, lq, D]
        kb = k[bt][kv_of][:, rk]  # [Hq, lk, D]
        vb = v[bt][kv_of][:, rk]
        lq, lk = qb.shape[1], kb.shape[1]
        if lq == 0:
            continue
        vis, diag, j = _band(lq, lk, causal, align, window)
        vis = np.broadcast_to(vis, (Hq, lq, lk)).copy()
        if M is not None:
            vis &= M[b, :, :lq, :lk].astype(bool)
        raw = scale * np.einsum("hid,hjd->hij", qb, kb)
        s = raw
        if softcap and softcap > 0:
            t = np.tanh(raw / softcap)
            s = softcap * t
        if slopes is not None:
            s = s - slopes[:, None, None] * np.abs(diag - j)[None]
        if Bi is not None:
            s = s + Bi[b, :, :lq, :lk]
        s = np.where(vis, s, -np.inf)
        dead = ~vis.any(axis=2)  # [Hq, lq]
        m = np.where(dead, 0.0, s.max(axis=2, initial=-np.inf))
        e = np.where(vis, np.exp(s - m[..., None]), 0.0)
        l = e.sum(axis=2)
        P = e / np.where(dead, 1.0, l)[..., None]
        lse_b = np.where(dead, -np.inf, m + np.log(np.where(dead, 1.0, l)))
        Z = np.ones_like(P)
        if dropout_p > 0:
            Z = keep[b, :, :lq, :lk] / (1.0 - dropout_p)
        Pd = P * Z
        ob = np.einsum("hij,hjd->hid", Pd, vb)
        o[bt, :, rq] = ob
        lse[bt, :, rq] = lse_b
        row_dead[bt, :, rq] = dead
        seen = vis.any(axis=1)  # [Hq, lk]
        for h in range(Hq):
            key_seen[bt, kv_of[h], rk] |= seen[h]

        if not grads:
            continue
        dob = do[bt, :, rq]
        dvb = np.einsum("hij,hid->hjd", Pd, dob)
        dP = np.einsum("hid,hjd->hij", dob, vb) * Z
        Di = np.einsum("hid,hid->hi", dob, ob)
        dS = P * (dP - Di[..., None])  # 0 where not visible (P = 0)
        dS_all[b, :, :lq, :lk] = dS
        dRaw = dS * (1.0 - t * t) if softcap and softcap > 0 else dS
        dq[bt, :, rq] = scale * np.einsum("hij,hjd->hid", dRaw, kb)
        dkb = scale * np.einsum("hij,hid->hjd", dRaw, qb)
        for h in range(Hq):  # GQA: a kv head's gradient sums over its group
            dk[bt, kv_of[h], rk] += dkb[h]
            dv[bt, kv_of[h], rk] += dvb[h]

    out = dict(o=o, lse=lse, row_dead=row_dead, key_seen=key_seen)
    if grads:
        out.update(dq=dq, dk=dk, dv=dv)
        if bias is not None:
            shape = np.shape(bias)
            s4 = (1,) * (4 - len(shape)) + tuple(shape)
            axes = tuple(d for d in range(4) if s4[d] == 1 and logical[d] != 1)
            out["dbias"] = dS_all.sum(axis=axes, keepdims=True).reshape(shape)
    return out

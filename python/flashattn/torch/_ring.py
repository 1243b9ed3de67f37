"""Context parallel (ring) attention over torch.distributed: the sequence is split
across the ranks of a process group, K/V blocks travel around the ring, and each
rank's partial results (o, lse) are combined with flashattn's online-softmax merge.

Layout. Every rank holds the same number L_local of query AND key/value rows of
the global sequence (q [B, L_local, Hq, D], k / v [B, L_local, Hkv, D], as
flash_attn_func), the same B, heads and head dims on every rank.

- zigzag=True (the default; load-balanced for causal): the global sequence of
  length L = W * L_local (W = the group's size) is cut into 2W chunks of
  c = L_local / 2 rows; rank r holds chunks r and 2W-1-r, one after the other
  (so L_local must be even). Rank 0 of 2: chunks 0 and 3; rank 1: chunks 1, 2.
- zigzag=False: rank r holds the contiguous rows [r L_local, (r+1) L_local).

shard_sequence / unshard_sequence cut a global tensor into a rank's slice and
put the slices of all ranks back together (no communication).

Forward: W steps; at step t rank r attends its queries to the K/V block of rank
(r - t) mod W with flashattn's attention(..., return_lse=True) (only the query
and key ranges that see something, with the causal / window band expressed in
the block's local positions) while the next block is sent/received
(batch_isend_irecv: overlapped with the compute where the backend allows; NCCL
runs it on its own stream), and merges the partial result into its running
(o, lse) with merge_states (float64 inside; the running o is kept in float32,
float64 for float64 inputs).

Backward: the same ring. At each step the op flashattn::bwd runs on the block
with the GLOBAL o and lse (exact: the block's share of the gradient, as
ring-flash-attn does); dq accumulates locally (float32 / float64), dK/dV
accumulators travel with their blocks and arrive home after W hops, summed in a
fixed order (rank s, s+1, ...), so every run gives the same bits.

Options: causal, window_size (global positions, top-left = bottom-right since
the global Lq = Lk), softcap, softmax_scale, GQA/MQA (Hq = g Hkv), deterministic,
backend, alibi_slopes and dropout_p. ALiBi and dropout need each row's and key's
GLOBAL position: with either, a step makes one call per pair of (query chunk,
key chunk), each contiguous in the global sequence, and passes the chunks'
global starts as fa_options' q_offset and k_offset (with the global causal /
window band), so that the ALiBi distances |i - j| and the dropout keep bits of
(b, h, i, j) are those of one-process attention over the whole sequence. Every
rank must use the same dropout seed: dropout_seed=None draws one on the group's
rank 0 and broadcasts it. Not offered: masks, biases, padded lengths (seqlens). Packed sequences (varlen):
ring_flash_attn_varlen_func in _ring_varlen.py, on this ring (_RingAttention
takes a layout that says which calls each step makes).
"""

import math
from typing import NamedTuple, Optional

import torch
import torch.distributed as dist

from .. import _capi
from . import _ops
from ._attention import _check_4d, _rng, alibi_tensor, attention
from ._kvcache import merge_states

_INF = math.inf


# ---- layout ------------------------------------------------------------------
def _chunks(rank, world, zigzag):
    """The global chunk indices a rank holds and their count."""
    return ((rank, 2 * world - 1 - rank), 2 * world) if zigzag else ((rank,), world)


def shard_sequence(x, rank, world_size, *, zigzag=True, dim=1):
    """Rank `rank`'s slice of a global tensor x (sequence along `dim`, dim 1 for
    [B, L, H, D]): chunks rank and 2W-1-rank of 2W (zigzag) or chunk rank of W."""
    idx, n = _chunks(rank, world_size, zigzag)
    if x.shape[dim] % n:
        raise _capi.invalid(
            f"sequence length {x.shape[dim]} (dim {dim}) is not a multiple of {n} chunks", "FA_ERR_SHAPE"
        )
    parts = x.chunk(n, dim)
    return torch.cat([parts[i] for i in idx], dim)


def unshard_sequence(shards, *, zigzag=True, dim=1):
    """The global tensor from every rank's slice (shards[r] = rank r's), the
    inverse of shard_sequence (e.g. after dist.all_gather)."""
    world = len(shards)
    n = 2 * world if zigzag else world
    parts = [None] * n
    for r, s in enumerate(shards):
        idx, _ = _chunks(r, world, zigzag)
        for i, p in zip(idx, s.chunk(len(idx), dim)):
            parts[i] = p
    return torch.cat(parts, dim)


def _segments(rank, world, L, zigzag):
    """[(global start, local start, length)] of a rank's rows."""
    idx, n = _chunks(rank, world, zigzag)
    c = L // len(idx)
    return [(i * c, j * c, c) for j, i in enumerate(idx)]


# ---- which query rows see which keys of a block --------------------------------
def _band(delta, n, m, causal, wl, wr):
    """Rows i in [0, n) see keys j in [0, m) where lo <= j - i <= hi (delta = the
    rows' global start - the keys' global start): (lo, hi) clipped to the
    differences that occur, None when nothing is visible."""
    lo = delta - wl if wl >= 0 else -_INF
    hi = delta + (0 if causal else wr) if (causal or wr >= 0) else _INF
    lo, hi = max(lo, -(n - 1)), min(hi, m - 1)
    return None if lo > hi else (int(lo), int(hi))


def _call(band, q0, n, k0, m):
    """One C call for a visible band of the rows [q0, q0+n) and keys [k0, k0+m):
    (qa, qb, ka, kb, left, right), the ranges cut down to those that see something
    and the band as a top-left window (-1 = unbounded)."""
    lo, hi = band
    qa, qb = max(0, -hi), min(n, m - lo)
    ka, kb = max(0, lo), min(m, n + hi)
    lo, hi = lo - ka + qa, hi - ka + qa  # in the cut ranges: lo <= 0 <= hi
    left = -1 if -lo >= qb - qa - 1 else -lo
    right = -1 if hi >= kb - ka - 1 else hi
    return (q0 + qa, q0 + qb, k0 + ka, k0 + kb, left, right)


def _plan(qsegs, ksegs, causal, wl, wr):
    """The calls for a rank's queries (segments qsegs) against a block of keys
    (ksegs): one over everything when the band in local positions is the global
    one, else one per key segment or query segment that is all-visible, else one
    per pair of segments."""
    glob = {(a, b): _band(qg - kg, n, m, causal, wl, wr) for a, (qg, _, n) in enumerate(qsegs)
            for b, (kg, _, m) in enumerate(ksegs)}  # fmt: skip
    full = {(a, b): (-(n - 1), m - 1) for a, (_, _, n) in enumerate(qsegs) for b, (_, _, m) in enumerate(ksegs)}
    Lq, Lk = sum(s[2] for s in qsegs), sum(s[2] for s in ksegs)
    local = {(a, b): _band(ql - kl, n, m, causal, wl, wr) for a, (_, ql, n) in enumerate(qsegs)
             for b, (_, kl, m) in enumerate(ksegs)}  # fmt: skip
    if local == glob:
        whole = _band(0, Lq, Lk, causal, wl, wr)
        return [] if whole is None else [_call(whole, 0, Lq, 0, Lk)]
    rows, cols = range(len(qsegs)), range(len(ksegs))
    for groups, outer in (([[(a, b) for a in rows] for b in cols], "k"), ([[(a, b) for b in cols] for a in rows], "q")):
        if all(all(glob[p] == full[p] for p in g) or all(glob[p] is None for p in g) for g in groups):
            calls = []
            for g in groups:
                if glob[g[0]] is None:
                    continue
                if outer == "k":
                    _, kl, m = ksegs[g[0][1]]
                    calls.append((0, Lq, kl, kl + m, -1, -1))
                else:
                    _, ql, n = qsegs[g[0][0]]
                    calls.append((ql, ql + n, 0, Lk, -1, -1))
            return calls
    return [_call(glob[(a, b)], qsegs[a][1], qsegs[a][2], ksegs[b][1], ksegs[b][2])
            for a in rows for b in cols if glob[(a, b)] is not None]  # fmt: skip


# ---- which calls a ring step makes ------------------------------------------------
class _Call(NamedTuple):
    """One C call of a ring step: the query rows and the key rows it takes (along
    L: a slice, or an index tensor for rows gathered from packed sequences), the
    band as a top-left window (-1 = unbounded) and, for packed sequences, the
    cu_seqlens of the rows taken (None: dense rows, one problem per batch entry)."""

    q: object
    k: object
    left: int
    right: int
    cu_q: Optional[torch.Tensor] = None
    cu_k: Optional[torch.Tensor] = None
    q_pos: int = 0  # with positions: global position of the call's first row / key (fa_options' q_offset,
    k_pos: int = 0  # k_offset); left / right are then the global band's


class _DenseLayout:
    """ring_attention's layout: L_local rows per batch entry, all of one sequence."""

    def __init__(self, L, zigzag, causal, wl, wr, positions=False):
        self.L, self.zigzag, self.band, self.positions = L, zigzag, (causal, wl, wr), positions

    def calls(self, rank, src, world):
        segs = lambda r: _segments(r, world, self.L, self.zigzag)  # noqa: E731
        if self.positions:
            return _position_calls(segs(rank), segs(src), *self.band)
        return [_Call(slice(qa, qb), slice(ka, kb), left, right)
                for qa, qb, ka, kb, left, right in _plan(segs(rank), segs(src), *self.band)]  # fmt: skip


def _position_calls(qsegs, ksegs, causal, wl, wr):
    """One call per (query segment, key segment) whose band is not empty, each
    contiguous in the global sequence: its rows cut to those that see something,
    and their global starts as q_pos / k_pos, with the GLOBAL band (causal folded
    in as right = 0), which C measures on positions."""
    left, right = wl, (0 if causal else wr)
    calls = []
    for qg, ql, n in qsegs:
        for kg, kl, m in ksegs:
            band = _band(qg - kg, n, m, causal, wl, wr)
            if band is None:
                continue
            qa, qb, ka, kb, _, _ = _call(band, ql, n, kl, m)
            calls.append(_Call(slice(qa, qb), slice(ka, kb), left, right, q_pos=qg + qa - ql, k_pos=kg + ka - kl))
    return calls


# rows along L of C's [B, H, L, ...] views: a slice (a view) or an index tensor (a gathered copy)
def _take(x, sel):
    return x[:, :, sel] if isinstance(sel, slice) else x.index_select(2, sel)


def _put(x, sel, val):
    if isinstance(sel, slice):
        x[:, :, sel] = val
    else:
        x.index_copy_(2, sel, val.to(x.dtype))


def _add(x, sel, val):
    if isinstance(sel, slice):
        x[:, :, sel] += val
    else:
        x.index_add_(2, sel, val.to(x.dtype))


# ---- the merge -------------------------------------------------------------------
def _merge(acc_o, acc_lse, o, lse):
    """(o, lse) of the running result merged with a block's, [B, H, n, Dv] / [B, H, n]:
    flashattn's merge_states (DESIGN.md: partial results combine only through it)."""
    return merge_states([acc_o, o], [acc_lse, lse])


# ---- communication ----------------------------------------------------------------
class _Ring:
    def __init__(self, group):
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        to_global = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
        self.next, self.prev = to_global((self.rank + 1) % self.world), to_global((self.rank - 1) % self.world)

    def start(self, tensors):
        """Sends tensors to the next rank and receives the previous rank's into
        new buffers: (buffers, requests to wait on)."""
        bufs = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, b, self.prev, self.group) for b in bufs]
        return bufs, dist.batch_isend_irecv(ops)

    @staticmethod
    def wait(reqs):
        for r in reqs:
            r.wait()


def _reads_o_lse(q, backend):
    """False for ref (float64 on CPU under "auto"): its backward recomputes P and reads neither o nor lse."""
    return not (backend == "ref" or (backend == "auto" and not q.is_cuda and q.dtype == torch.float64))


def _block_grads(dout, q, k, v, o, lse, scalars, cu=(None, None), alibi=None, rng=None):
    """A block's share of dq, dk, dv ([B, H, L, D] views) given the GLOBAL o and lse:
    flashattn::bwd with them, on a backend that reads them (cpu, cuda). ref reads
    neither, so there the block's gradient is taken through the merge instead:
    with the block's own (o_b, lse_b) and w = exp(lse_b - lse), grad_o = w dO and
    grad_lse_b = c = w (dO.o_b - dO.o), whose gradient is scale c (P_b K) for q
    and P_b^T (scale c q) for k (no softcap: refused there). cu: the calls'
    (cu_seqlens_q, cu_seqlens_k) for packed rows; alibi, rng: the slopes and the
    dropout (seed, offset) tensor. scalars: flashattn::bwd's, scale .. k_offset."""
    opt = (None, None, alibi, None, None) + tuple(cu) + (rng,)  # mask, bias, alibi, seqlens_q/k; cu_seqlens; rng
    if _reads_o_lse(q, scalars[_BACKEND]):
        return _ops.bwd_impl(dout, q, k, v, o, lse, *opt, *scalars, False)[:3]
    o_b, lse_b = _ops.fwd_impl(q, k, v, *opt, *scalars)
    w = torch.where(torch.isinf(lse_b), torch.zeros_like(lse_b), torch.exp(lse_b - lse))
    dq, dk, dv, _ = _ops.bwd_impl(dout * w.unsqueeze(-1), q, k, v, o_b, lse_b, *opt, *scalars, False)
    c = w * ((dout * o_b).sum(-1) - (dout * o).sum(-1))
    scale = (scalars[0] or 1.0 / math.sqrt(q.shape[-1])) * c.unsqueeze(-1)
    # lse_b's gradient goes through the softmax before dropout: P_b K and its backward without it
    nodrop = scalars[:_DROPOUT_P] + (0.0,) + scalars[_DROPOUT_P + 1 :]
    opt = opt[:-1] + (None,)
    pk, _ = _ops.fwd_impl(q, k, k, *opt, *nodrop)
    _, _, dk_extra, _ = _ops.bwd_impl(scale * q, q, k, k, pk, lse_b, *opt, *nodrop, False)
    return dq + scale * pk, dk + dk_extra, dv


# where flashattn::fwd's / bwd's scalars (scale, softcap, causal, bottom_right, left, right,
# dropout_p, deterministic, backend, q_offset, k_offset) hold dropout_p and backend
_DROPOUT_P, _BACKEND = 6, 8


def _acc_dtype(t):
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _window_kwargs(left, right):
    if left == -1 and right == 0:
        return {"causal": True}
    return {} if left == -1 and right == -1 else {"window": (left, right)}


def _t(x):
    """[B, L, H, D] -> C's [B, H, L, D] (a view) and back."""
    return x.transpose(1, 2)


class _RingAttention(torch.autograd.Function):
    """The ring over q, k, v [B, L_local, H, D]; `layout` (_DenseLayout or
    _ring_varlen's) says which calls each step makes."""

    @staticmethod
    def forward(ctx, q, k, v, group, layout, scale, softcap, deterministic, backend, extras=None):
        ring = _Ring(group)
        W, r, L = ring.world, ring.rank, q.shape[1]
        B, H, Dv = q.shape[0], q.shape[2], v.shape[3]
        acc_o = torch.zeros((B, H, L, Dv), dtype=_acc_dtype(q), device=q.device)
        acc_lse = torch.full((B, H, L), -_INF, dtype=_ops._lse_dtype(q), device=q.device)
        opts = dict(scale=scale, softcap=softcap, deterministic=deterministic, backend=backend)
        alibi, p, seed, offset = extras or (None, 0.0, 0, 0)
        if alibi is not None or p:
            opts.update(alibi_slopes=alibi, dropout_p=p, dropout_seed=seed, dropout_offset=offset)
        qt, kb, vb = _t(q), k.contiguous(), v.contiguous()
        for step in range(W):
            nxt = ring.start([kb, vb]) if step + 1 < W else None
            kt, vt = _t(kb), _t(vb)
            for c in layout.calls(r, (r - step) % W, W):
                o, lse = attention(_take(qt, c.q), _take(kt, c.k), _take(vt, c.k), return_lse=True,
                                   cu_seqlens_q=c.cu_q, cu_seqlens_k=c.cu_k, **_window_kwargs(c.left, c.right),
                                   q_offset=c.q_pos, k_offset=c.k_pos, **opts)  # fmt: skip
                o = o.to(acc_o.dtype)
                if isinstance(c.q, slice) and c.q.start == 0 and c.q.stop == L:
                    acc_o, acc_lse = _merge(acc_o, acc_lse, o, lse)
                else:
                    m_o, m_lse = _merge(_take(acc_o, c.q), _take(acc_lse, c.q), o, lse)
                    _put(acc_o, c.q, m_o)
                    _put(acc_lse, c.q, m_lse)
            if nxt is not None:
                ring.wait(nxt[1])
                kb, vb = nxt[0]
        out = _t(acc_o).to(q.dtype).contiguous()
        ctx.save_for_backward(q, k, v, out, acc_lse)
        ctx.args = (group, layout, scale, softcap, deterministic, backend, extras)
        ctx.mark_non_differentiable(acc_lse)
        return out, acc_lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_o, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        group, layout, scale, softcap, deterministic, backend, extras = ctx.args
        alibi, p, seed, offset = extras or (None, 0.0, 0, 0)
        rng = _rng(p, seed, offset)
        ring = _Ring(group)
        W, r = ring.world, ring.rank
        dout, qt, ot = _t(grad_o.contiguous()), _t(q), _t(out)
        dq = torch.zeros(qt.shape, dtype=_acc_dtype(q), device=q.device)
        kb, vb = k.contiguous(), v.contiguous()
        dkv_in = None  # (buffers, requests): the accumulators of the block arriving
        for step in range(W):
            nxt = ring.start([kb, vb]) if step + 1 < W else None
            kt, vt = _t(kb), _t(vb)
            dk = torch.zeros(kt.shape, dtype=_acc_dtype(k), device=k.device)
            dv = torch.zeros(vt.shape, dtype=_acc_dtype(v), device=v.device)
            for c in layout.calls(r, (r - step) % W, W):
                causal = c.left == -1 and c.right == 0
                band = (causal, False, -1 if causal else c.left, -1 if causal else c.right, float(p),
                        bool(deterministic))  # fmt: skip
                dq_, dk_, dv_ = _block_grads(
                    _take(dout, c.q), _take(qt, c.q), _take(kt, c.k), _take(vt, c.k), _take(ot, c.q),
                    _take(lse, c.q), (float(scale or 0.0), float(softcap or 0.0)) + band + (backend, c.q_pos, c.k_pos),
                    (c.cu_q, c.cu_k), alibi, rng,
                )  # fmt: skip
                _add(dq, c.q, dq_)
                _add(dk, c.k, dk_)
                _add(dv, c.k, dv_)
            if dkv_in is not None:  # add this rank's share to what the earlier ranks summed
                ring.wait(dkv_in[1])
                dk, dv = dkv_in[0][0] + dk, dkv_in[0][1] + dv
            dkv_in = ring.start([dk, dv]) if W > 1 else ([dk, dv], [])
            if nxt is not None:
                ring.wait(nxt[1])
                kb, vb = nxt[0]
        ring.wait(dkv_in[1])  # after W hops: this rank's own block, every rank's share summed
        dk, dv = dkv_in[0]
        return (_t(dq).to(q.dtype), _t(dk).to(k.dtype), _t(dv).to(v.dtype)) + (None,) * 7


def check_options(fn, q, k, v, dim, alibi_slopes, dropout_p, softcap, backend, window_size, positions=False):
    """What every ring function checks alike (the same rows of q, k and v along
    dim, the options refused; positions: the ring passes global positions, so
    ALiBi and dropout are taken); (left, right) of window_size."""
    if k.shape[dim] != q.shape[dim] or v.shape[dim] != q.shape[dim]:
        raise _capi.invalid(
            f"{fn}: q, k, v hold {q.shape[dim]}, {k.shape[dim]}, {v.shape[dim]} rows; every rank holds the same "
            "rows of the sequences for all three",
            "FA_ERR_SHAPE",
        )
    if alibi_slopes is not None and not positions:
        raise _capi.error(
            "FA_ERR_UNSUPPORTED",
            f"{fn}: alibi_slopes is not supported (a call over rows of several packed sequences has no one "
            "position offset; ring_attention takes it)",
        )
    if dropout_p and not positions:
        raise _capi.error(
            "FA_ERR_UNSUPPORTED",
            f"{fn}: dropout_p > 0 is not supported (the keep bits of (b, h, i, j) need each packed sequence's "
            "own positions, which one call over several sequences cannot pass; ring_attention takes it)",
        )
    if softcap and not _reads_o_lse(q, backend):
        raise _capi.error(
            "FA_ERR_UNSUPPORTED",
            f"{fn}: softcap is not supported on the ref backend (float64 on CPU): its backward reads "
            "neither o nor lse, and the gradient through a block's lse under softcap is not expressible",
        )
    try:
        wl, wr = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise _capi.invalid(f"window_size = {window_size!r}, expected a pair (left, right); -1 = unbounded") from None
    if not dist.is_available() or not dist.is_initialized():
        raise _capi.invalid(f"{fn} needs an initialized torch.distributed process group")
    return wl, wr


def ring(q, k, v, group, layout, softmax_scale, softcap, deterministic, backend, extras=None):
    """(o, lse) of the ring over q, k, v [B, L_local, H, D] (with autograd); extras:
    (alibi slopes tensor or None, dropout_p, seed, offset), layout with positions."""
    return _RingAttention.apply(q, k, v, group, layout, softmax_scale, softcap, deterministic, backend, extras)


def _shared_seed(q, group):
    """A dropout seed drawn on the group's rank 0 (torch's generator) and broadcast to every rank."""
    seed = torch.randint(0, 2**62, (1,), dtype=torch.int64).to(q.device)
    src = dist.get_global_rank(group, 0) if group is not None else 0
    dist.broadcast(seed, src, group=group)
    return int(seed.item())


def ring_attention(
    q,
    k,
    v,
    group=None,
    *,
    causal=False,
    softmax_scale=None,
    zigzag=True,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    dropout_p=0.0,
    deterministic=False,
    backend="auto",
    return_lse=False,
    dropout_seed=None,
    dropout_offset=0,
):
    """Exact attention over a sequence split across the ranks of `group` (None:
    the default group), with autograd.

    q [B, L_local, Hq, D], k [B, L_local, Hkv, D], v [B, L_local, Hkv, Dv] (as
    flash_attn_func): this rank's rows of the global sequence, laid out as
    zigzag says (module docstring; shard_sequence makes them). Returns o
    [B, L_local, Hq, Dv] (and lse [B, Hq, L_local], float32 / float64, the
    global log-sum-exp of this rank's rows, if return_lse). causal and
    window_size (left, right; -1 = unbounded) act on global positions;
    softcap, softmax_scale (None = 1/sqrt(D)), GQA, deterministic and backend
    as in attention(). alibi_slopes [Hq] (or [1, Hq]) and dropout_p act on global
    positions: the same ALiBi distances and dropout keep bits as one-process
    attention over the whole sequence with the same dropout_seed and
    dropout_offset (seed None: drawn on the group's rank 0, broadcast).
    """
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        _check_4d(x, n, "[B, L_local, H, D]")
    wl, wr = check_options("ring_attention", q, k, v, 1, alibi_slopes, dropout_p, softcap, backend, window_size, True)
    if zigzag and q.shape[1] % 2:
        raise _capi.invalid(
            f"ring_attention: zigzag needs an even L_local (two chunks), got {q.shape[1]}", "FA_ERR_SHAPE"
        )
    extras = None
    if alibi_slopes is not None or dropout_p:
        alibi = alibi_tensor(alibi_slopes, q.shape[2], q.device)
        seed = (_shared_seed(q, group) if dropout_seed is None else int(dropout_seed)) if dropout_p else 0
        extras = (alibi, float(dropout_p), seed, int(dropout_offset))
    layout = _DenseLayout(q.shape[1], bool(zigzag), bool(causal), wl, wr, positions=extras is not None)
    o, lse = ring(q, k, v, group, layout, softmax_scale, softcap, deterministic, backend, extras)
    return (o, lse) if return_lse else o

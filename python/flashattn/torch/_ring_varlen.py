"""Context parallel (ring) attention over packed sequences (varlen), as
ring-flash-attn's zigzag varlen: every packed sequence is split across the ranks
of the group the way ring_attention splits one sequence, and each rank holds,
one sequence after the other, its share of every sequence.

Layout. cu_seqlens [num_seqs + 1] are the GLOBAL cumulative lengths (int32,
starting at 0), the same on every rank. A sequence of length N is cut into 2W
chunks (zigzag=True, W = the group's size; rank r holds chunks r and 2W-1-r)
or W chunks (zigzag=False; rank r holds chunk r), so N must be a multiple of
2W (zigzag) or W. Rank r's q, k, v are [total / W, H, D]: for each sequence in
order its N / W rows (so the local cumulative lengths are cu_seqlens / W).
shard_varlen / unshard_varlen cut a packed global tensor into a rank's share
and put the shares back together (no communication).

The ring is ring_attention's (_ring.py: the same steps, send/recv overlap, merge
through merge_states, backward with dK/dV travelling home in a fixed order);
only the calls differ. At each step the rows of every sequence that see a block's
keys are planned per sequence as ring_attention plans them (_ring._plan), and the
per-sequence calls that share a band are gathered into ONE varlen call
(cu_seqlens of the rows taken): without a window that is one call a step
(causal zigzag: the first chunk of every sequence's keys, or the second chunk
of every sequence's queries, as ring-flash-attn does). A window that cuts
through the chunks shifts with the chunk length, and a C call takes one window:
then sequences of different lengths take separate calls (up to one per distinct
length). Positions (causal, window) are those inside each sequence. The plan is
kept for the backward and for the next calls with the same cu_seqlens and
options (every layer of a model): the last 8 are kept.
"""

import collections
import functools

import numpy as np
import torch

from .. import _capi
from ._ring import _Call, _plan, _segments, check_options, ring, shard_sequence, unshard_sequence


def _lengths(cu_seqlens, arg="cu_seqlens"):
    """cu_seqlens as a list of Python ints, checked: 1-d, integers, from 0, non-decreasing."""
    t = torch.as_tensor(cu_seqlens)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise _capi.invalid(f"{arg}.dtype = {t.dtype}, expected int32 cumulative lengths", "FA_ERR_DTYPE")
    cu = t.tolist()
    if t.dim() != 1 or len(cu) < 2:
        raise _capi.invalid(f"{arg} has shape {tuple(t.shape)}, expected [num_seqs + 1]", "FA_ERR_SHAPE")
    if cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        shown = f"{cu[:9]}"[:-1] + (", ...]" if len(cu) > 9 else "]")
        raise _capi.invalid(f"{arg} = {shown} must start at 0 and never decrease", "FA_ERR_SHAPE")
    return cu


def _divisible(cu, world, zigzag, arg="cu_seqlens"):
    n = 2 * world if zigzag else world
    for s, (a, b) in enumerate(zip(cu, cu[1:])):
        if (b - a) % n:
            why = f"2 x world size {world} chunks (zigzag=True)" if zigzag else f"world size {world} (zigzag=False)"
            raise _capi.invalid(
                f"{arg}: sequence {s} has length {b - a}, not a multiple of {n} = {why}", "FA_ERR_SHAPE"
            )


def shard_varlen(x, cu_seqlens, rank, world_size, *, zigzag=True, dim=0):
    """Rank `rank`'s share of a packed global tensor x (tokens along `dim`, dim 0
    for [total, H, D]): for each sequence of cu_seqlens (global) in order, its
    chunks rank and 2W-1-rank of 2W (zigzag) or its chunk rank of W."""
    cu = _lengths(cu_seqlens)
    _divisible(cu, world_size, zigzag)
    if x.shape[dim] != cu[-1]:
        raise _capi.invalid(f"x has {x.shape[dim]} tokens along dim {dim}, cu_seqlens[-1] = {cu[-1]}", "FA_ERR_SHAPE")
    parts = [shard_sequence(x.narrow(dim, a, b - a), rank, world_size, zigzag=zigzag, dim=dim)
             for a, b in zip(cu, cu[1:]) if b > a]  # fmt: skip
    return torch.cat(parts, dim) if parts else x.narrow(dim, 0, 0)


def unshard_varlen(shards, cu_seqlens, *, zigzag=True, dim=0):
    """The packed global tensor from every rank's share (shards[r] = rank r's),
    the inverse of shard_varlen (e.g. after dist.all_gather)."""
    cu, world = _lengths(cu_seqlens), len(shards)
    _divisible(cu, world, zigzag)
    parts = [unshard_sequence([s.narrow(dim, a // world, (b - a) // world) for s in shards], zigzag=zigzag, dim=dim)
             for a, b in zip(cu, cu[1:]) if b > a]  # fmt: skip
    return torch.cat(parts, dim) if parts else shards[0].narrow(dim, 0, 0)


@functools.lru_cache(maxsize=4096)
def _seq_calls(n, rank, src, world, zigzag, causal, wl, wr):
    """_plan's calls for one sequence of n local rows (the same for every
    sequence of that length), each with its slot: the how-many-th call of the
    sequence with that band."""
    seen, calls = {}, []
    for qa, qb, ka, kb, left, right in _plan(
        _segments(rank, world, n, zigzag), _segments(src, world, n, zigzag), causal, wl, wr
    ):
        seen[(left, right)] = seen.get((left, right), -1) + 1
        calls.append((qa, qb, ka, kb, left, right, seen[(left, right)]))
    return tuple(calls)


def _rows(ranges, device):
    """The rows of ranges [(start, stop)] (a slice when they follow each other,
    else an index) and their cu_seqlens, on the device (built with numpy: torch's
    small ops cost more here)."""
    starts, stops = np.asarray(ranges, dtype=np.int64).reshape(-1, 2).T
    cu = np.concatenate(([0], np.cumsum(stops - starts)))
    if all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1)):
        sel = slice(ranges[0][0], ranges[-1][1])
    else:
        sel = torch.from_numpy(np.arange(cu[-1]) + np.repeat(starts - cu[:-1], stops - starts)).to(device)
    return sel, torch.from_numpy(cu.astype(np.int32)).to(device)


class _VarlenLayout:
    """The calls of a ring step over packed sequences: each sequence's calls
    (_plan in its own positions), those with the same band gathered into one
    varlen call. Built once per (rank, source), kept for the backward and for
    the next calls with the same cu_seqlens and options (_layout)."""

    def __init__(self, cu, zigzag, causal, wl, wr, device):
        self.cu, self.opts, self.device = cu, (zigzag, causal, wl, wr), device
        self.cache = {}

    def calls(self, rank, src, world):
        if (rank, src, world) not in self.cache:
            self.cache[(rank, src, world)] = self._build(rank, src, world)
        return self.cache[(rank, src, world)]

    def _build(self, rank, src, world):
        groups = {}  # (left, right, slot) -> [(qa, qb, ka, kb)], at most one range of each sequence
        for a, b in zip(self.cu, self.cu[1:]):
            off, n = a // world, (b - a) // world
            for qa, qb, ka, kb, left, right, slot in _seq_calls(n, rank, src, world, *self.opts) if n else ():
                groups.setdefault((left, right, slot), []).append((off + qa, off + qb, off + ka, off + kb))
        calls = []
        for (left, right, _), rows in groups.items():
            qsel, cu_q = _rows([r[:2] for r in rows], self.device)
            ksel, cu_k = _rows([r[2:] for r in rows], self.device)
            calls.append(_Call(qsel, ksel, left, right, cu_q, cu_k))
        return calls


_LAYOUTS = collections.OrderedDict()  # the last few layouts: every layer of a model calls with the same cu_seqlens


def _layout(cu, zigzag, causal, wl, wr, device):
    key = (tuple(cu), zigzag, causal, wl, wr, device)
    layout = _LAYOUTS.pop(key, None) or _VarlenLayout(cu, zigzag, causal, wl, wr, device)
    _LAYOUTS[key] = layout  # the most recent last
    while len(_LAYOUTS) > 8:
        _LAYOUTS.pop(next(iter(_LAYOUTS)), None)
    return layout


def ring_flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens,
    max_seqlen=None,
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
):
    """Exact attention over packed sequences split across the ranks of `group`
    (None: the default group), with autograd.

    q [total_local, Hq, D], k [total_local, Hkv, D], v [total_local, Hkv, Dv]:
    this rank's share of every sequence, packed (module docstring;
    shard_varlen makes them); cu_seqlens [num_seqs + 1] the GLOBAL cumulative
    lengths, the same on every rank, each length a multiple of 2W (zigzag) or W,
    so that total_local = cu_seqlens[-1] / W. max_seqlen is accepted for
    compatibility and not read. Returns o [total_local, Hq, Dv] (and lse
    [Hq, total_local], the global log-sum-exp of this rank's rows, if
    return_lse). causal and window_size act on positions inside each sequence;
    softcap, softmax_scale, GQA, deterministic and backend as in ring_attention;
    alibi_slopes and dropout_p > 0 raise UnsupportedError.
    """
    fn = "ring_flash_attn_varlen_func"
    for x, n in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise _capi.invalid(f"{fn}: {n} is {got}, expected a tensor [total_local, H, D]", "FA_ERR_SHAPE")
    wl, wr = check_options(fn, q, k, v, 0, alibi_slopes, dropout_p, softcap, backend, window_size)
    world = torch.distributed.get_world_size(group)
    cu = _lengths(cu_seqlens)
    _divisible(cu, world, zigzag)
    if cu[-1] != world * q.shape[0]:
        raise _capi.invalid(
            f"{fn}: cu_seqlens[-1] = {cu[-1]} tokens in all, but q holds {q.shape[0]} tokens on each of "
            f"{world} ranks ({world * q.shape[0]}); cu_seqlens are the global cumulative lengths",
            "FA_ERR_SHAPE",
        )
    layout = _layout(cu, bool(zigzag), bool(causal), wl, wr, q.device)
    o, lse = ring(q[None], k[None], v[None], group, layout, softmax_scale, softcap, deterministic, backend)
    return (o[0], lse[0]) if return_lse else o[0]

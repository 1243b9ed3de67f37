"""The FP8 (e4m3) forward for torch tensors: torch.float8_e4m3fn q, k, v
with FlashAttention 3's q_descale / k_descale / v_descale ([B, Hkv] float32,
or numbers), o in bfloat16 (default) or float16. flash_attn_func and
attention() route here when q is float8_e4m3fn.

Forward only (FP8 has no backward in flashattn or FlashAttention 3): no
autograd, and not a torch.library op (torch.compile breaks the graph here).
CUDA tensors run on the cuda backend (sm_90a); CPU tensors on ref (the cpu
backend has no FP8). The rule is docs/semantics.md's "FP8 (e4m3)".
"""

import torch

from .. import _capi
from ._ops import _context, _launch, like_strides

_OUT = {None: torch.bfloat16, torch.bfloat16: torch.bfloat16, torch.float16: torch.float16}
_CODES = {torch.float8_e4m3fn: _capi.F8_E4M3, torch.bfloat16: _capi.BF16, torch.float16: _capi.F16}


def is_fp8(t):
    return torch.is_tensor(t) and t.dtype == torch.float8_e4m3fn


def _tensor(t, arg):
    code = _CODES.get(t.dtype)
    if code is None:
        raise _capi.invalid(f"{arg}.dtype = {t.dtype}: the FP8 forward takes float8_e4m3fn q, k, v", "FA_ERR_DTYPE")
    mem = _capi.MEMORY_CUDA if t.is_cuda else _capi.MEMORY_HOST
    return _capi.tensor(t.data_ptr(), code, tuple(t.shape), t.stride(), mem)


def _descale(x, arg, device, keep):
    """A number or a float32 tensor of at most 2 dims [B, Hkv] (broadcast)."""
    if x is None:
        return None
    t = x if torch.is_tensor(x) else torch.tensor(float(x), dtype=torch.float32, device=device)
    if t.dtype != torch.float32:
        raise _capi.invalid(f"{arg}.dtype = {t.dtype}, expected float32", "FA_ERR_DTYPE")
    if t.dim() > 2:
        raise _capi.invalid(f"{arg} has shape {tuple(t.shape)}, expected [B, Hkv] or fewer dims", "FA_ERR_SHAPE")
    keep.append(t)
    shape = (1,) * (2 - t.dim()) + tuple(t.shape) + (1, 1)
    strides = (0,) * (2 - t.dim()) + tuple(t.stride()) + (0, 0)
    mem = _capi.MEMORY_CUDA if t.is_cuda else _capi.MEMORY_HOST
    return _capi.tensor(t.data_ptr(), _capi.F32, shape, strides, mem)


def forward(q, k, v, *, q_descale=None, k_descale=None, v_descale=None, out_dtype=None, backend="auto", **options):
    """q [B, Hq, Lq, D], k, v [B, Hkv, Lk, D / Dv] (views of any strides) ->
    (o [B, Hq, Lq, Dv] in out_dtype, lse [B, Hq, Lq] float32). options: the
    C option names (_capi.options); cu_seqlens_q/k as int32 tensors."""
    if out_dtype not in _OUT:
        raise _capi.invalid(f"out_dtype = {out_dtype}: the FP8 forward writes bfloat16 or float16", "FA_ERR_DTYPE")
    keep = []
    cu = options.get("cu_seqlens_q")
    if cu is not None:
        options["num_seqs"] = cu.shape[0] - 1
    for name in ("seqlens_q", "seqlens_k", "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes"):
        t = options.get(name)
        if t is not None:
            keep.append(t)
            options[name] = t.data_ptr()
    opt = _capi.options(
        q_descale=_descale(q_descale, "q_descale", q.device, keep),
        k_descale=_descale(k_descale, "k_descale", q.device, keep),
        v_descale=_descale(v_descale, "v_descale", q.device, keep),
        **options,
    )
    shape, strides = like_strides(q.shape, q.stride(), v.shape[-1])
    o = torch.empty_strided(shape, strides, dtype=_OUT[out_dtype], device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if cu is not None:  # C writes only the packed sequences' rows
        o.zero_()
        lse.fill_(float("-inf"))
    ctx = _context(q)
    code = _capi.code_of(backend, _capi.BACKENDS, "backend")
    ts = [_tensor(t, n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o"))]
    tl = _capi.tensor(lse.data_ptr(), _capi.F32, tuple(lse.shape), lse.stride(), ts[3].memory)
    _launch(q, _capi.forward, ctx, code, ts[0], ts[1], ts[2], opt, ts[3], tl)
    return o, lse


def _hadamard(n, device):
    """The orthonormal Hadamard matrix of order n (a power of 2), Sylvester's."""
    if n < 1 or n & (n - 1):
        raise _capi.invalid(f"hadamard: the head dim {n} is not a power of 2", "FA_ERR_UNSUPPORTED")
    h = torch.ones(1, 1, dtype=torch.float32, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n**0.5


def quantize(q, k, v, *, layout="bshd", hadamard=False):
    """q, k, v (any float dtype) -> (q8, k8, v8, q_descale, k_descale, v_descale)
    for the FP8 forward: each tensor scaled so that its largest magnitude per
    (sequence, kv head) is e4m3's 448, rounded to float8_e4m3fn; descales
    float32 [B, Hkv] (q's over the query heads of each kv head's group, as
    FlashAttention 3 indexes q_descale).

    hadamard=True first rotates the head dim of q and k by the same
    orthonormal Hadamard matrix (D a power of 2): scores are unchanged
    (q H . k H = q . k), while a few large channels (outliers) are spread
    over all of them, so the per-head scale wastes less of e4m3's 3 bits
    (the "incoherent processing" of QuIP / FlashAttention 3's paper). v is
    not rotated (o would come out rotated)."""
    if layout not in ("bshd", "bhsd"):
        raise _capi.invalid(f"layout = {layout!r}, expected 'bshd' or 'bhsd'")
    if layout == "bhsd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    B, Hq, Hkv = q.shape[0], q.shape[2], k.shape[2]
    if Hq % Hkv:
        raise _capi.invalid(f"q has {Hq} heads, not a multiple of the {Hkv} heads of k and v", "FA_ERR_HEADS")
    q, k, v = (x.float() for x in (q, k, v))
    if hadamard:
        q = q @ _hadamard(q.shape[-1], q.device)
        k = k @ _hadamard(k.shape[-1], k.device)

    def scaled(x, groups):
        # amax over (L, heads of a group, D) per (b, kv head)
        xs = x.unflatten(2, (Hkv, groups))
        amax = xs.abs().amax(dim=(1, 3, 4)).clamp_min(1e-12)  # [B, Hkv]
        x8 = (xs * (448.0 / amax)[:, None, :, None, None]).to(torch.float8_e4m3fn).flatten(2, 3)
        return x8, (amax / 448.0).float()

    (q8, qd), (k8, kd), (v8, vd) = scaled(q, Hq // Hkv), scaled(k, 1), scaled(v, 1)
    if layout == "bhsd":
        q8, k8, v8 = (x.transpose(1, 2) for x in (q8, k8, v8))
    assert qd.shape == (B, Hkv)
    return q8, k8, v8, qd, kd, vd

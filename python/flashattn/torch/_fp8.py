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

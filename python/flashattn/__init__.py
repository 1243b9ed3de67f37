"""flashattn: exact attention (FlashAttention), forward and backward, over
the C library's three backends (ref, cpu, cuda).

numpy:   flashattn.attention(q, k, v, **options) -> (o, lse)
         flashattn.attention_backward(q, k, v, o, lse, do, **options)
PyTorch: flashattn.torch.flash_attn_func(...), flashattn.torch.scaled_dot_product_attention(...)

Every rule (masks, dropout, validation, dispatch) lives in C; this package
maps names and arrays onto the public header and turns a C error into an
exception carrying the C message.
"""

import collections
import ctypes as _C

import numpy as _np

from . import _capi
from ._capi import (
    FlashAttnError,
    FlashAttnMemoryError,
    FlashAttnRuntimeError,
    FlashAttnTypeError,
    FlashAttnValueError,
    UnsupportedError,
    dispatch_report,
    last_backend,
)
from ._kvcache import attention_kvcache, merge_states
from ._ndarray import attention, attention_backward

__version__ = "0.1.0"

__all__ = [
    "attention",
    "attention_backward",
    "attention_kvcache",
    "merge_states",
    "dropout_keep",
    "backends",
    "cpu_isas",
    "cpu_plan",
    "cuda_device",
    "last_backend",
    "dispatch_report",
    "library_path",
    "FlashAttnError",
    "FlashAttnValueError",
    "FlashAttnTypeError",
    "FlashAttnMemoryError",
    "FlashAttnRuntimeError",
    "UnsupportedError",
]

Backend = collections.namedtuple("Backend", "name available reason")
CpuPlan = collections.namedtuple("CpuPlan", "isa block_q block_k working_set_bytes l1d_bytes l2_bytes")


def library_path():
    """The libflashattn this package calls."""
    return _capi.lib._name


def backends():
    """{name: Backend(name, available, reason)} for ref, cpu and cuda: what
    this build and machine can run, and why not where it cannot."""
    out = {}
    for code, name in enumerate(_capi.BACKENDS):
        if name == "auto":
            continue
        why = _C.create_string_buffer(256)
        st = _capi.lib.fa_backend_available(code, why, len(why))
        out[name] = Backend(name, st == 0, why.value.decode())
    return out


def cpu_isas():
    """The cpu backend's instruction sets this CPU and build have, best first."""
    return [n for i, n in reversed(list(enumerate(_capi.ISAS))) if i and _capi.lib.fa_cpu_isa_supported(i)]


_PLAN_DTYPES = {"float32": _capi.F32, "float64": _capi.F64, "float16": _capi.F16, "bfloat16": _capi.BF16}


def cpu_plan(D, Dv=None, *, isa="auto", block_q=0, block_k=0, dtype="float32"):
    """How the cpu backend tiles head dims D, Dv for inputs of dtype ("float32",
    "bfloat16", ...): the ISA, tile sizes and the bytes one tile step keeps hot
    (flashattn.h's fa_cpu_plan_get_dtype; bf16 on avx512bf16 keeps bf16 tiles
    and pairs, a smaller working set)."""
    if dtype not in _PLAN_DTYPES:
        raise _capi.invalid(f"dtype = {dtype!r}, expected one of {', '.join(map(repr, _PLAN_DTYPES))}", "FA_ERR_DTYPE")
    plan = _capi.CpuPlan()
    st = _capi.lib.fa_cpu_plan_get_dtype(
        _capi.code_of(isa, _capi.ISAS, "isa"),
        _PLAN_DTYPES[dtype],
        D,
        D if Dv is None else Dv,
        block_q,
        block_k,
        _C.byref(plan),
    )
    if st != 0:
        raise _capi.error(st, f"fa_cpu_plan_get_dtype(D={D}, Dv={Dv}, isa={isa!r}, dtype={dtype!r})")
    return CpuPlan(_capi.ISAS[plan.isa], *(getattr(plan, f) for f in CpuPlan._fields[1:]))


def cuda_device():
    """One line on the current CUDA device, or None (with no cuda backend or GPU)."""
    buf = _C.create_string_buffer(256)
    return buf.value.decode() if _capi.lib.fa_cuda_device_describe(buf, len(buf)) == 0 else None


def dropout_keep(shape, p, seed=0, offset=0):
    """The dropout keep-mask that a call with (dropout_p=p, dropout_seed=seed,
    dropout_offset=offset) uses, as a bool array of shape [B, H, Lq, Lk]
    (element (b, h, i, j); bit-identical on every backend)."""
    try:
        B, H, Lq, Lk = (int(n) for n in shape)
    except (TypeError, ValueError):
        raise _capi.invalid(f"shape = {shape!r}, expected (B, H, Lq, Lk)", "FA_ERR_BAD_SIZE") from None
    if not 0 <= int(seed) < 2**64:
        raise _capi.invalid(f"seed = {seed} must be in [0, 2**64)", "FA_ERR_DROPOUT")
    if not 0 <= int(offset) < 2**32:
        raise _capi.invalid(f"offset = {offset} must be in [0, 2**32)", "FA_ERR_DROPOUT")
    n = B * H * Lq * Lk if min(B, H, Lq, Lk) > 0 else 0
    keep = _np.empty(max(n, 1), _np.uint8)
    why = _C.create_string_buffer(256)
    st = _capi.lib.fa_dropout_mask(float(p), int(seed), int(offset), B, H, Lq, Lk, keep.ctypes.data, why, len(why))
    if st != 0:
        raise _capi.error(st, f"dropout_keep: {why.value.decode()}")
    return keep.view(_np.bool_).reshape(B, H, Lq, Lk)
